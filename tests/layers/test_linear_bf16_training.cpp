// SPDX-License-Identifier: MIT
// Mixed-precision training of Linear<float> in Precision::bf16 (layers/linear.hpp,
// ops::linear_backward_bf16): gradients within 2e-2 of float's and, tightly, equal to the double
// products of the bf16-rounded operands; the float master weight updated by an optimiser and
// used, rounded anew, by the next training forward and, after eval(), by evaluation.
#include <headwise/layers/linear.hpp>
#include <headwise/optim/sgd.hpp>

#include <algorithm>  // std::max
#include <cmath>      // std::abs, std::ldexp
#include <random>     // std::mt19937_64

#include "support/catch.hpp"
#include "support/instantiations.hpp"
#include "support/relative_error.hpp"

namespace test_linear_bf16_training {

using headwise::Index;
using headwise::Linear;
using headwise::Precision;
using headwise::round_to_bf16;
using headwise::Shape;
using headwise::Tensor;

using headwise::test::relative_error;
namespace {

/// The documented bound of a bf16 training gradient against float's: each product has two
/// rounded factors (2 u = 7.8e-3 relative each), and a sum of many such products may cancel.
constexpr double kGradientTolerance = 2e-2;

Tensor<float> random_tensor(const Shape& shape, std::mt19937_64& rng) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    Tensor<float> x(shape);
    for (float& v : x) v = u(rng);
    return x;
}

/// C[m, n] = sum_k bf16(A[m, k]) bf16(B[k, n]) in double, A and B read through `a(m, k)`,
/// `b(k, n)`; each element checked against `got` within float accumulation's bound
/// (k + 2) 2^-24 (sum |products| + |start|), start = `start(m, n)` (the value accumulated onto).
template <class A, class B, class Start>
void check_rounded_product(const float* got, Index M, Index N, Index K, A a, B b, Start start) {
    for (Index m = 0; m < M; ++m)
        for (Index n = 0; n < N; ++n) {
            double expected = start(m, n), magnitude = std::abs(expected);
            for (Index k = 0; k < K; ++k) {
                const double p =
                    static_cast<double>(round_to_bf16(a(m, k))) * round_to_bf16(b(k, n));
                expected += p;
                magnitude += std::abs(p);
            }
            CAPTURE(m, n);
            CHECK(std::abs(got[m * N + n] - expected) <=
                  static_cast<double>(K + 2) * std::ldexp(1.0, -24) * magnitude);
        }
}

}  // namespace

TEST_CASE("Linear bf16 training gradients: within 2e-2 of float, exact on the rounded operands",
          "[linear][bf16][training]") {
    const bool bias = GENERATE(true, false);
    CAPTURE(bias);
    std::mt19937_64 rng(2026);
    const Index in = 96, out = 40, N = 15;
    Linear<float> f32(in, out, bias, rng);
    Linear<float> bf16 = f32;  // the same parameters
    bf16.with_precision(Precision::bf16);
    REQUIRE(bf16.is_training());
    const Tensor<float> x = random_tensor(Shape{3, 5, in}, rng);
    const Tensor<float> dy = random_tensor(Shape{3, 5, out}, rng);
    const float* w = f32.weight().data();  // [out, in]

    (void)f32.forward(x);
    const Tensor<float> dx_f = f32.backward(x, dy);
    (void)bf16.forward(x);
    const Tensor<float> dx = bf16.backward(x, dy);

    CHECK(relative_error(dx.data(), dx_f.data(), N * in) <= kGradientTolerance);
    CHECK(relative_error(bf16.grad_weight().data(), f32.grad_weight().data(), out * in) <=
          kGradientTolerance);
    // The bias gradient is float from the float dy: float's, bit for bit.
    for (Index o = 0; bias && o < out; ++o) CHECK(bf16.grad_bias()(o) == f32.grad_bias()(o));

    // dx = bf16(dy) bf16(W): [N, out] [out, in]
    check_rounded_product(
        dx.data(), N, in, out, [&](Index n, Index o) { return dy.data()[n * out + o]; },
        [&](Index o, Index i) { return w[o * in + i]; }, [](Index, Index) { return 0.0; });
    // dW = bf16(dy)^T bf16(x): [out, N] [N, in]
    check_rounded_product(
        bf16.grad_weight().data(), out, in, N,
        [&](Index o, Index n) { return dy.data()[n * out + o]; },
        [&](Index n, Index i) { return x.data()[n * in + i]; }, [](Index, Index) { return 0.0; });

    // Gradients accumulate: a second backward adds the same again, dx into the caller's buffer.
    const Tensor<float> gw(bf16.grad_weight());
    Tensor<float> dx2(x.shape());
    bf16.backward_into(x, dy, dx2);
    CHECK(relative_error(dx2.data(), dx.data(), N * in) == 0.0);
    for (Index i = 0; i < out * in; ++i) REQUIRE(bf16.grad_weight().data()[i] == 2 * gw.data()[i]);
}

TEST_CASE(
    "Linear bf16 training: an SGD step changes the float master weight and the next "
    "forward multiplies by it",
    "[linear][bf16][training]") {
    std::mt19937_64 rng(7);
    const Index in = 64, out = 24, N = 6;
    Linear<float> layer(in, out, /*bias=*/false, rng);
    layer.with_precision(Precision::bf16);
    const Tensor<float> x = random_tensor(Shape{N, in}, rng);
    const Tensor<float> dy = random_tensor(Shape{N, out}, rng);
    const Tensor<float> w0(layer.weight());
    headwise::SGDOptions so;
    so.lr = 0.5;  // a step large enough to move many weights to another bf16 value
    headwise::SGD<float> sgd(layer.parameters(), so);

    const Tensor<float> y0 = layer.forward(x);
    layer.backward(x, dy);
    sgd.step();
    const float* w1 = layer.weight().data();
    Index moved = 0;  // weights whose bf16 rounding changed
    for (Index i = 0; i < out * in; ++i) {
        // the float master weight takes the whole float step, not a bf16-rounded one
        REQUIRE(w1[i] == w0.data()[i] - 0.5f * layer.grad_weight().data()[i]);
        moved += round_to_bf16(w1[i]) != round_to_bf16(w0.data()[i]);
    }
    CHECK(moved > out * in / 2);

    // Training mode: the forward reads the updated weight (rounded), not a copy from before.
    const Tensor<float> y1 = layer.forward(x);
    check_rounded_product(
        y1.data(), N, out, in, [&](Index n, Index i) { return x.data()[n * in + i]; },
        [&](Index i, Index o) { return w1[o * in + i]; }, [](Index, Index) { return 0.0; });
    CHECK(relative_error(y1.data(), y0.data(), N * out) > 1e-2);

    // eval() takes a new copy: evaluation after the step reads the updated weight too.
    layer.eval();
    const Tensor<float> evaluated = layer.forward(x);
    CHECK(relative_error(evaluated.data(), y1.data(), N * out) == 0.0);
    // In evaluation mode the copy stays until with_precision (or eval()) takes it again.
    for (Index i = 0; i < out * in; ++i) layer.weight().data()[i] = w0.data()[i];
    const Tensor<float> stale = layer.forward(x);
    CHECK(relative_error(stale.data(), y1.data(), N * out) == 0.0);
    layer.with_precision(Precision::bf16);
    const Tensor<float> fresh = layer.forward(x);
    CHECK(relative_error(fresh.data(), y0.data(), N * out) == 0.0);
}

}  // namespace test_linear_bf16_training
