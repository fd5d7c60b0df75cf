// SPDX-License-Identifier: MIT
// Tests of headwise/ops/gemm_bf16.hpp: the bf16 product against a double loop over the
// bf16-rounded operands (float accumulation only) and over the float operands (bf16's rounding
// bound), every transpose, strided operands, alpha and beta; linear_forward_bf16;
// linear_backward_bf16 (mixed-precision training); the errors.
#include <headwise/ops/gemm_bf16.hpp>

#include <cmath>   // std::abs, std::ldexp
#include <random>  // std::mt19937_64, std::uniform_real_distribution
#include <string>  // std::string
#include <vector>  // std::vector

#include "support/catch.hpp"

namespace test_ops_gemm_bf16 {

using headwise::BFloat16;
using headwise::Index;
using headwise::MatrixMap;
using headwise::ops::ConstBf16Matrix;
using headwise::ops::Op;

namespace {

/// A [rows, cols] operand stored with row stride `stride`, in float and rounded to bf16.
struct Operand {
    Index rows, cols, stride;
    std::vector<float> f;     // [rows, stride], the float values
    std::vector<BFloat16> h;  // the same rounded to bf16
    Operand(Index r, Index c, Index s, std::mt19937_64& rng) : rows(r), cols(c), stride(s) {
        std::uniform_real_distribution<float> u(-2.0f, 2.0f);
        f.resize(static_cast<std::size_t>(r * s));
        h.resize(f.size());
        for (std::size_t i = 0; i < f.size(); ++i) {
            f[i] = u(rng);
            h[i] = BFloat16::from_float(f[i]);
        }
    }
    ConstBf16Matrix bf16() const { return ConstBf16Matrix(h.data(), rows, cols, stride); }
    /// Element (i, j) of op(X), from the float values or the bf16 ones.
    double at(Op op, Index i, Index j, bool rounded) const {
        const Index at = op == Op::none ? i * stride + j : j * stride + i;
        return rounded ? static_cast<double>(h[static_cast<std::size_t>(at)].to_float())
                       : static_cast<double>(f[static_cast<std::size_t>(at)]);
    }
};

}  // namespace

TEST_CASE("gemm_bf16 is the float-accumulated product of the bf16 operands", "[gemm_bf16]") {
    const auto [m, k, n] = GENERATE(table<Index, Index, Index>(
        {{1, 1, 1}, {2, 3, 4}, {7, 64, 5}, {33, 129, 17}, {1, 512, 96}, {96, 512, 1}}));
    const Op op_a = GENERATE(Op::none, Op::transpose);
    const Op op_b = GENERATE(Op::none, Op::transpose);
    const auto [alpha, beta] =
        GENERATE(table<float, float>({{1.0f, 0.0f}, {0.5f, 1.0f}, {-2.0f, 0.25f}}));
    CAPTURE(m, k, n, op_a == Op::transpose, op_b == Op::transpose, alpha, beta);
    std::mt19937_64 rng(static_cast<std::uint64_t>(m * 1000 + k * 10 + n));
    const Index ar = op_a == Op::none ? m : k, ac = op_a == Op::none ? k : m;
    const Index br = op_b == Op::none ? k : n, bc = op_b == Op::none ? n : k;
    const Operand A(ar, ac, ac + 3, rng), B(br, bc, bc, rng);  // A strided
    std::vector<float> C(static_cast<std::size_t>(m * n));
    for (float& c : C) c = 0.75f;
    std::vector<float> workspace(
        static_cast<std::size_t>(headwise::ops::gemm_bf16_workspace(ar, ac, br, bc)));
    headwise::ops::gemm_bf16(alpha, A.bf16(), op_a, B.bf16(), op_b, beta,
                             MatrixMap<float>(C.data(), m, n), workspace.data());

    double worst_rounded = 0, worst_float = 0;
    for (Index i = 0; i < m; ++i)
        for (Index j = 0; j < n; ++j) {
            double exact_rounded = 0, exact_float = 0, magnitude = 0;
            for (Index p = 0; p < k; ++p) {
                exact_rounded += A.at(op_a, i, p, true) * B.at(op_b, p, j, true);
                exact_float += A.at(op_a, i, p, false) * B.at(op_b, p, j, false);
                magnitude += std::abs(A.at(op_a, i, p, false) * B.at(op_b, p, j, false));
            }
            const double c0 = beta == 0.0f ? 0.0 : static_cast<double>(beta) * 0.75;
            const double got = static_cast<double>(C[static_cast<std::size_t>(i * n + j)]);
            const double a = std::abs(static_cast<double>(alpha));
            // Over the rounded operands only float's accumulation error: k units of 2^-24 of
            // sum |a b| (a loose bound on any summation order).
            const double bound_rounded =
                a * static_cast<double>(k + 2) * std::ldexp(1.0, -24) * magnitude + 1e-6;
            // Over the float operands each product also carries the rounding of both factors
            // to 8 significant bits (unit roundoff u = 2^-8):
            // |a b - bf16(a) bf16(b)| <= (2u + u^2) |a b|.
            const double bound_float =
                a * (std::ldexp(1.0, -7) + std::ldexp(1.0, -16)) * magnitude + bound_rounded;
            const double err_rounded = std::abs(got - (alpha * exact_rounded + c0));
            const double err_float = std::abs(got - (alpha * exact_float + c0));
            worst_rounded = std::max(worst_rounded, err_rounded / bound_rounded);
            worst_float = std::max(worst_float, err_float / bound_float);
        }
    CAPTURE(worst_rounded, worst_float);
    CHECK(worst_rounded <= 1.0);
    CHECK(worst_float <= 1.0);
}

TEST_CASE("linear_forward_bf16 rounds the input and the weight to bf16 and adds the bias",
          "[gemm_bf16]") {
    std::mt19937_64 rng(7);
    const Index N = 9, in = 40, out = 11;
    const Operand X(N, in, in, rng), W(out, in, in, rng);
    std::vector<float> bias(static_cast<std::size_t>(out));
    for (Index o = 0; o < out; ++o)
        bias[static_cast<std::size_t>(o)] = 0.1f * static_cast<float>(o);
    std::vector<float> Y(static_cast<std::size_t>(N * out));
    headwise::ops::Bf16LinearWorkspace ws;
    headwise::ops::linear_forward_bf16(MatrixMap<const float>(X.f.data(), N, in), W.bf16(),
                                       bias.data(), MatrixMap<float>(Y.data(), N, out), ws);
    for (Index i = 0; i < N; ++i)
        for (Index o = 0; o < out; ++o) {
            double expected = bias[static_cast<std::size_t>(o)], magnitude = 0;
            for (Index p = 0; p < in; ++p) {
                expected += X.at(Op::none, i, p, true) * W.at(Op::none, o, p, true);
                magnitude += std::abs(X.at(Op::none, i, p, true) * W.at(Op::none, o, p, true));
            }
            CAPTURE(i, o);
            CHECK(std::abs(static_cast<double>(Y[static_cast<std::size_t>(i * out + o)]) -
                           expected) <=
                  static_cast<double>(in + 2) * std::ldexp(1.0, -24) * (magnitude + 1.0));
        }
}

TEST_CASE("linear_backward_bf16 adds the products of the rounded dY, W and X, and float db",
          "[gemm_bf16]") {
    std::mt19937_64 rng(11);
    const Index N = 7, in = 24, out = 10;
    const Operand X(N, in, in + 5, rng), W(out, in, in, rng), dY(N, out, out, rng);  // X strided
    const Operand dX0(N, in, in, rng), dW0(out, in, in, rng), db0(1, out, out, rng);
    std::vector<float> dX = dX0.f, dW = dW0.f, db = db0.f;  // accumulated onto
    headwise::ops::Bf16BackwardWorkspace ws;
    const headwise::StridedMatrixMap<const float> Xs(X.f.data(), N, in,
                                                     Eigen::OuterStride<>(in + 5));
    headwise::ops::linear_backward_bf16(Xs, MatrixMap<const float>(W.f.data(), out, in),
                                        MatrixMap<const float>(dY.f.data(), N, out),
                                        MatrixMap<float>(dX.data(), N, in),
                                        MatrixMap<float>(dW.data(), out, in), db.data(), ws);
    const double eps = std::ldexp(1.0, -24);
    for (Index n = 0; n < N; ++n)
        for (Index i = 0; i < in; ++i) {  // dX = dX0 + bf16(dY) bf16(W)
            double expected = dX0.f[static_cast<std::size_t>(n * in + i)];
            double magnitude = std::abs(expected);
            for (Index o = 0; o < out; ++o) {
                const double p = dY.at(Op::none, n, o, true) * W.at(Op::none, o, i, true);
                expected += p;
                magnitude += std::abs(p);
            }
            CAPTURE(n, i);
            CHECK(std::abs(dX[static_cast<std::size_t>(n * in + i)] - expected) <=
                  static_cast<double>(out + 2) * eps * magnitude);
        }
    for (Index o = 0; o < out; ++o) {
        for (Index i = 0; i < in; ++i) {  // dW = dW0 + bf16(dY)^T bf16(X)
            double expected = dW0.f[static_cast<std::size_t>(o * in + i)];
            double magnitude = std::abs(expected);
            for (Index n = 0; n < N; ++n) {
                const double p = dY.at(Op::none, n, o, true) * X.at(Op::none, n, i, true);
                expected += p;
                magnitude += std::abs(p);
            }
            CAPTURE(o, i);
            CHECK(std::abs(dW[static_cast<std::size_t>(o * in + i)] - expected) <=
                  static_cast<double>(N + 2) * eps * magnitude);
        }
        double expected = db0.f[static_cast<std::size_t>(o)], magnitude = std::abs(expected);
        for (Index n = 0; n < N; ++n) {  // db = db0 + sum of the float dY
            expected += dY.at(Op::none, n, o, false);
            magnitude += std::abs(dY.at(Op::none, n, o, false));
        }
        CHECK(std::abs(db[static_cast<std::size_t>(o)] - expected) <=
              static_cast<double>(N + 2) * eps * magnitude);
    }

    // A dW of the wrong shape: named, and nothing written (dX is checked and written first
    // otherwise).
    const std::vector<float> dX_before = dX;
    try {
        headwise::ops::linear_backward_bf16(
            Xs, MatrixMap<const float>(W.f.data(), out, in),
            MatrixMap<const float>(dY.f.data(), N, out), MatrixMap<float>(dX.data(), N, in),
            MatrixMap<float>(dW.data(), out, in - 1), db.data(), ws);
        FAIL("no exception");
    } catch (const std::invalid_argument& e) {
        CHECK(std::string(e.what()).find("headwise::ops::linear_backward_bf16: dW") == 0);
    }
    CHECK(dX == dX_before);
}

TEST_CASE("gemm_bf16 rejects operands whose inner sizes differ", "[gemm_bf16]") {
    std::vector<BFloat16> a(6), b(8);
    std::vector<float> c(8), ws(14);
    try {
        headwise::ops::gemm_bf16(1.0f, ConstBf16Matrix(a.data(), 2, 3), Op::none,
                                 ConstBf16Matrix(b.data(), 2, 4), Op::none, 0.0f,
                                 MatrixMap<float>(c.data(), 2, 4), ws.data());
        FAIL("no exception");
    } catch (const std::invalid_argument& e) {
        CHECK(std::string(e.what()).find("headwise::ops::gemm_bf16") != std::string::npos);
        CHECK(std::string(e.what()).find("B") != std::string::npos);
    }
}

TEST_CASE("gemm_bf16 names the backend its products run on", "[gemm_bf16]") {
    const std::string backend = headwise::ops::gemm_bf16_backend();
    INFO("gemm_bf16 backend: " << backend);
    CHECK((backend == "dnnl" || backend == "portable"));
#if !HEADWISE_GEMM_BF16_DNNL
    CHECK(backend == "portable");
#endif
}

}  // namespace test_ops_gemm_bf16
