// SPDX-License-Identifier: MIT
// Tests of headwise/tensor_ops/matmul.hpp: Eigen products against triple loops, every transpose.
#include <headwise/tensor_ops/matmul.hpp>

#include <random>  // std::mt19937_64
#include <tuple>   // std::tuple

#include "support/catch.hpp"
#include "support/match.hpp"
#include "support/reference.hpp"
#include "support/tolerance.hpp"

namespace test_matmul {

using headwise::Index;
using headwise::Shape;
using headwise::Tensor;
using headwise::TensorView;
namespace reference = headwise::test::reference;
using headwise::test::Tol;

namespace {

/// The stored shape of an operand that is used as [rows, cols] after the optional transpose.
Shape stored(Index rows, Index cols, bool transposed) {
    return transposed ? Shape{cols, rows} : Shape{rows, cols};
}

}  // namespace

TEMPLATE_TEST_CASE("matmul matches the triple loop for every transpose", "[matmul]", float,
                   double) {
    using T = TestType;
    const auto [m, k, n] = GENERATE(table<Index, Index, Index>(
        {{1, 1, 1}, {2, 3, 4}, {5, 1, 7}, {17, 33, 9}, {64, 64, 64}, {3, 129, 2}}));
    const bool ta = GENERATE(false, true);
    const bool tb = GENERATE(false, true);
    CAPTURE(m, k, n, ta, tb);
    std::mt19937_64 rng(42);
    const Tensor<T> a = Tensor<T>::randn(stored(m, k, ta), rng);
    const Tensor<T> b = Tensor<T>::randn(stored(k, n, tb), rng);

    const Tensor<T> c = headwise::matmul(a, b, ta, tb);
    REQUIRE(c.shape() == Shape{m, n});
    const Tensor<double> expected =
        reference::matmul(reference::to_double<T>(a), reference::to_double<T>(b), ta, tb);
    HEADWISE_CHECK_CLOSE(c, expected, Tol<T>::rel);
}

TEMPLATE_TEST_CASE("batched_matmul multiplies matrix by matrix along the batch", "[matmul]", float,
                   double) {
    using T = TestType;
    const auto [N, m, k, n] = GENERATE(table<Index, Index, Index, Index>(
        {{1, 2, 3, 4}, {3, 5, 7, 2}, {8, 16, 32, 16}, {2, 1, 1, 1}}));
    const bool ta = GENERATE(false, true);
    const bool tb = GENERATE(false, true);
    CAPTURE(N, m, k, n, ta, tb);
    std::mt19937_64 rng(42);
    const Shape sa = stored(m, k, ta), sb = stored(k, n, tb);
    const Tensor<T> a = Tensor<T>::randn(Shape{N, sa[0], sa[1]}, rng);
    const Tensor<T> b = Tensor<T>::randn(Shape{N, sb[0], sb[1]}, rng);

    const Tensor<T> c = headwise::batched_matmul(a, b, ta, tb);
    REQUIRE(c.shape() == Shape{N, m, n});
    const Tensor<double> expected =
        reference::batched_matmul(reference::to_double<T>(a), reference::to_double<T>(b), ta, tb);
    HEADWISE_CHECK_CLOSE(c, expected, Tol<T>::rel);

    // Each batch entry is the rank-2 product of the slices.
    const Index last = N - 1;
    HEADWISE_CHECK_CLOSE(c.slice(last), headwise::matmul(a.slice(last), b.slice(last), ta, tb),
                         Tol<T>::rel);
}

TEMPLATE_TEST_CASE("matmul reads views in place", "[matmul]", float, double) {
    using T = TestType;
    std::mt19937_64 rng(42);
    const Tensor<T> stack = Tensor<T>::randn(Shape{6, 4}, rng);
    // Rows 1..3 of a [6, 4] matrix, as a view, times the whole matrix transposed:
    // [3, 4] x [4, 6] -> [3, 6], entries are dot products of rows (a Gram matrix block).
    const TensorView<const T> a = stack.narrow(1, 3);
    const Tensor<T> c = headwise::matmul(a, stack, false, true);  // [3, 6]
    REQUIRE(c.shape() == Shape{3, 6});
    const Tensor<double> s64 = reference::to_double<T>(stack);
    const Tensor<double> expected =
        reference::matmul(reference::to_double<T>(Tensor<T>(a)), s64, false, true);
    HEADWISE_CHECK_CLOSE(c, expected, Tol<T>::rel);
    // c(1, 2) = (row 1 of a, which is row 2 of the stack) . (row 2 of the stack).
    double dot = 0.0;
    for (Index j = 0; j < 4; ++j) dot += s64(2, j) * s64(2, j);
    CHECK_THAT(static_cast<double>(c(1, 2)), WithinRel(dot, Tol<T>::rel));
}

TEMPLATE_TEST_CASE("an empty inner dimension gives zeros", "[matmul]", float, double) {
    using T = TestType;
    const Tensor<T> a(Shape{3, 0}), b(Shape{0, 2});
    const Tensor<T> c = headwise::matmul(a, b);
    REQUIRE(c.shape() == Shape{3, 2});
    for (const T v : c) CHECK(v == T(0));
    CHECK(headwise::matmul(Tensor<T>(Shape{0, 4}), Tensor<T>(Shape{4, 5})).shape() == Shape{0, 5});
    CHECK(headwise::batched_matmul(Tensor<T>(Shape{0, 2, 3}), Tensor<T>(Shape{0, 3, 4})).shape() ==
          (Shape{0, 2, 4}));
}

TEST_CASE("matmul shape errors name the operand and the expected shape", "[matmul]") {
    const Tensor<float> a(Shape{2, 3}), b(Shape{4, 5}), v(Shape{3});
    REQUIRE_THROWS_AS(headwise::matmul(a, b), headwise::shape_error);
    REQUIRE_THROWS_WITH(headwise::matmul(a, b),
                        "headwise::matmul: b: expected shape [3, n], got [4, 5]");
    REQUIRE_THROWS_WITH(headwise::matmul(a, b, false, true),
                        "headwise::matmul: b: expected shape [n, 3], got [4, 5]");
    REQUIRE_THROWS_WITH(headwise::matmul(a, b, true, false),
                        "headwise::matmul: b: expected shape [2, n], got [4, 5]");
    REQUIRE_THROWS_WITH(headwise::matmul(v, b),
                        "headwise::matmul: a: expected shape [m, k], got [3]");
    REQUIRE_THROWS_WITH(headwise::matmul(v, b, true),
                        "headwise::matmul: a: expected shape [k, m], got [3]");
    REQUIRE_THROWS_WITH(headwise::matmul(a, v),
                        "headwise::matmul: b: expected shape [3, n], got [3]");
    CHECK(headwise::matmul(a, Tensor<float>(Shape{3, 5})).shape() == Shape{2, 5});
}

TEST_CASE("batched_matmul shape errors name the operand and the expected shape", "[matmul]") {
    const Tensor<double> a(Shape{4, 2, 3});
    REQUIRE_THROWS_AS(headwise::batched_matmul(a, Tensor<double>(Shape{4, 2, 5})),
                      headwise::shape_error);
    REQUIRE_THROWS_WITH(headwise::batched_matmul(a, Tensor<double>(Shape{4, 2, 5})),
                        "headwise::batched_matmul: b: expected shape [4, 3, n], got [4, 2, 5]");
    REQUIRE_THROWS_WITH(headwise::batched_matmul(a, Tensor<double>(Shape{3, 3, 5})),
                        "headwise::batched_matmul: b: expected shape [4, 3, n], got [3, 3, 5]");
    REQUIRE_THROWS_WITH(headwise::batched_matmul(a, Tensor<double>(Shape{4, 3, 5}), true, true),
                        "headwise::batched_matmul: b: expected shape [4, n, 2], got [4, 3, 5]");
    REQUIRE_THROWS_WITH(headwise::batched_matmul(a, Tensor<double>(Shape{3, 5})),
                        "headwise::batched_matmul: b: expected shape [4, 3, n], got [3, 5]");
    REQUIRE_THROWS_WITH(headwise::batched_matmul(Tensor<double>(Shape{2, 3}), a),
                        "headwise::batched_matmul: a: expected shape [N, m, k], got [2, 3]");
    REQUIRE_THROWS_WITH(headwise::batched_matmul(Tensor<double>(Shape{2, 3}), a, true),
                        "headwise::batched_matmul: a: expected shape [N, k, m], got [2, 3]");
}

}  // namespace test_matmul
