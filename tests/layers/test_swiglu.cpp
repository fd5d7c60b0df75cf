// SPDX-License-Identifier: MIT
// Tests of SiLU, the SwiGLU gate kernels and the SwiGLU feed-forward: transformers' LlamaMLP
// golden parity, plain double loops, gradcheck, extreme values, the module contract and errors.
#include <headwise/gradcheck.hpp>
#include <headwise/layers/swiglu.hpp>
#include <headwise/ops/activation.hpp>
#include <headwise/ops/swiglu.hpp>

#include <cmath>      // std::exp, std::isfinite, std::isnan
#include <limits>     // std::numeric_limits
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/golden.hpp"
#include "support/instantiations.hpp"
#include "support/match.hpp"
#include "support/reference.hpp"
#include "support/tolerance.hpp"
#include "support/training_golden.hpp"

namespace test_swiglu {

using namespace headwise;
using headwise::test::cast;
using headwise::test::kGoldenTolerance;
using headwise::test::Tol;

namespace {

/// SiLU(x) = x / (1 + e^-x) in long double: the oracle (finite for every finite double x).
double reference_silu(double x) {
    const long double v = x;
    return static_cast<double>(v / (1.0L + std::exp(-v)));
}
/// SiLU'(x) = σ(x) (1 + x (1 - σ(x))) in long double, 1 - σ(x) written as σ(-x).
double reference_silu_derivative(double x) {
    const long double v = x;
    const long double s = 1.0L / (1.0L + std::exp(-v)), t = 1.0L / (1.0L + std::exp(v));
    return static_cast<double>(s * (1.0L + v * t));
}

/// y = down(SiLU(gate(x)) ⊙ up(x)) in plain double loops, from a state dict under HF names.
Tensor<double> reference_swiglu(const Tensor<double>& x, const StateDict<double>& sd) {
    const auto bias = [&](const std::string& p) {
        const auto it = sd.find(p + ".bias");
        return it == sd.end() ? Tensor<double>(Shape{0}) : it->second;
    };
    const Tensor<double> g =
        test::reference::linear(x, sd.at("gate_proj.weight"), bias("gate_proj"));
    const Tensor<double> u = test::reference::linear(x, sd.at("up_proj.weight"), bias("up_proj"));
    Tensor<double> h(g.shape());
    for (Index i = 0; i < h.numel(); ++i) h.data()[i] = reference_silu(g.data()[i]) * u.data()[i];
    return test::reference::linear(h, sd.at("down_proj.weight"), bias("down_proj"));
}

template <class T>
StateDict<T> cast_dict(const StateDict<double>& sd) {
    StateDict<T> out;
    for (const auto& entry : sd) out.emplace(entry.first, cast<T>(entry.second));
    return out;
}

template <class T>
bool all_finite(const Tensor<T>& t) {
    for (Index i = 0; i < t.numel(); ++i)
        if (!std::isfinite(t.data()[i])) return false;
    return true;
}

std::vector<std::string> names_of(const StateDict<double>& sd) {
    std::vector<std::string> names;
    for (const auto& entry : sd) names.push_back(entry.first);
    return names;
}

}  // namespace

// ---- SiLU --------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("silu kernels match x sigmoid(x) and its derivative from -60 to 60",
                   "[silu][ops]", float, double) {
    using T = TestType;
    std::vector<T> x;
    for (int i = -600; i <= 600; ++i) x.push_back(static_cast<T>(i) / T(10));
    const Index n = static_cast<Index>(x.size());
    std::vector<T> y(x.size()), dy(x.size(), T(1)), dx(x.size(), T(0));
    ops::silu_forward(x.data(), n, y.data());
    ops::silu_backward(x.data(), dy.data(), n, dx.data());
    for (Index i = 0; i < n; ++i) {
        CAPTURE(x[i]);
        // Relative accuracy everywhere, the tiny values of large negative x included (SiLU(-60) is
        // -5e-25: a sigmoid computed as 1 - 1 / (1 + e^x) would give 0).
        CHECK_THAT(static_cast<double>(y[i]),
                   WithinRel(reference_silu(static_cast<double>(x[i])), Tol<T>::rel));
        CHECK_THAT(
            static_cast<double>(dx[i]),
            WithinRel(reference_silu_derivative(static_cast<double>(x[i])), Tol<T>::rel) ||
                WithinAbs(reference_silu_derivative(static_cast<double>(x[i])), Tol<T>::abs));
    }
    CHECK(y[600] == T(0));     // SiLU(0)
    CHECK(dx[600] == T(0.5));  // SiLU'(0) = σ(0)
    // silu_backward adds into dx.
    ops::silu_backward(x.data(), dy.data(), n, dx.data());
    CHECK_THAT(
        static_cast<double>(dx[610]),
        WithinRel(2.0 * reference_silu_derivative(static_cast<double>(x[610])), Tol<T>::rel));
}

