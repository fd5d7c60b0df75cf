// SPDX-License-Identifier: MIT
// Tests of headwise/tensor_ops/elementwise.hpp: arithmetic against double loops, operators, errors.
#include <headwise/tensor_ops/elementwise.hpp>

#include <cmath>      // std::exp
#include <random>     // std::mt19937_64
#include <stdexcept>  // std::invalid_argument
#include <tuple>      // std::tuple
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/match.hpp"
#include "support/reference.hpp"
#include "support/tolerance.hpp"

namespace test_elementwise {

using headwise::Index;
using headwise::Shape;
using headwise::Tensor;
using headwise::TensorView;
namespace reference = headwise::test::reference;

using headwise::test::identical;
using headwise::test::Tol;

namespace {

/// out[i] = op(a[i], b[i]) in double: the oracle of every binary elementwise operation.
template <class Op>
Tensor<double> zip(const Tensor<double>& a, const Tensor<double>& b, Op op) {
    Tensor<double> out(a.shape());
    for (Index i = 0; i < a.numel(); ++i) out.data()[i] = op(a.data()[i], b.data()[i]);
    return out;
}

/// Exact equality of two tensors of one type (operators must give what the functions give).
Shape shape_from(Index d0, Index d1, Index d2) { return Shape{d0, d1, d2}; }

}  // namespace

TEMPLATE_TEST_CASE("tensor-tensor arithmetic matches double loops", "[elementwise]", float,
                   double) {
    using T = TestType;
    const auto [d0, d1, d2] = GENERATE(
        table<Index, Index, Index>({{1, 1, 1}, {2, 3, 4}, {3, 5, 17}, {4, 16, 64}, {2, 0, 3}}));
    const Shape s = shape_from(d0, d1, d2);
    CAPTURE(s);
    std::mt19937_64 rng(42);
    const Tensor<T> a = Tensor<T>::randn(s, rng);
    const Tensor<T> b = Tensor<T>::uniform(s, 0.5, 2.0, rng);  // away from 0 for div
    const Tensor<double> a64 = reference::to_double<T>(a), b64 = reference::to_double<T>(b);

    const Tensor<T> sum = headwise::add(a, b), diff = headwise::sub(a, b);
    const Tensor<T> prod = headwise::mul(a, b), quot = headwise::div(a, b);
    REQUIRE(sum.shape() == s);
    HEADWISE_CHECK_CLOSE(sum, zip(a64, b64, [](double x, double y) { return x + y; }), Tol<T>::rel);
    HEADWISE_CHECK_CLOSE(diff, zip(a64, b64, [](double x, double y) { return x - y; }),
                         Tol<T>::rel);
    HEADWISE_CHECK_CLOSE(prod, zip(a64, b64, [](double x, double y) { return x * y; }),
                         Tol<T>::rel);
    HEADWISE_CHECK_CLOSE(quot, zip(a64, b64, [](double x, double y) { return x / y; }),
                         Tol<T>::rel);

    // The operators are the same functions.
    CHECK(identical(a + b, sum));
    CHECK(identical(a - b, diff));
    CHECK(identical(a * b, prod));
    CHECK(identical(a / b, quot));
}

TEMPLATE_TEST_CASE("tensor-scalar arithmetic on either side", "[elementwise]", float, double) {
    using T = TestType;
    const Tensor<T> x(Shape{2, 2}, {T(1), T(-2), T(4), T(0.5)});
    const T s = T(2);
    CHECK(identical(x + s, Tensor<T>(Shape{2, 2}, {T(3), T(0), T(6), T(2.5)})));
    CHECK(identical(s + x, x + s));
    CHECK(identical(x - s, Tensor<T>(Shape{2, 2}, {T(-1), T(-4), T(2), T(-1.5)})));
    CHECK(identical(s - x, Tensor<T>(Shape{2, 2}, {T(1), T(4), T(-2), T(1.5)})));
    CHECK(identical(x * s, Tensor<T>(Shape{2, 2}, {T(2), T(-4), T(8), T(1)})));
    CHECK(identical(s * x, x * s));
    CHECK(identical(x / s, Tensor<T>(Shape{2, 2}, {T(0.5), T(-1), T(2), T(0.25)})));
    CHECK(identical(s / x, Tensor<T>(Shape{2, 2}, {T(2), T(-1), T(0.5), T(4)})));

    CHECK(identical(headwise::add(x, s), x + s));
    CHECK(identical(headwise::sub(x, s), x - s));
    CHECK(identical(headwise::mul(x, s), x * s));
    CHECK(identical(headwise::div(x, s), x / s));
    CHECK(identical(x * 3, Tensor<T>(Shape{2, 2}, {T(3), T(-6), T(12), T(1.5)})));  // int -> T
}

TEMPLATE_TEST_CASE("neg, unary minus and exp", "[elementwise]", float, double) {
    using T = TestType;
    std::mt19937_64 rng(42);
    const Tensor<T> x = Tensor<T>::randn(Shape{3, 7}, rng);
    const Tensor<double> x64 = reference::to_double<T>(x);
    const Tensor<double> zero(x.shape());

    HEADWISE_CHECK_CLOSE(headwise::neg(x), zip(x64, zero, [](double v, double) { return -v; }),
                         0.0);  // exact
    CHECK(identical(-x, headwise::neg(x)));
    HEADWISE_CHECK_CLOSE(headwise::exp(x),
                         zip(x64, zero, [](double v, double) { return std::exp(v); }), Tol<T>::rel);
}

TEMPLATE_TEST_CASE("compound assignment writes into tensors and views", "[elementwise]", float,
                   double) {
    using T = TestType;
    Tensor<T> a(Shape{2, 3}, {T(1), T(2), T(3), T(4), T(5), T(6)});
    const Tensor<T> b = Tensor<T>::full(Shape{2, 3}, T(2));
    const T* buffer = a.data();

    a += b;
    CHECK(identical(a, Tensor<T>(Shape{2, 3}, {T(3), T(4), T(5), T(6), T(7), T(8)})));
    a -= b;
    a *= b;
    CHECK(identical(a, Tensor<T>(Shape{2, 3}, {T(2), T(4), T(6), T(8), T(10), T(12)})));
    a /= b;
    CHECK(identical(a, Tensor<T>(Shape{2, 3}, {T(1), T(2), T(3), T(4), T(5), T(6)})));
    a += T(1);
    a *= T(10);
    a -= T(5);
    a /= T(5);
    CHECK(identical(a, Tensor<T>(Shape{2, 3}, {T(3), T(5), T(7), T(9), T(11), T(13)})));
    CHECK(a.data() == buffer);  // in place

    a += a;  // aliasing is fine elementwise
    CHECK(a(1, 2) == T(26));

    // Into a slice: only that row changes.
    TensorView<T> row = a.slice(1);
    row -= b.slice(0);
    row *= T(0.5);
    CHECK(identical(a, Tensor<T>(Shape{2, 3}, {T(6), T(10), T(14), T(8), T(10), T(12)})));

    // Chains return the left operand.
    ((a += T(1)) *= T(2)) -= b;
    CHECK(a(0, 0) == T(12));
}

TEMPLATE_TEST_CASE("broadcast_add adds a row to every row of the last axis", "[elementwise]", float,
                   double) {
    using T = TestType;
    const auto [d0, d1, n] =
        GENERATE(table<Index, Index, Index>({{1, 1, 1}, {2, 3, 4}, {4, 5, 33}, {3, 0, 2}}));
    CAPTURE(d0, d1, n);
    std::mt19937_64 rng(42);
    const Tensor<T> x = Tensor<T>::randn(Shape{d0, d1, n}, rng);
    const Tensor<T> row = Tensor<T>::randn(Shape{n}, rng);

    Tensor<double> expected(x.shape());
    for (Index i = 0; i < d0; ++i)
        for (Index j = 0; j < d1; ++j)
            for (Index k = 0; k < n; ++k)
                expected(i, j, k) = static_cast<double>(x(i, j, k)) + static_cast<double>(row(k));
    const Tensor<T> y = headwise::broadcast_add(x, row);
    REQUIRE(y.shape() == x.shape());
    HEADWISE_CHECK_CLOSE(y, expected, Tol<T>::rel);

    // Rank 1: a plain vector sum.
    CHECK(identical(headwise::broadcast_add(row, row), row + row));
}

TEMPLATE_TEST_CASE("elementwise operations take views of user memory", "[elementwise]", float,
                   double) {
    using T = TestType;
    std::vector<T> left{T(1), T(2), T(3), T(4)}, right{T(10), T(20), T(30), T(40)};
    const TensorView<T> l = headwise::view(left.data(), Shape{2, 2});
    const TensorView<const T> r = headwise::view(static_cast<const T*>(right.data()), Shape{2, 2});
    CHECK(identical(l + r, Tensor<T>(Shape{2, 2}, {T(11), T(22), T(33), T(44)})));
    CHECK(identical(headwise::broadcast_add(l, r.slice(1)),
                    Tensor<T>(Shape{2, 2}, {T(31), T(42), T(33), T(44)})));
    TensorView<T> lv = l;
    lv += r;
    CHECK(left[3] == T(44));  // wrote through to the std::vector
}

TEST_CASE("elementwise shape mismatches throw naming the function", "[elementwise]") {
    Tensor<float> a(Shape{2, 3});
    const Tensor<float> b(Shape{3, 2});
    REQUIRE_THROWS_AS(headwise::add(a, b), headwise::shape_error);
    REQUIRE_THROWS_WITH(headwise::add(a, b), "headwise::add: b: expected shape [2, 3], got [3, 2]");
    REQUIRE_THROWS_WITH(headwise::sub(a, b), "headwise::sub: b: expected shape [2, 3], got [3, 2]");
    REQUIRE_THROWS_WITH(headwise::mul(a, b), "headwise::mul: b: expected shape [2, 3], got [3, 2]");
    REQUIRE_THROWS_WITH(headwise::div(a, b), "headwise::div: b: expected shape [2, 3], got [3, 2]");
    REQUIRE_THROWS_WITH(a + b, "headwise::operator+: b: expected shape [2, 3], got [3, 2]");
    REQUIRE_THROWS_WITH(a - b, "headwise::operator-: b: expected shape [2, 3], got [3, 2]");
    REQUIRE_THROWS_WITH(a * b, "headwise::operator*: b: expected shape [2, 3], got [3, 2]");
    REQUIRE_THROWS_WITH(a / b, "headwise::operator/: b: expected shape [2, 3], got [3, 2]");
    REQUIRE_THROWS_WITH(a += b, "headwise::operator+=: b: expected shape [2, 3], got [3, 2]");
    REQUIRE_THROWS_WITH(a -= b, "headwise::operator-=: b: expected shape [2, 3], got [3, 2]");
    REQUIRE_THROWS_WITH(a *= b, "headwise::operator*=: b: expected shape [2, 3], got [3, 2]");
    REQUIRE_THROWS_WITH(a /= b, "headwise::operator/=: b: expected shape [2, 3], got [3, 2]");
    for (Index i = 0; i < a.numel(); ++i) CHECK(a.data()[i] == 0.0f);  // checked before writing

    REQUIRE_THROWS_AS(headwise::broadcast_add(a, Tensor<float>(Shape{2})), headwise::shape_error);
    REQUIRE_THROWS_WITH(headwise::broadcast_add(a, Tensor<float>(Shape{2})),
                        "headwise::broadcast_add: row: expected shape [3], got [2]");
    REQUIRE_THROWS_WITH(headwise::broadcast_add(a, Tensor<float>(Shape{1, 3})),
                        "headwise::broadcast_add: row: expected shape [3], got [1, 3]");
    REQUIRE_THROWS_WITH(headwise::broadcast_add(Tensor<float>(Shape{}), Tensor<float>(Shape{1})),
                        "headwise::broadcast_add: x: expected shape [..., n], got []");
}

}  // namespace test_elementwise
