// SPDX-License-Identifier: MIT
// Tests of the losses: cross-entropy (ignore_index, label smoothing) and MSE against torch, their
// gradients by central differences, and their errors.
#include <headwise/gradcheck.hpp>
#include <headwise/losses/cross_entropy.hpp>
#include <headwise/losses/mse.hpp>

#include <cmath>      // std::log, std::isnan, std::isinf
#include <cstdint>    // std::int64_t
#include <limits>     // std::numeric_limits
#include <stdexcept>  // std::invalid_argument, std::out_of_range
#include <string>     // std::string
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/match.hpp"
#include "support/training_golden.hpp"

namespace test_losses {

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
    CHECK(r.checked == 24);  // ignored rows too: their gradient is 0

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
    CHECK(m.checked == 15);
}

TEST_CASE("cross_entropy stays finite for huge logits and is 0 when every target is ignored",
          "[losses]") {
    const Tensor<float> logits(Shape{2, 3}, {1e30f, 0.0f, -1e30f, 50.0f, 50.0f, 50.0f});
    const Tensor<std::int64_t> targets(Shape{2}, {1, 2});
    const LossResult<float> r = cross_entropy<float>(logits, targets);
    CHECK(std::isfinite(r.value));
    CHECK_THAT(r.value, WithinRel((1e30 + std::log(3.0)) / 2, 1e-6));
    // Row 1's loss, log 3, is far below the precision of a sum that holds 1e30, so the value
    // above says nothing about it: each row is checked alone, the other one ignored, in the same
    // tensor beside the huge row.
    CrossEntropyOptions o;
    o.reduction = Reduction::sum;
    const Tensor<std::int64_t> row0(Shape{2}, {1, -100}), row1(Shape{2}, {-100, 2});
    CHECK_THAT(cross_entropy<float>(logits, row0, o).value, WithinRel(1e30, 1e-6));
    CHECK_THAT(cross_entropy<float>(logits, row1, o).value, WithinRel(std::log(3.0), 1e-6));
    // The gradient is per row: (p - onehot(t)) / 2, p = [1, 0, 0] for row 0, uniform for row 1.
    const Tensor<double> grad(Shape{2, 3}, {0.5, -0.5, 0.0, 1.0 / 6, 1.0 / 6, -1.0 / 3});
    for (Index i = 0; i < grad.numel(); ++i) {
        CAPTURE(i);
        CHECK_THAT(r.grad.data()[i], WithinAbs(grad.data()[i], 1e-7));
    }
    const Tensor<std::int64_t> ignored(Shape{2}, {-100, -100});
    const LossResult<float> none = cross_entropy<float>(logits, ignored);
    CHECK(none.value == 0.0);
    for (float v : none.grad) CHECK(v == 0.0f);
}

TEMPLATE_TEST_CASE("cross_entropy with -inf logits gives torch's values", "[losses]", float,
                   double) {
    using T = TestType;
    constexpr double inf = std::numeric_limits<double>::infinity();
    constexpr double nan = std::numeric_limits<double>::quiet_NaN();
    struct Case {
        const char* what;
        std::vector<double> logits;  // [N, 3]
        std::vector<std::int64_t> targets;
        double label_smoothing;
        Reduction reduction;
        double loss;
        std::vector<double> grad;  // [N, 3]
    };
    // Expected values from torch 1.13 in float64: with X = torch.tensor(logits,
    // dtype=torch.float64, requires_grad=True),
    //   l = torch.nn.functional.cross_entropy(X, torch.tensor(targets),
    //                                          label_smoothing=ε, reduction=...)
    //   l.backward()
    // `loss` is l.item() and `grad` is X.grad. A -inf logit has probability 0, so its gradient is
    // 0 - (smoothed) target: finite even where the loss is +inf.
    const double ninf = -inf;
    // One case per line, as a table.
    // clang-format off
    const std::vector<Case> cases{
        {"-inf of another class: finite", {0, ninf, 1}, {0}, 0.0, Reduction::mean,
         1.3132616875182228, {-0.7310585786300049, 0.0, 0.7310585786300049}},
        {"-inf of the target: +inf", {0, ninf, 1}, {1}, 0.0, Reduction::mean, inf,
         {0.2689414213699951, -1.0, 0.7310585786300049}},
        {"two -inf, target certain: 0", {ninf, ninf, 1}, {2}, 0.0, Reduction::mean, 0.0,
         {0.0, 0.0, 0.0}},
        {"two rows, sum", {0, ninf, 1, 1, 2, 3}, {0, 0}, 0.0, Reduction::sum, 3.720867651962603,
         {-0.7310585786300049, 0.0, 0.7310585786300049,
          -0.9099694268296196, 0.24472847105479764, 0.6652409557748218}},
        {"two rows, mean", {0, ninf, 1, 1, 2, 3}, {0, 0}, 0.0, Reduction::mean, 1.8604338259813016,
         {-0.36552928931500245, 0.0, 0.36552928931500245,
          -0.4549847134148098, 0.12236423552739882, 0.3326204778874109}},
        // With ε > 0 every class has target weight ε / C, and -log p of a -inf logit is +inf.
        {"smoothing, -inf of another class: +inf", {0, ninf, 1}, {0}, 0.1, Reduction::mean, inf,
         {-0.6643919119633382, -0.03333333333333333, 0.6977252452966716}},
        {"smoothing, two -inf", {ninf, ninf, 1}, {2}, 0.1, Reduction::sum, inf,
         {-0.03333333333333333, -0.03333333333333333, 0.06666666666666665}},
        // torch gives NaN here ((1 - ε) nll = 0 * inf); headwise leaves the zero-weight term out
        // and gives +inf, the value at every ε < 1. The gradient is torch's.
        {"ε = 1, -inf of the target: +inf", {0, ninf, 1}, {1}, 1.0, Reduction::mean, inf,
         {-0.06439191196333821, -0.3333333333333333, 0.3977252452966716}},
        // No finite logit, or a +inf one: nothing to normalise against, NaN as in torch.
        {"every logit -inf: NaN", {ninf, ninf, ninf}, {0}, 0.0, Reduction::mean, nan,
         {nan, nan, nan}},
        {"a +inf logit: NaN", {0, inf, 1}, {0}, 0.0, Reduction::mean, nan, {nan, nan, nan}},
    };
    // clang-format on
    for (const Case& c : cases) {
        CAPTURE(c.what);
        const Index N = static_cast<Index>(c.targets.size());
        std::vector<T> logits(c.logits.begin(), c.logits.end());
        CrossEntropyOptions o;
        o.label_smoothing = c.label_smoothing;
        o.reduction = c.reduction;
        const LossResult<T> r = cross_entropy<T>(Tensor<T>(Shape{N, 3}, logits),
                                                 Tensor<std::int64_t>(Shape{N}, c.targets), o);
        if (std::isnan(c.loss)) {
            CHECK(std::isnan(r.value));
            for (T v : r.grad) CHECK(std::isnan(v));
            continue;
        }
        if (std::isinf(c.loss))
            CHECK(r.value == c.loss);
        else
            CHECK_THAT(r.value, WithinRel(c.loss, golden_tol<T>()));
        HEADWISE_CHECK_CLOSE(r.grad, Tensor<double>(Shape{N, 3}, c.grad), golden_tol<T>());
    }
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

}  // namespace test_losses