TEMPLATE_TEST_CASE("silu is finite at +-1e30 and the largest values, and has the limits at +-inf",
                   "[silu][ops][extreme]", float, double) {
    using T = TestType;
    const T inf = std::numeric_limits<T>::infinity(), big = std::numeric_limits<T>::max();
    const std::vector<T> x{T(1e30), T(-1e30), big, -big, inf, -inf, T(-800), T(800)};
    const std::vector<T> y_expected{T(1e30), T(0), big, T(0), inf, T(0), T(0), T(800)};
    const std::vector<T> d_expected{T(1), T(0), T(1), T(0), T(1), T(0), T(0), T(1)};
    const Index n = static_cast<Index>(x.size());
    std::vector<T> y(x.size()), dy(x.size(), T(1)), dx(x.size(), T(0));
    ops::silu_forward(x.data(), n, y.data());
    ops::silu_backward(x.data(), dy.data(), n, dx.data());
    for (Index i = 0; i < n; ++i) {
        CAPTURE(x[i]);
        CHECK(y[i] == y_expected[i]);
        CHECK(dx[i] == d_expected[i]);
    }
    // NaN stays NaN.
    const T nan = std::numeric_limits<T>::quiet_NaN();
    T y_nan = 0, dx_nan = 0;
    const T one = 1;
    ops::silu_forward(&nan, 1, &y_nan);
    ops::silu_backward(&nan, &one, 1, &dx_nan);
    CHECK(std::isnan(y_nan));
    CHECK(std::isnan(dx_nan));
}

TEST_CASE("silu and the swiglu gate pass gradcheck", "[silu][ops][gradcheck]") {
    Generator rng(2);
    const Tensor<double> g = Tensor<double>::uniform(Shape{3, 7}, -8.0, 8.0, rng);
    const Tensor<double> u = Tensor<double>::randn(Shape{3, 7}, rng);
    const GradcheckResult r_silu = gradcheck(
        [](const std::vector<Tensor<double>>& in) {
            Tensor<double> y(in[0].shape());
            ops::silu_forward(in[0].data(), in[0].numel(), y.data());
            return y;
        },
        [](const std::vector<Tensor<double>>& in, const Tensor<double>& dy) {
            Tensor<double> dx(in[0].shape());
            ops::silu_backward(in[0].data(), dy.data(), in[0].numel(), dx.data());
            return std::vector<Tensor<double>>{dx};
        },
        {g}, rng, {1e-6, 1e-7});
    INFO(r_silu.where);
    CHECK(r_silu.ok);
    CHECK(r_silu.checked == 21);

    const GradcheckResult r_gate = gradcheck(
        [](const std::vector<Tensor<double>>& in) {
            Tensor<double> h(in[0].shape());
            ops::swiglu_forward(in[0].data(), in[1].data(), h.numel(), h.data());
            return h;
        },
        [](const std::vector<Tensor<double>>& in, const Tensor<double>& dh) {
            Tensor<double> dg(in[0].shape()), du(in[1].shape());
            ops::swiglu_backward(in[0].data(), in[1].data(), dh.data(), dh.numel(), dg.data(),
                                 du.data());
            return std::vector<Tensor<double>>{dg, du};
        },
        {g, u}, rng, {1e-6, 1e-7});
    INFO(r_gate.where);
    CHECK(r_gate.ok);
    CHECK(r_gate.checked == 42);
}

TEMPLATE_TEST_CASE("the swiglu gate closed by g = -inf or -1e30 gives 0 and zero gradients",
                   "[swiglu][ops][extreme]", float, double) {
    using T = TestType;
    const T inf = std::numeric_limits<T>::infinity();
    const std::vector<T> g{-inf, T(-1e30), inf, T(1e30)};
    const std::vector<T> u{T(3), T(-2), T(0.5), T(-4)};
    const std::vector<T> dh{T(1), T(2), T(3), T(1)};
    std::vector<T> h(4), dg(4, T(0)), du(4, T(0));
    ops::swiglu_forward(g.data(), u.data(), 4, h.data());
    ops::swiglu_backward(g.data(), u.data(), dh.data(), 4, dg.data(), du.data());
    CHECK(h[0] == T(0));
    CHECK(h[1] == T(0));
    CHECK(h[2] == inf);  // SiLU(+inf) u = +inf for u > 0: the limit, not NaN
    CHECK(h[3] == T(-4e30));
    CHECK(dg == std::vector<T>{T(0), T(0), T(1.5), T(-4)});
    CHECK(du[0] == T(0));
    CHECK(du[1] == T(0));
    CHECK(du[2] == inf);
    CHECK(du[3] == T(1e30));
}

