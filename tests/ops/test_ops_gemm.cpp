// SPDX-License-Identifier: MIT
// Tests of headwise/ops/gemm.hpp: C = alpha op(A) op(B) + beta C against a double loop, on whole
// matrices and strided column blocks, every transpose, the alpha/beta cases and the errors.
#include <headwise/ops/gemm.hpp>

#include <cmath>     // std::isnan
#include <limits>    // std::numeric_limits
#include <random>    // std::mt19937_64
#include <string>    // std::string
#include <tuple>     // std::tuple
#include <typeinfo>  // typeid

#include "support/catch.hpp"
#include "support/match.hpp"
#include "support/reference.hpp"
#include "support/tolerance.hpp"

namespace test_ops_gemm {

using headwise::Index;
using headwise::Shape;
using headwise::Tensor;
using headwise::ops::Op;
namespace reference = headwise::test::reference;
using headwise::test::Tol;

namespace {

/// The stored shape of an operand used as [rows, cols] after op.
Shape stored(Index rows, Index cols, Op op) {
    return op == Op::transpose ? Shape{cols, rows} : Shape{rows, cols};
}

/// alpha op(A) op(B) + beta C0 in double, the oracle.
template <class T>
Tensor<double> expected_gemm(double alpha, const Tensor<T>& A, Op op_a, const Tensor<T>& B, Op op_b,
                             double beta, const Tensor<T>& C0) {
    Tensor<double> C = reference::matmul(reference::to_double<T>(A), reference::to_double<T>(B),
                                         op_a == Op::transpose, op_b == Op::transpose);  // [m, n]
    for (Index i = 0; i < C.numel(); ++i)
        C.data()[i] = alpha * C.data()[i] + (beta == 0.0 ? 0.0 : beta * C0.data()[i]);
    return C;
}

/// A copy of columns [first, first + count) of `x` [rows, cols], contiguous.
template <class T>
Tensor<T> columns(const Tensor<T>& x, Index first, Index count) {
    Tensor<T> y(Shape{x.size(0), count});  // [rows, count]
    y.matrix() = x.column_block(first, count);
    return y;
}

}  // namespace

TEMPLATE_TEST_CASE("gemm matches the double loop for every transpose, alpha and beta", "[gemm]",
                   float, double) {
    using T = TestType;
    // The last two products are above the size at which an OpenMP build splits C over threads,
    // with extents that are not multiples of the split's blocks. One row or one column of C
    // (m = 1 or n = 1) is a matrix-vector product, which the CBLAS backend runs as a GEMV.
    const auto [m, k, n] = GENERATE(table<Index, Index, Index>({{1, 1, 1},
                                                                {2, 3, 4},
                                                                {5, 1, 7},
                                                                {17, 33, 9},
                                                                {64, 64, 64},
                                                                {3, 129, 2},
                                                                {1, 37, 29},
                                                                {23, 41, 1},
                                                                {1, 512, 1536},
                                                                {131, 97, 103},
                                                                {7, 160, 1001}}));
    const Op op_a = GENERATE(Op::none, Op::transpose);
    const Op op_b = GENERATE(Op::none, Op::transpose);
    const auto [alpha, beta] =
        GENERATE(table<double, double>({{1, 0}, {1, 1}, {0.125, 0}, {-0.5, 1}, {2, -0.75}}));
    CAPTURE(m, k, n, op_a == Op::transpose, op_b == Op::transpose, alpha, beta);
    std::mt19937_64 rng(42);
    const Tensor<T> A = Tensor<T>::randn(stored(m, k, op_a), rng);
    const Tensor<T> B = Tensor<T>::randn(stored(k, n, op_b), rng);
    const Tensor<T> C0 = Tensor<T>::randn(Shape{m, n}, rng);

    Tensor<T> C = C0;
    headwise::ops::gemm<T>(static_cast<T>(alpha), A.matrix(), op_a, B.matrix(), op_b,
                           static_cast<T>(beta), C.matrix());
    HEADWISE_CHECK_CLOSE(C, expected_gemm<T>(alpha, A, op_a, B, op_b, beta, C0), Tol<T>::rel);
}

TEMPLATE_TEST_CASE("gemm reads and writes strided column blocks in place", "[gemm]", float,
                   double) {
    using T = TestType;
    // Operands are column blocks of wider matrices (a head of a fused projection): row stride
    // larger than the block's width. The columns around the output block stay untouched.
    const auto [m, k, n] =
        GENERATE(table<Index, Index, Index>({{37, 24, 19}, {1, 24, 19}, {37, 24, 1}}));
    const Index pad = 5;
    const Op op_a = GENERATE(Op::none, Op::transpose);
    const Op op_b = GENERATE(Op::none, Op::transpose);
    const double beta = GENERATE(0.0, 1.0);
    CAPTURE(m, k, n, op_a == Op::transpose, op_b == Op::transpose, beta);
    std::mt19937_64 rng(7);
    const Shape sa = stored(m, k, op_a), sb = stored(k, n, op_b);
    const Tensor<T> wide_a = Tensor<T>::randn(Shape{sa[0], sa[1] + 2 * pad}, rng);
    const Tensor<T> wide_b = Tensor<T>::randn(Shape{sb[0], sb[1] + 3 * pad}, rng);
    const Tensor<T> wide_c0 = Tensor<T>::randn(Shape{m, n + 2 * pad}, rng);

    Tensor<T> wide_c = wide_c0;
    headwise::ops::gemm<T>(T(1), wide_a.column_block(pad, sa[1]), op_a,
                           wide_b.column_block(2 * pad, sb[1]), op_b, static_cast<T>(beta),
                           wide_c.column_block(pad, n));

    const Tensor<double> expected =
        expected_gemm<T>(1.0, columns(wide_a, pad, sa[1]), op_a, columns(wide_b, 2 * pad, sb[1]),
                         op_b, beta, columns(wide_c0, pad, n));  // [m, n]
    HEADWISE_CHECK_CLOSE(columns(wide_c, pad, n), expected, Tol<T>::rel);
    CHECK(headwise::test::identical(columns(wide_c, 0, pad), columns(wide_c0, 0, pad)));
    CHECK(headwise::test::identical(columns(wide_c, pad + n, pad), columns(wide_c0, pad + n, pad)));
}

TEMPLATE_TEST_CASE("gemm with beta 0 never reads C", "[gemm]", float, double) {
    using T = TestType;
    // A buffer the caller has not initialised may hold NaN; beta = 0 must overwrite it, not
    // multiply it (0 * NaN = NaN).
    const Index k = GENERATE(Index{0}, Index{1}, Index{16});
    const auto [m, n] = GENERATE(table<Index, Index>({{9, 11}, {1, 11}, {9, 1}}));
    CAPTURE(k, m, n);
    std::mt19937_64 rng(3);
    const Tensor<T> A = Tensor<T>::randn(Shape{m, k}, rng);
    const Tensor<T> B = Tensor<T>::randn(Shape{k, n}, rng);
    Tensor<T> C(Shape{m, n});
    C.fill(std::numeric_limits<T>::quiet_NaN());
    headwise::ops::gemm<T>(T(1), A.matrix(), Op::none, B.matrix(), Op::none, T(0), C.matrix());
    bool any_nan = false;
    for (Index i = 0; i < C.numel(); ++i) any_nan = any_nan || std::isnan(C.data()[i]);
    CHECK_FALSE(any_nan);
    HEADWISE_CHECK_CLOSE(C, expected_gemm<T>(1.0, A, Op::none, B, Op::none, 0.0, C), Tol<T>::rel);
}

TEMPLATE_TEST_CASE("gemm over an empty sum scales C by beta", "[gemm]", float, double) {
    using T = TestType;
    std::mt19937_64 rng(5);
    const Tensor<T> A(Shape{4, 0});  // [4, 0]
    const Tensor<T> B(Shape{0, 3});  // [0, 3]
    const Tensor<T> C0 = Tensor<T>::randn(Shape{4, 3}, rng);
    Tensor<T> C = C0;
    headwise::ops::gemm<T>(T(1), A.matrix(), Op::none, B.matrix(), Op::none, T(0.5), C.matrix());
    for (Index i = 0; i < C.numel(); ++i) CHECK(C.data()[i] == T(0.5) * C0.data()[i]);

    Tensor<T> empty(Shape{0, 3});  // [0, 3]: nothing to compute, nothing to throw
    headwise::ops::gemm<T>(T(1), Tensor<T>(Shape{0, 2}).matrix(), Op::none,
                           Tensor<T>(Shape{2, 3}).matrix(), Op::none, T(0), empty.matrix());
    CHECK(empty.numel() == 0);
}

TEMPLATE_TEST_CASE("gemm rejects mismatched shapes before writing C", "[gemm]", float, double) {
    using T = TestType;
    const Tensor<T> A(Shape{2, 3});  // [2, 3]
    const Tensor<T> B(Shape{4, 5});  // [4, 5]
    Tensor<T> C(Shape{2, 5});        // [2, 5]
    C.fill(T(7));
    CHECK_THROWS_WITH(
        headwise::ops::gemm<T>(T(1), A.matrix(), Op::none, B.matrix(), Op::none, T(0), C.matrix()),
        "headwise::ops::gemm: B: expected shape [3, n], got [4, 5]");
    CHECK_THROWS_WITH(headwise::ops::gemm<T>(T(1), A.matrix(), Op::none, B.matrix(), Op::transpose,
                                             T(0), C.matrix()),
                      "headwise::ops::gemm: B (transposed): expected shape [n, 3], got [4, 5]");
    const Tensor<T> B2(Shape{3, 5});  // [3, 5]
    Tensor<T> C2(Shape{5, 2});        // [5, 2]
    CHECK_THROWS_AS(headwise::ops::gemm<T>(T(1), A.matrix(), Op::none, B2.matrix(), Op::none, T(0),
                                           C2.matrix()),
                    headwise::shape_error);
    CHECK_THROWS_WITH(headwise::ops::gemm<T>(T(1), A.matrix(), Op::none, B2.matrix(), Op::none,
                                             T(0), C2.matrix()),
                      "headwise::ops::gemm: C: expected shape [2, 5], got [5, 2]");
    for (Index i = 0; i < C.numel(); ++i) CHECK(C.data()[i] == T(7));
}

TEST_CASE("gemm names the backend it was compiled with", "[gemm]") {
#if defined(HEADWISE_USE_CBLAS) && HEADWISE_USE_CBLAS
    CHECK(std::string(headwise::ops::gemm_backend()) == "cblas");
#else
    CHECK(std::string(headwise::ops::gemm_backend()) == "eigen");
#endif
}

}  // namespace test_ops_gemm
