// SPDX-License-Identifier: MIT
// Tests of the losses: cross-entropy (ignore_index, label smoothing) and MSE against torch, their
// gradients by central differences, and their errors.
#include <headwise/gradcheck.hpp>
#include <headwise/losses/cross_entropy.hpp>
#include <headwise/losses/mse.hpp>

#include <cmath>      // std::log
#include <cstdint>    // std::int64_t
#include <stdexcept>  // std::invalid_argument, std::out_of_range
#include <string>     // std::string
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/match.hpp"
#include "support/training_golden.hpp"

using namespace headwise;
using headwise::test::cast;
using headwise::test::load_training_case;
using headwise::test::TrainingCase;

namespace {
template <class T>
constexpr double golden_tol() {
    return std::is_same_v<T, double> ? 1e-12 : 1e-5;
}
Reduction reduction_of(const TrainingCase& c) {
    return c.text("reduction") == "sum" ? Reduction::sum : Reduction::mean;
}
}  // namespace

TEMPLATE_TEST_CASE("cross_entropy matches torch in value and gradient", "[losses][golden]", float,
                   double) {
    using T = TestType;
    const std::string name =
        GENERATE("cross_entropy_mean_ls0", "cross_entropy_mean_ls1", "cross_entropy_sum_ls0",
                 "cross_entropy_sum_ls1", "cross_entropy_ignore7");
    CAPTURE(name);
    const TrainingCase c = load_training_case(name);
    CrossEntropyOptions o;
    o.ignore_index = static_cast<std::int64_t>(c.number("ignore_index"));
    o.label_smoothing = c.number("label_smoothing");
    o.reduction = reduction_of(c);
    const LossResult<T> r = cross_entropy<T>(cast<T>(c.at("input")), c.indices("target"), o);
    const double expected = c.at("loss").data()[0];
    CHECK_THAT(r.value, WithinRel(expected, golden_tol<T>()));
    HEADWISE_CHECK_CLOSE(r.grad, c.at("grad_input"), golden_tol<T>());
}

TEMPLATE_TEST_CASE("mse_loss matches torch in value and gradient", "[losses][golden]", float,
                   double) {
    using T = TestType;
    const std::string name = GENERATE("mse_mean", "mse_sum");
    CAPTURE(name);
    const TrainingCase c = load_training_case(name);
    const LossResult<T> r =
        mse_loss<T>(cast<T>(c.at("input")), cast<T>(c.at("target")), reduction_of(c));
    CHECK_THAT(r.value, WithinRel(c.at("loss").data()[0], golden_tol<T>()));
    HEADWISE_CHECK_CLOSE(r.grad, c.at("grad_input"), golden_tol<T>());
}

TEST_CASE("cross_entropy and mse_loss pass gradcheck", "[losses][gradcheck]") {
    Generator rng(21);
    const Tensor<double> logits = Tensor<double>::randn(Shape{6, 4}, rng);
    const Tensor<std::int64_t> targets(Shape{6}, {0, 3, -1, 2, 2, 1});
    const double smoothing = GENERATE(0.0, 0.25);
    CAPTURE(smoothing);
    CrossEntropyOptions o;
    o.ignore_index = -1;
    o.label_smoothing = smoothing;
    // The loss is a scalar: wrap it as a [1] tensor and scale the gradient by the upstream one.
    const GradcheckResult r = gradcheck(
        [&](const std::vector<Tensor<double>>& in) {
            return Tensor<double>(Shape{1}, {cross_entropy<double>(in[0], targets, o).value});
        },
        [&](const std::vector<Tensor<double>>& in, const Tensor<double>& dy) {
            Tensor<double> g = cross_entropy<double>(in[0], targets, o).grad;
            for (double& v : g) v *= dy.data()[0];
            return std::vector<Tensor<double>>{std::move(g)};
        },
        {logits}, rng, {1e-5, 1e-7});
    INFO(r.where);
    CHECK(r.ok);

    const Tensor<double> target = Tensor<double>::randn(Shape{3, 5}, rng);
    const GradcheckResult m = gradcheck(
        [&](const std::vector<Tensor<double>>& in) {
            return Tensor<double>(Shape{1}, {mse_loss<double>(in[0], target).value});
        },
        [&](const std::vector<Tensor<double>>& in, const Tensor<double>& dy) {
            Tensor<double> g = mse_loss<double>(in[0], target).grad;
            for (double& v : g) v *= dy.data()[0];
            return std::vector<Tensor<double>>{std::move(g)};
        },
        {Tensor<double>::randn(Shape{3, 5}, rng)}, rng, {1e-5, 1e-7});
    INFO(m.where);
    CHECK(m.ok);
}

TEST_CASE("cross_entropy stays finite for huge logits and is 0 when every target is ignored",
          "[losses]") {
    const Tensor<float> logits(Shape{2, 3}, {1e30f, 0.0f, -1e30f, 50.0f, 50.0f, 50.0f});
    const Tensor<std::int64_t> targets(Shape{2}, {1, 2});
    const LossResult<float> r = cross_entropy<float>(logits, targets);
    CHECK(std::isfinite(r.value));
    CHECK_THAT(r.value, WithinRel((1e30 + std::log(3.0)) / 2, 1e-6));
    for (float v : r.grad) CHECK(std::isfinite(v));
    const Tensor<std::int64_t> ignored(Shape{2}, {-100, -100});
    const LossResult<float> none = cross_entropy<float>(logits, ignored);
    CHECK(none.value == 0.0);
    for (float v : none.grad) CHECK(v == 0.0f);
}

TEST_CASE("loss errors name the function, the argument and the value", "[losses][errors]") {
    const Tensor<double> logits(Shape{2, 3});
    CHECK_THROWS_MATCHES(cross_entropy<double>(logits, Tensor<std::int64_t>(Shape{3})), shape_error,
                         Message("headwise::cross_entropy: targets: expected shape [2], got [3]"));
    CHECK_THROWS_MATCHES(
        cross_entropy<double>(logits, Tensor<std::int64_t>(Shape{2}, {0, 3})), std::out_of_range,
        Message("headwise::cross_entropy: targets: entry 1 is 3, expected a class in [0, 3) or "
                "ignore_index -100"));
    CHECK_THROWS_MATCHES(
        cross_entropy<double>(Tensor<double>(Shape{6}), Tensor<std::int64_t>(Shape{6})),
        shape_error,
        Message("headwise::cross_entropy: logits: expected shape [N, C] with "
                "C > 0, got [6]"));
    CrossEntropyOptions o;
    o.label_smoothing = 1.5;
    CHECK_THROWS_AS(cross_entropy<double>(logits, Tensor<std::int64_t>(Shape{2}), o),
                    std::invalid_argument);
    CHECK_THROWS_MATCHES(mse_loss<double>(logits, Tensor<double>(Shape{3, 2})), shape_error,
                         Message("headwise::mse_loss: target: expected shape [2, 3], got [3, 2]"));
}
