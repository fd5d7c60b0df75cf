// SPDX-License-Identifier: MIT
// Tests of RMSNorm and its kernels: torch's nn.RMSNorm and transformers' LlamaRMSNorm golden
// parity, plain double loops, gradcheck, eps, extreme values, the module contract and errors.
#include <headwise/gradcheck.hpp>
#include <headwise/layers/rms_norm.hpp>
#include <headwise/ops/rms_norm.hpp>

#include <cmath>      // std::sqrt, std::isfinite, std::ldexp
#include <limits>     // std::numeric_limits
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string
#include <tuple>      // std::tuple
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/golden.hpp"
#include "support/instantiations.hpp"
#include "support/match.hpp"
#include "support/tolerance.hpp"
#include "support/training_golden.hpp"

namespace test_rms_norm {

using namespace headwise;
using headwise::test::cast;
using headwise::test::kGoldenTolerance;
using headwise::test::Tol;

namespace {

/// y = x / sqrt(mean(x^2) + eps) ⊙ w per row of x [..., C], in double; an empty w means none.
Tensor<double> reference_rms_norm(const Tensor<double>& x, const Tensor<double>& w, double eps) {
    const Index C = x.shape().back(), N = x.numel() / C;
    Tensor<double> y(x.shape());
    for (Index n = 0; n < N; ++n) {
        double ss = 0.0;
        for (Index c = 0; c < C; ++c) ss += x.data()[n * C + c] * x.data()[n * C + c];
        const double r = 1.0 / std::sqrt(ss / static_cast<double>(C) + eps);
        for (Index c = 0; c < C; ++c)
            y.data()[n * C + c] = x.data()[n * C + c] * r * (w.numel() ? w.data()[c] : 1.0);
    }
    return y;
}

/// dx and dw of sum(y ⊙ dy) for reference_rms_norm, written from the chain rule term by term:
/// dx.data()[c] = r w.data()[c] dy[c] - r^3 x.data()[c] / C sum_j dy[j] w.data()[j] x.data()[j],
/// dw.data()[c] = sum_n dy[c] x.data()[c] r.
std::pair<Tensor<double>, Tensor<double>> reference_rms_norm_backward(const Tensor<double>& x,
                                                                      const Tensor<double>& w,
                                                                      double eps,
                                                                      const Tensor<double>& dy) {
    const Index C = x.shape().back(), N = x.numel() / C;
    Tensor<double> dx(x.shape()), dw(Shape{C});
    auto wc = [&](Index c) { return w.numel() ? w.data()[c] : 1.0; };
    for (Index n = 0; n < N; ++n) {
        const double* xr = x.data() + n * C;
        const double* g = dy.data() + n * C;
        double ss = 0.0, dot = 0.0;
        for (Index c = 0; c < C; ++c) ss += xr[c] * xr[c];
        const double r = 1.0 / std::sqrt(ss / static_cast<double>(C) + eps);
        for (Index c = 0; c < C; ++c) dot += g[c] * wc(c) * xr[c];
        for (Index c = 0; c < C; ++c) {
            dx.data()[n * C + c] =
                r * wc(c) * g[c] - r * r * r * xr[c] * dot / static_cast<double>(C);
            dw.data()[c] += g[c] * xr[c] * r;
        }
    }
    return {std::move(dx), std::move(dw)};
}

template <class T>
Tensor<double> to_double(const Tensor<T>& t) {
    Tensor<double> out(t.shape());
    for (Index i = 0; i < t.numel(); ++i) out.data()[i] = static_cast<double>(t.data()[i]);
    return out;
}

bool all_finite(TensorView<const float> t) {
    for (Index i = 0; i < t.numel(); ++i)
        if (!std::isfinite(t.data()[i])) return false;
    return true;
}
bool all_finite(TensorView<const double> t) {
    for (Index i = 0; i < t.numel(); ++i)
        if (!std::isfinite(t.data()[i])) return false;
    return true;
}

}  // namespace

// ---- Golden: torch.nn.RMSNorm in float64, transformers' LlamaRMSNorm -------------------------

TEMPLATE_TEST_CASE("RMSNorm matches torch in output and every gradient", "[rms_norm][golden]",
                   float, double) {
    using T = TestType;
    const std::string name = GENERATE("rms_norm", "rms_norm_large_eps");
    CAPTURE(name);
    const test::GoldenCase c = test::load_golden_case(name, "llama_blocks");
    REQUIRE(c.meta.at("kind") == "rms_norm");
    RMSNorm<T> norm(c.meta_int("hidden_size"), std::stod(c.meta.at("eps")));
    StateDict<T> sd;
    for (const auto& entry : c.state_dict()) sd.emplace(entry.first, cast<T>(entry.second));
    norm.load_state_dict(sd);  // strict: exactly "weight"

    const Tensor<T> x = cast<T>(c.tensor("x"));
    const Tensor<T> y = norm.forward(x);
    HEADWISE_CHECK_CLOSE(y, c.tensor("output"), kGoldenTolerance<T>);
    const Tensor<T> dx = norm.backward(x, cast<T>(c.tensor("grad_output")));
    HEADWISE_CHECK_CLOSE(dx, c.tensor("grad_x"), kGoldenTolerance<T>);
    const StateDict<T> g = norm.grad_dict();
    REQUIRE(g.size() == 1);
    HEADWISE_CHECK_CLOSE(g.at("weight"), c.grad("weight"), kGoldenTolerance<T>);

    // LlamaRMSNorm computes in float32 inside: float agrees with it as with float64 torch.
    if (std::is_same_v<T, float>) {
        HEADWISE_CHECK_CLOSE(y, c.tensor("hf_output"), kGoldenTolerance<T>);
        HEADWISE_CHECK_CLOSE(dx, c.tensor("hf_grad_x"), kGoldenTolerance<T>);
    }
}

// ---- Plain loops in double -------------------------------------------------------------------

TEMPLATE_TEST_CASE("RMSNorm matches plain double loops for every shape, with and without weight",
                   "[rms_norm]", float, double) {
    using T = TestType;
    const auto [shape, eps, affine] =
        GENERATE(table<Shape, double, bool>({{Shape{7}, 1e-6, true},
                                             {Shape{3, 1}, 0.5, true},
                                             {Shape{4, 5}, 0.0, true},
                                             {Shape{2, 3, 16}, 1e-6, false},
                                             {Shape{2, 3, 64}, 0.5, true},
                                             {Shape{0, 8}, 1e-6, true}}));
    CAPTURE(shape, eps, affine);
    const Index C = shape.back();
    Generator rng(5);
    const Tensor<double> x = Tensor<double>::randn(shape, rng);
    const Tensor<double> dy = Tensor<double>::randn(shape, rng);
    Tensor<double> w = affine ? Tensor<double>::uniform(Shape{C}, 0.5, 1.5, rng)
                              : Tensor<double>(Shape{0});  // none
    // The module computes in T from inputs rounded to T; the reference takes the same values.
    const Tensor<T> xt = cast<T>(x), dyt = cast<T>(dy);
    const Tensor<double> xr = to_double(xt), dyr = to_double(dyt);
    RMSNorm<T> norm(C, eps, affine);
    if (affine) {
        norm.load_state_dict({{"weight", cast<T>(w)}});
        w = to_double(cast<T>(w));
    }

    const Tensor<double> y_ref = reference_rms_norm(xr, w, eps);
    HEADWISE_CHECK_CLOSE(norm.forward(xt), y_ref, test::dot_tolerance<T>(C));
    const auto [dx_ref, dw_ref] = reference_rms_norm_backward(xr, w, eps, dyr);
    HEADWISE_CHECK_CLOSE(norm.backward(xt, dyt), dx_ref, test::dot_tolerance<T>(C));
    if (affine) HEADWISE_CHECK_CLOSE(norm.grad_weight(), dw_ref, test::dot_tolerance<T>(x.numel()));
}

TEMPLATE_TEST_CASE("rms_norm kernels write strided rows and Y may alias X", "[rms_norm][ops]",
                   float, double) {
    using T = TestType;
    Generator rng(8);
    // Columns [2, 7) of a [3, 9] matrix: rows with an outer stride of 9.
    const Tensor<T> big = Tensor<T>::randn(Shape{3, 9}, rng);
    const Tensor<T> w = Tensor<T>::uniform(Shape{5}, 0.5, 1.5, rng);
    Tensor<T> block(Shape{3, 5});
    for (Index n = 0; n < 3; ++n)
        for (Index c = 0; c < 5; ++c) block(n, c) = big(n, 2 + c);
    Tensor<T> y_dense(Shape{3, 5});
    ops::rms_norm_forward<T>(block.matrix(), w.data(), 1e-6, y_dense.matrix());
    Tensor<T> y_strided(Shape{3, 9});
    ops::rms_norm_forward<T>(big.column_block(2, 5), w.data(), 1e-6, y_strided.column_block(2, 5));
    for (Index n = 0; n < 3; ++n)
        for (Index c = 0; c < 5; ++c) CHECK(y_strided(n, 2 + c) == y_dense(n, c));
    Tensor<T> in_place = block;
    ops::rms_norm_forward<T>(in_place.matrix(), w.data(), 1e-6, in_place.matrix());
    CHECK(test::identical(in_place, y_dense));
}

// ---- gradcheck -------------------------------------------------------------------------------

TEST_CASE("RMSNorm passes gradcheck for the input and the weight", "[rms_norm][gradcheck]") {
    const double eps = GENERATE(1e-6, 0.3);
    CAPTURE(eps);
    Generator rng(11);
    const Tensor<double> x = Tensor<double>::randn(Shape{2, 3, 5}, rng);
    const Tensor<double> w = Tensor<double>::randn(Shape{5}, rng);
    auto make = [eps](const std::vector<Tensor<double>>& in) {
        RMSNorm<double> norm(5, eps);
        norm.load_state_dict({{"weight", in[1]}});
        return norm;
    };
    const auto f = [&](const std::vector<Tensor<double>>& in) { return make(in).forward(in[0]); };
    const auto back = [&](const std::vector<Tensor<double>>& in, const Tensor<double>& dy) {
        RMSNorm<double> norm = make(in);
        Tensor<double> dx = norm.backward(in[0], dy);
        return std::vector<Tensor<double>>{std::move(dx), norm.grad_dict().at("weight")};
    };
    const GradcheckResult r = gradcheck(f, back, {x, w}, rng, {1e-5, 1e-7});
    INFO(r.where);
    CHECK(r.ok);
    CHECK(r.checked == 30 + 5);  // every input and weight entry
}

TEST_CASE("RMSNorm without weight passes gradcheck for the input", "[rms_norm][gradcheck]") {
    Generator rng(12);
    const Tensor<double> x = Tensor<double>::randn(Shape{4, 6}, rng);
    const RMSNorm<double> norm(6, 1e-6, /*elementwise_affine=*/false);
    const GradcheckResult r =
        gradcheck([&](const std::vector<Tensor<double>>& in) { return norm.forward(in[0]); },
                  [&](const std::vector<Tensor<double>>& in, const Tensor<double>& dy) {
                      RMSNorm<double> m(6, 1e-6, false);
                      return std::vector<Tensor<double>>{m.backward(in[0], dy)};
                  },
                  {x}, rng, {1e-5, 1e-7});
    INFO(r.where);
    CHECK(r.ok);
    CHECK(r.checked == 24);
}

// ---- eps and extreme values ------------------------------------------------------------------

TEST_CASE("RMSNorm with eps = 0 gives rows of unit root mean square, eps shrinks them",
          "[rms_norm]") {
    const Tensor<double> x(Shape{2, 4}, {1, 2, 3, 4, -10, 0, 10, 20});
    const RMSNorm<double> exact(4, 0.0);
    const Tensor<double> y = exact.forward(x);
    for (Index n = 0; n < 2; ++n) {
        double ms = 0;
        for (Index c = 0; c < 4; ++c) ms += y(n, c) * y(n, c) / 4;
        CHECK_THAT(ms, WithinRel(1.0, 1e-15));
    }
    // Row 0 has mean(x^2) = 7.5: eps = 2.5 divides by sqrt(10) instead of sqrt(7.5).
    const RMSNorm<double> damped(4, 2.5);
    const Tensor<double> z = damped.forward(x);
    for (Index c = 0; c < 4; ++c) CHECK_THAT(z(0, c), WithinRel(x(0, c) / std::sqrt(10.0), 1e-15));
    // A zero row maps to zero (0 / sqrt(eps)), with a finite gradient dx = dy / sqrt(eps) ⊙ w.
    RMSNorm<float> norm(3, 1e-6);
    const Tensor<float> zero(Shape{1, 3});
    for (float v : norm.forward(zero)) CHECK(v == 0.0f);
    const Tensor<float> dx = norm.backward(zero, Tensor<float>::full(Shape{1, 3}, 1.0f));
    for (float v : dx) CHECK_THAT(v, WithinRel(1e3f, 1e-6f));
}

TEMPLATE_TEST_CASE("RMSNorm of huge and tiny rows is the normalised row, never 0, inf or NaN",
                   "[rms_norm][extreme]", float, double) {
    using T = TestType;
    const double eps = GENERATE(0.0, 1e-6);
    CAPTURE(eps);
    Generator rng(21);
    const Tensor<T> unit = Tensor<T>::randn(Shape{2, 8}, rng);  // rows of scale 1
    const Tensor<T> dy = Tensor<T>::randn(Shape{2, 8}, rng);
    const Tensor<T> w = Tensor<T>::uniform(Shape{8}, 0.5, 1.5, rng);
    RMSNorm<T> norm(8, eps);
    norm.load_state_dict({{"weight", w}});
    // The unit rows' results without eps, which a huge row's eps / 2^2k no longer changes.
    RMSNorm<T> exact(8, 0.0);
    exact.load_state_dict({{"weight", w}});
    const Tensor<T> y_unit = exact.forward(unit);
    const Tensor<T> dx_unit = exact.backward(unit, dy);
    // Powers of two whose squares overflow (or underflow, below) T, and the largest finite value.
    constexpr int kMaxExp = std::numeric_limits<T>::max_exponent;  // 128 for float
    const int exponent = GENERATE_COPY(kMaxExp / 2 + 10, kMaxExp - 3, -(kMaxExp / 2 + 10));
    CAPTURE(exponent);
    Tensor<T> big(unit.shape());
    for (Index i = 0; i < unit.numel(); ++i) big.data()[i] = std::ldexp(unit.data()[i], exponent);
    const Tensor<T> y = norm.forward(big);
    const Tensor<T> dx = norm.backward(big, dy);
    REQUIRE(all_finite(y));
    REQUIRE(all_finite(dx));
    if (exponent < 0 && eps > 0.0) {
        // eps dominates a tiny row: y = x / sqrt(eps) ⊙ w, exactly as the plain formula says.
        for (Index i = 0; i < y.numel(); ++i)
            CHECK_THAT(static_cast<double>(y.data()[i]),
                       WithinRel(static_cast<double>(big.data()[i]) / std::sqrt(eps) *
                                     static_cast<double>(w.data()[i % 8]),
                                 Tol<T>::rel));
        return;
    }
    // x = 2^k u normalises to the normalised u (eps / 2^2k negligible), dx = dx(u) / 2^k.
    HEADWISE_CHECK_CLOSE(y, y_unit, Tol<T>::rel);
    Tensor<T> dx_scaled(dx.shape());
    for (Index i = 0; i < dx.numel(); ++i) dx_scaled.data()[i] = std::ldexp(dx.data()[i], exponent);
    HEADWISE_CHECK_CLOSE(dx_scaled, dx_unit, Tol<T>::rel);
}

TEST_CASE("RMSNorm keeps rows apart: a row with inf or NaN does not reach the others",
          "[rms_norm][extreme]") {
    const float inf = std::numeric_limits<float>::infinity();
    const Tensor<float> x(Shape{3, 2}, {1.0f, 2.0f, inf, 1.0f, std::nanf(""), 1.0f});
    const RMSNorm<float> norm(2, 1e-6);
    const Tensor<float> y = norm.forward(x);
    CHECK_THAT(y(0, 0), WithinRel(1.0f / std::sqrt(2.5f), 1e-6f));
    CHECK(std::isnan(y(2, 0)));  // NaN in, NaN out, as torch
}

// ---- The module contract and errors ----------------------------------------------------------

TEST_CASE("RMSNorm is a module: weight of ones, gradients added, state dict", "[rms_norm]") {
    RMSNorm<double> norm(4);
    CHECK(norm.eps() == 1e-6);
    CHECK(norm.normalized_shape() == 4);
    CHECK(norm.elementwise_affine());
    CHECK(norm.parameter_count() == 4);
    REQUIRE(norm.parameters().size() == 1);
    CHECK(norm.parameters().at(0).name == "weight");
    const StateDict<double> sd = norm.state_dict();
    for (double v : sd.at("weight")) CHECK(v == 1.0);
    CHECK(RMSNorm<float>(4, 1e-5, false).parameter_count() == 0);
    CHECK(RMSNorm<float>(4, 1e-5, false).state_dict().empty());

    Generator rng(3);
    const Tensor<double> x = Tensor<double>::randn(Shape{2, 4}, rng);
    const Tensor<double> dy = Tensor<double>::randn(Shape{2, 4}, rng);
    const Tensor<double> dx1 = norm.backward(x, dy);
    const Tensor<double> g1 = norm.grad_dict().at("weight");
    Tensor<double> dx2 = Tensor<double>::full(Shape{2, 4}, 1.0);  // backward_into adds
    norm.backward_into(x, dy, dx2);
    for (Index i = 0; i < 8; ++i) CHECK_THAT(dx2.data()[i], WithinRel(1.0 + dx1.data()[i], 1e-15));
    const Tensor<double> g2 = norm.grad_dict().at("weight");
    for (Index i = 0; i < 4; ++i) CHECK_THAT(g2.data()[i], WithinRel(2.0 * g1.data()[i], 1e-15));
    norm.zero_grad();
    for (double v : norm.grad_weight()) CHECK(v == 0.0);
}

TEST_CASE("RMSNorm errors name the function, the argument and the shapes", "[rms_norm][errors]") {
    RMSNorm<float> norm(4);
    CHECK_THROWS_MATCHES(norm.forward(Tensor<float>(Shape{2, 3})), shape_error,
                         Message("headwise::RMSNorm::forward: input: expected shape [..., 4], "
                                 "got [2, 3]"));
    CHECK_THROWS_MATCHES(norm.backward(Tensor<float>(Shape{2, 4}), Tensor<float>(Shape{4, 2})),
                         shape_error,
                         Message("headwise::RMSNorm::backward: grad_output: expected shape "
                                 "[2, 4], got [4, 2]"));
    CHECK_THROWS_MATCHES(norm.backward(Tensor<float>(Shape{2, 5}), Tensor<float>(Shape{2, 5})),
                         shape_error,
                         Message("headwise::RMSNorm::backward: input: expected shape [..., 4], "
                                 "got [2, 5]"));
    Tensor<float> dx(Shape{2, 3});
    CHECK_THROWS_MATCHES(
        norm.backward_into(Tensor<float>(Shape{2, 4}), Tensor<float>(Shape{2, 4}), dx), shape_error,
        Message("headwise::RMSNorm::backward_into: grad_input: expected shape [2, 4], got [2, 3]"));
    CHECK(norm.grad_dict().at("weight").data()[0] == 0.0f);  // nothing written by a failed call
    CHECK_THROWS_MATCHES(RMSNorm<float>(0), std::invalid_argument,
                         Message("headwise::RMSNorm::RMSNorm: normalized_shape: must be "
                                 "positive, got 0"));
    CHECK_THROWS_MATCHES(RMSNorm<float>(-2), std::invalid_argument,
                         Message("headwise::RMSNorm::RMSNorm: normalized_shape: must be "
                                 "positive, got -2"));
    CHECK_THROWS_MATCHES(RMSNorm<float>(3, -1.0), std::invalid_argument,
                         Message("headwise::RMSNorm::RMSNorm: eps: must be finite and "
                                 "non-negative, got -1.000000"));
    CHECK_THROWS_AS(RMSNorm<float>(3, std::numeric_limits<double>::infinity()),
                    std::invalid_argument);
    CHECK_THROWS_AS(RMSNorm<float>(3, std::nan("")), std::invalid_argument);
    StateDict<float> bad{{"weight", Tensor<float>(Shape{5})}};
    CHECK_THROWS_MATCHES(norm.load_state_dict(bad), shape_error,
                         Message("headwise::RMSNorm::load_state_dict: weight: expected shape "
                                 "[4], got [5]"));
}

}  // namespace test_rms_norm