// ---- SwiGLU: golden from transformers' LlamaMLP ------------------------------------------------

TEMPLATE_TEST_CASE("SwiGLU matches LlamaMLP in output and every gradient", "[swiglu][golden]",
                   float, double) {
    using T = TestType;
    const std::string name = GENERATE("mlp", "mlp_bias");
    CAPTURE(name);
    const test::GoldenCase c = test::load_golden_case(name, "llama_blocks");
    REQUIRE(c.meta.at("kind") == "mlp");
    const bool bias = c.flag("bias");
    SwiGLU<T> mlp(c.meta_int("hidden_size"), c.meta_int("intermediate_size"), bias, uninitialized);
    const StateDict<double> golden_sd = c.state_dict();
    mlp.load_state_dict(cast_dict<T>(golden_sd));  // strict: exactly LlamaMLP's names
    std::vector<std::string> names;
    for (const Parameter<T>& p : mlp.parameters()) names.push_back(p.name);
    CHECK(names ==
          (bias ? std::vector<std::string>{"gate_proj.weight", "gate_proj.bias", "up_proj.weight",
                                           "up_proj.bias", "down_proj.weight", "down_proj.bias"}
                : std::vector<std::string>{"gate_proj.weight", "up_proj.weight",
                                           "down_proj.weight"}));

    const Tensor<T> x = cast<T>(c.tensor("x"));
    const SwiGLUForward<T> f = mlp.forward(x);
    HEADWISE_CHECK_CLOSE(f.output, c.tensor("output"), kGoldenTolerance<T>);
    const Tensor<T> dx = mlp.backward(f, cast<T>(c.tensor("grad_output")));
    HEADWISE_CHECK_CLOSE(dx, c.tensor("grad_x"), kGoldenTolerance<T>);
    const StateDict<T> grads = mlp.grad_dict();
    REQUIRE(grads.size() == golden_sd.size());
    for (const auto& entry : c.grads) {
        CAPTURE(entry.first);
        HEADWISE_CHECK_CLOSE(grads.at(entry.first), entry.second, kGoldenTolerance<T>);
    }
}

// ---- SwiGLU: plain loops and gradcheck ---------------------------------------------------------

TEMPLATE_TEST_CASE("SwiGLU matches plain double loops for inputs of rank 1, 2 and 3", "[swiglu]",
                   float, double) {
    using T = TestType;
    const Shape shape = GENERATE(Shape{6}, Shape{5, 6}, Shape{2, 3, 6}, Shape{0, 6});
    const bool bias = GENERATE(false, true);
    CAPTURE(shape, bias);
    Generator rng(17);
    const SwiGLU<T> mlp(6, 10, bias, rng);
    const Tensor<T> x = Tensor<T>::randn(shape, rng);
    StateDict<double> sd;
    for (const auto& entry : mlp.state_dict())
        sd.emplace(entry.first, test::reference::to_double<T>(entry.second.view()));
    const Tensor<double> y_ref = reference_swiglu(test::reference::to_double<T>(x.view()), sd);
    HEADWISE_CHECK_CLOSE(mlp.forward(x).output, y_ref, test::dot_tolerance<T>(10));
}

