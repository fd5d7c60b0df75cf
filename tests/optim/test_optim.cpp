// SPDX-License-Identifier: MIT
// Tests of the optimisers (SGD, Adam, AdamW) and clip_grad_norm: torch.optim step for step, state
// included, and their errors.
#include <headwise/layers/layer_norm.hpp>
#include <headwise/optim/adam.hpp>
#include <headwise/optim/clip_grad_norm.hpp>
#include <headwise/optim/sgd.hpp>

#include <algorithm>  // std::copy_n
#include <cmath>      // std::isinf, std::isnan
#include <limits>     // std::numeric_limits
#include <memory>     // std::unique_ptr
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string, std::to_string
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/match.hpp"
#include "support/training_golden.hpp"

namespace test_optim {

using namespace headwise;
using headwise::test::cast;
using headwise::test::load_training_case;
using headwise::test::TrainingCase;

namespace {

template <class T>
constexpr double golden_tol() {
    return std::is_same_v<T, double> ? 1e-12 : 2e-5;
}

const char* const kNames[] = {"weight", "bias"};

/// The case's parameters as tensors with gradients, and Parameter views of them.
template <class T>
struct Params {
    Tensor<T> value[2], grad[2];
    explicit Params(const TrainingCase& c) {
        for (int i = 0; i < 2; ++i) {
            value[i] = cast<T>(c.at(kNames[i]));
            grad[i] = Tensor<T>(value[i].shape());
        }
    }
    std::vector<Parameter<T>> views() {
        return {{"weight", value[0], grad[0]}, {"bias", value[1], grad[1]}};
    }
    void set_grads(const TrainingCase& c, int step) {
        for (int i = 0; i < 2; ++i) {
            const Tensor<T> g = cast<T>(c.at("step" + std::to_string(step) + ".grad." + kNames[i]));
            std::copy_n(g.data(), g.numel(), grad[i].data());
        }
    }
};

/// Runs the case's steps with `opt` over `params`, checking every parameter after every step.
template <class T, class Opt>
void run_steps(const TrainingCase& c, Params<T>& params, Opt& opt) {
    const int steps = static_cast<int>(c.number("steps"));
    REQUIRE(steps >= 5);
    for (int step = 1; step <= steps; ++step) {
        params.set_grads(c, step);
        opt.step();
        for (int i = 0; i < 2; ++i) {
            CAPTURE(step, kNames[i]);
            HEADWISE_CHECK_CLOSE(params.value[i],
                                 c.at("step" + std::to_string(step) + "." + kNames[i]),
                                 golden_tol<T>());
        }
    }
}

}  // namespace

TEMPLATE_TEST_CASE("SGD matches torch.optim.SGD step for step, momentum buffer included",
                   "[optim][golden]", float, double) {
    using T = TestType;
    const std::string name = GENERATE("sgd_plain", "sgd_momentum", "sgd_nesterov");
    CAPTURE(name);
    const TrainingCase c = load_training_case(name);
    Params<T> params(c);
    SGDOptions o;
    o.lr = c.number("lr");
    o.momentum = c.number("momentum");
    o.dampening = c.number("dampening");
    o.weight_decay = c.number("weight_decay");
    o.nesterov = c.number("nesterov") != 0;
    SGD<T> opt(params.views(), o);
    run_steps(c, params, opt);
    for (std::size_t i = 0; i < 2; ++i) {
        const std::string key = std::string("state.momentum_buffer.") + kNames[i];
        CHECK(c.has(key) == (opt.momentum_buffer(i).numel() > 0));
        if (c.has(key)) HEADWISE_CHECK_CLOSE(opt.momentum_buffer(i), c.at(key), golden_tol<T>());
    }
}

TEMPLATE_TEST_CASE("Adam and AdamW match torch.optim step for step, state included",
                   "[optim][golden]", float, double) {
    using T = TestType;
    const std::string name =
        GENERATE("adam", "adam_weight_decay", "adam_amsgrad", "adamw", "adamw_strong_decay");
    CAPTURE(name);
    const TrainingCase c = load_training_case(name);
    Params<T> params(c);
    AdamOptions o;
    o.lr = c.number("lr");
    o.beta1 = c.number("beta1");
    o.beta2 = c.number("beta2");
    o.eps = c.number("eps");
    o.weight_decay = c.number("weight_decay");
    o.amsgrad = c.number("amsgrad") != 0;
    std::unique_ptr<headwise::AdamBase<T>> opt;
    if (c.text("kind") == "adamw")
        opt = std::make_unique<AdamW<T>>(params.views(), o);
    else
        opt = std::make_unique<Adam<T>>(params.views(), o);
    run_steps(c, params, *opt);
    for (std::size_t i = 0; i < 2; ++i) {
        const AdamState<T>& s = opt->state(i);
        CHECK(s.step == static_cast<Index>(c.number("steps")));
        const std::string n = kNames[i];
        HEADWISE_CHECK_CLOSE(s.exp_avg, c.at("state.exp_avg." + n), golden_tol<T>());
        HEADWISE_CHECK_CLOSE(s.exp_avg_sq, c.at("state.exp_avg_sq." + n), golden_tol<T>());
        CHECK(c.has("state.max_exp_avg_sq." + n) == o.amsgrad);
        if (o.amsgrad)
            HEADWISE_CHECK_CLOSE(s.max_exp_avg_sq, c.at("state.max_exp_avg_sq." + n),
                                 golden_tol<T>());
    }
}

TEMPLATE_TEST_CASE("clip_grad_norm matches torch.nn.utils.clip_grad_norm_", "[optim][golden]",
                   float, double) {
    using T = TestType;
    const std::string name = GENERATE("clip_l2", "clip_inf", "clip_l2_no_op");
    CAPTURE(name);
    const TrainingCase c = load_training_case(name);
    Tensor<T> value[2], grad[2];
    std::vector<Parameter<T>> ps;
    for (int i = 0; i < 2; ++i) {
        grad[i] = cast<T>(c.at("grad." + std::to_string(i)));
        value[i] = Tensor<T>(grad[i].shape());
        ps.push_back({std::to_string(i), value[i], grad[i]});
    }
    const double total = clip_grad_norm(ps, c.number("max_norm"), c.number("norm_type"));
    CHECK_THAT(total, WithinRel(c.at("total_norm").data()[0], golden_tol<T>()));
    for (int i = 0; i < 2; ++i)
        HEADWISE_CHECK_CLOSE(grad[i], c.at("clipped." + std::to_string(i)), golden_tol<T>());
}

TEMPLATE_TEST_CASE("clip_grad_norm with a NaN or infinite gradient does as torch", "[optim]", float,
                   double) {
    // torch 1.13: a.grad = [1, 2], b.grad = [3, bad, 0.5];
    //   total = torch.nn.utils.clip_grad_norm_([a, b], max_norm=1.0, norm_type=norm_type)
    // bad = NaN: total is NaN and every gradient becomes NaN (the coefficient
    //   clamp(1 / (NaN + 1e-6), max=1) is NaN), for norm_type 1, 2 and inf alike.
    // bad = +-inf: total is +inf, the coefficient 1 / inf = 0: every gradient 0 except the
    //   infinite one, which becomes NaN (inf * 0).
    using T = TestType;
    using limits = std::numeric_limits<double>;
    const double inf = limits::infinity();
    const double norm_type = GENERATE(1.0, 2.0, limits::infinity());
    const double bad = GENERATE(limits::quiet_NaN(), limits::infinity(), -limits::infinity());
    CAPTURE(norm_type, bad);
    Tensor<T> value[2]{Tensor<T>(Shape{2}), Tensor<T>(Shape{3})};
    Tensor<T> grad[2]{Tensor<T>(Shape{2}, {1, 2}),
                      Tensor<T>(Shape{3}, {3, static_cast<T>(bad), T(0.5)})};
    const std::vector<Parameter<T>> ps{{"a", value[0], grad[0]}, {"b", value[1], grad[1]}};
    const double total = clip_grad_norm(ps, 1.0, norm_type);
    if (std::isnan(bad)) {
        CHECK(std::isnan(total));
        for (const Tensor<T>& g : grad)
            for (T v : g) CHECK(std::isnan(v));
    } else {
        CHECK(total == inf);
        for (int i = 0; i < 2; ++i)
            for (Index j = 0; j < grad[i].numel(); ++j) {
                CAPTURE(i, j);
                if (i == 1 && j == 1)
                    CHECK(std::isnan(grad[i].data()[j]));
                else
                    CHECK(grad[i].data()[j] == T(0));
            }
    }
}

TEST_CASE("optimisers step a module's parameters in place through parameters()", "[optim]") {
    LayerNorm<double> ln(3);
    Generator rng(2);
    const Tensor<double> x = Tensor<double>::randn(Shape{4, 3}, rng);
    ln.backward(x, Tensor<double>::ones(Shape{4, 3}));
    SGDOptions o;
    o.lr = 0.5;
    SGD<double> opt(ln.parameters(), o);
    const StateDict<double> grads = ln.grad_dict();
    opt.step();
    for (Index e = 0; e < 3; ++e) CHECK(ln.bias()(e) == -0.5 * grads.at("bias")(e));
    opt.zero_grad();
    for (const Parameter<double>& p : ln.parameters())
        for (double v : p.grad) CHECK(v == 0.0);
}

TEST_CASE("optimiser and clipping errors name the argument and the value", "[optim][errors]") {
    Tensor<float> v(Shape{2}), g(Shape{2});
    const std::vector<Parameter<float>> ps{{"p", v, g}};
    SGDOptions s;
    s.lr = -1.0;
    CHECK_THROWS_MATCHES(SGD<float>(ps, s), std::invalid_argument,
                         Message("headwise::SGD::SGD: options.lr: must be finite and "
                                 "non-negative, got -1.000000"));
    s.lr = 0.1;
    s.nesterov = true;
    CHECK_THROWS_MATCHES(SGD<float>(ps, s), std::invalid_argument,
                         Message("headwise::SGD::SGD: options.nesterov: needs momentum > 0 and "
                                 "dampening == 0, got momentum 0.000000, dampening 0.000000"));
    AdamOptions a;
    a.beta2 = 1.0;
    CHECK_THROWS_MATCHES(AdamW<float>(ps, a), std::invalid_argument,
                         Message("headwise::AdamW::AdamW: options.beta2: must be in [0, 1), got "
                                 "1.000000"));
    CHECK(AdamW<float>(ps).options().weight_decay == 1e-2);
    CHECK(Adam<float>(ps).options().weight_decay == 0.0);
    CHECK_THROWS_MATCHES(clip_grad_norm(ps, -1.0), std::invalid_argument,
                         Message("headwise::clip_grad_norm: max_norm: must be non-negative, got "
                                 "-1.000000"));
    CHECK(clip_grad_norm(ps, 1.0, std::numeric_limits<double>::infinity()) == 0.0);
}

}  // namespace test_optim