TEST_CASE("SwiGLU passes gradcheck for the input and every weight and bias",
          "[swiglu][gradcheck]") {
    const bool bias = GENERATE(false, true);
    CAPTURE(bias);
    Generator rng(23);
    const Index E = 4, I = 6;
    const SwiGLU<double> init(E, I, bias, rng);
    const StateDict<double> sd0 = init.state_dict();
    const std::vector<std::string> names = names_of(sd0);  // sorted, as StateDict is
    std::vector<Tensor<double>> inputs{Tensor<double>::randn(Shape{2, 3, E}, rng)};
    for (const std::string& n : names) inputs.push_back(sd0.at(n));
    auto make = [&](const std::vector<Tensor<double>>& in) {
        SwiGLU<double> m(E, I, bias, uninitialized);
        StateDict<double> sd;
        for (std::size_t k = 0; k < names.size(); ++k) sd.emplace(names[k], in[k + 1]);
        m.load_state_dict(sd);
        m.zero_grad();
        return m;
    };
    const auto f = [&](const std::vector<Tensor<double>>& in) {
        return make(in).forward(in[0]).output;
    };
    const auto back = [&](const std::vector<Tensor<double>>& in, const Tensor<double>& dy) {
        SwiGLU<double> m = make(in);
        std::vector<Tensor<double>> out{m.backward(m.forward(in[0]), dy)};
        const StateDict<double> g = m.grad_dict();
        for (const std::string& n : names) out.push_back(g.at(n));
        return out;
    };
    // The default bound (1e-6): central differences of the three GEMMs carry rounding of about
    // 1e-10 absolute, 1.4e-7 relative on the smallest partials when the GEMMs run through a CBLAS.
    const GradcheckResult r = gradcheck(f, back, inputs, rng);
    INFO(r.where);
    CHECK(r.ok);
    // x, gate and up [I, E], down [E, I] (+ biases [I], [I], [E]).
    CHECK(r.checked == 24 + 3 * I * E + (bias ? 2 * I + E : 0));
}

// ---- SwiGLU: the module contract ---------------------------------------------------------------

TEST_CASE("SwiGLU keeps each forward's record: forwards before backwards, gradients added",
          "[swiglu]") {
    Generator rng(31);
    SwiGLU<double> mlp(4, 6, false, rng);
    CHECK(mlp.hidden_size() == 4);
    CHECK(mlp.intermediate_size() == 6);
    CHECK(!mlp.has_bias());
    CHECK(mlp.parameter_count() == 3 * 24);
    CHECK(mlp.gate_proj().weight().shape() == Shape{6, 4});
    CHECK(mlp.up_proj().weight().shape() == Shape{6, 4});
    CHECK(mlp.down_proj().weight().shape() == Shape{4, 6});
    const Tensor<double> x1 = Tensor<double>::randn(Shape{3, 4}, rng);
    const Tensor<double> x2 = Tensor<double>::randn(Shape{2, 4}, rng);
    const Tensor<double> dy1 = Tensor<double>::randn(Shape{3, 4}, rng);
    const Tensor<double> dy2 = Tensor<double>::randn(Shape{2, 4}, rng);

    // Each alone.
    const Tensor<double> dx1 = mlp.backward(mlp.forward(x1), dy1);
    const StateDict<double> g1 = mlp.grad_dict();
    mlp.zero_grad();
    const Tensor<double> dx2 = mlp.backward(mlp.forward(x2), dy2);
    const StateDict<double> g2 = mlp.grad_dict();
    mlp.zero_grad();

    // Both forwards first, backwards in the other order: the same dx, the gradients summed.
    const SwiGLUForward<double> f1 = mlp.forward(x1), f2 = mlp.forward(x2);
    CHECK(test::identical(mlp.backward(f2, dy2), dx2));
    Tensor<double> dx1_into = Tensor<double>::full(Shape{3, 4}, 1.0);  // backward_into adds
    mlp.backward_into(f1, dy1, dx1_into);
    for (Index i = 0; i < dx1.numel(); ++i)
        CHECK_THAT(dx1_into.data()[i], WithinRel(1.0 + dx1.data()[i], 1e-14));
    const StateDict<double> g = mlp.grad_dict();
    for (const auto& entry : g) {
        CAPTURE(entry.first);
        for (Index i = 0; i < entry.second.numel(); ++i)
            CHECK_THAT(
                entry.second.data()[i],
                WithinRel(g1.at(entry.first).data()[i] + g2.at(entry.first).data()[i], 1e-12) ||
                    WithinAbs(0.0, 1e-15));
    }
}

TEST_CASE("SwiGLU in eval mode gives the same output, saves nothing, and backward says so",
          "[swiglu][errors]") {
    Generator rng(37);
    SwiGLU<float> mlp(4, 6, true, rng);
    const Tensor<float> x = Tensor<float>::randn(Shape{2, 4}, rng);
    const SwiGLUForward<float> trained = mlp.forward(x);
    CHECK(trained.differentiable());
    mlp.eval();
    CHECK(!mlp.gate_proj().is_training());
    const SwiGLUForward<float> evaluated = mlp.forward(x);
    CHECK(!evaluated.differentiable());
    CHECK(test::identical(evaluated.output, trained.output));
    CHECK_THROWS_MATCHES(mlp.backward(evaluated, Tensor<float>(Shape{2, 4})), std::invalid_argument,
                         Message("headwise::SwiGLU::backward: fwd: comes from a forward in eval "
                                 "mode, which saves nothing for backward; call train() before "
                                 "forward"));
}

TEST_CASE("SwiGLU loads a Llama checkpoint's mlp entries by prefix", "[swiglu]") {
    Generator rng(41);
    const SwiGLU<float> source(8, 12, false, rng);
    StateDict<float> checkpoint;
    for (const auto& entry : source.state_dict("model.layers.1.mlp."))
        checkpoint.emplace(entry.first, entry.second);
    checkpoint.emplace("model.layers.1.input_layernorm.weight", Tensor<float>(Shape{8}));
    checkpoint.emplace("model.layers.0.mlp.gate_proj.weight", Tensor<float>(Shape{12, 8}));
    SwiGLU<float> mlp(8, 12, false, uninitialized);
    mlp.load_state_dict(checkpoint, "model.layers.1.mlp.");
    const Tensor<float> x = Tensor<float>::randn(Shape{3, 8}, rng);
    CHECK(test::identical(mlp.forward(x).output, source.forward(x).output));
    CHECK(mlp.state_dict().count("down_proj.weight") == 1);
}

TEST_CASE("SwiGLU has no biases unless asked, as Llama", "[swiglu]") {
    Generator rng(47);
    const SwiGLU<double> drawn(4, 6, rng);
    const SwiGLU<double> loaded(4, 6, uninitialized);
    CHECK(!drawn.has_bias());
    CHECK(!loaded.has_bias());
    CHECK(drawn.parameters().size() == 3);
    CHECK(loaded.parameter_count() == 3 * 24);
    // The same draws as the constructor given bias = false.
    Generator again(47);
    const SwiGLU<double> explicit_false(4, 6, false, again);
    for (const auto& entry : explicit_false.state_dict())
        CHECK(test::identical(drawn.state_dict().at(entry.first), entry.second));
    CHECK(SwiGLU<double>(4, 6, true, rng).parameters().size() == 6);
}

TEST_CASE("SwiGLU errors name the function, the argument and the shapes", "[swiglu][errors]") {
    Generator rng(43);
    SwiGLU<float> mlp(4, 6, false, rng);
    CHECK_THROWS_MATCHES(SwiGLU<float>(0, 6, false, rng), std::invalid_argument,
                         Message("headwise::SwiGLU::SwiGLU: hidden_size: must be positive, got 0"));
    CHECK_THROWS_MATCHES(SwiGLU<float>(4, -1, false, uninitialized), std::invalid_argument,
                         Message("headwise::SwiGLU::SwiGLU: intermediate_size: must be positive, "
                                 "got -1"));
    CHECK_THROWS_MATCHES(mlp.forward(Tensor<float>(Shape{2, 5})), shape_error,
                         Message("headwise::SwiGLU::forward: input: expected shape [..., 4], got "
                                 "[2, 5]"));
    const SwiGLUForward<float> f = mlp.forward(Tensor<float>(Shape{2, 4}));
    CHECK_THROWS_MATCHES(mlp.backward(f, Tensor<float>(Shape{4, 2})), shape_error,
                         Message("headwise::SwiGLU::backward: grad_output: expected shape [2, 4], "
                                 "got [4, 2]"));
    Tensor<float> dx(Shape{2, 3});
    CHECK_THROWS_MATCHES(mlp.backward_into(f, Tensor<float>(Shape{2, 4}), dx), shape_error,
                         Message("headwise::SwiGLU::backward_into: grad_input: expected shape "
                                 "[2, 4], got [2, 3]"));
    SwiGLU<float> other(4, 5, false, rng);
    CHECK_THROWS_MATCHES(other.backward(f, Tensor<float>(Shape{2, 4})), shape_error,
                         Message("headwise::SwiGLU::backward: fwd (its gate projection): expected "
                                 "shape [..., 5], got [2, 6]"));
    // Nothing was written by the failed calls.
    for (const auto& entry : mlp.grad_dict())
        for (float v : entry.second) CHECK(v == 0.0f);
    for (float v : dx) CHECK(v == 0.0f);
    StateDict<float> bad = mlp.state_dict();
    bad.at("up_proj.weight") = Tensor<float>(Shape{4, 6});
    CHECK_THROWS_MATCHES(mlp.load_state_dict(bad), shape_error,
                         Message("headwise::SwiGLU::load_state_dict: up_proj.weight: expected "
                                 "shape [6, 4], got [4, 6]"));
}

}  // namespace test_swiglu
