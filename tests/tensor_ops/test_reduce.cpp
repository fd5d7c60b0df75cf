// SPDX-License-Identifier: MIT
// Tests of headwise/tensor_ops/reduce.hpp: sum, mean and max along every axis against loops.
#include <headwise/tensor_ops/reduce.hpp>

#include <random>     // std::mt19937_64
#include <stdexcept>  // std::invalid_argument
#include <tuple>      // std::tuple
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/match.hpp"
#include "support/reference.hpp"
#include "support/tolerance.hpp"

namespace test_reduce {

using headwise::Index;
using headwise::Shape;
using headwise::Tensor;
namespace reference = headwise::test::reference;
using headwise::test::Tol;

TEMPLATE_TEST_CASE("sum, mean and max along each axis match the reference", "[reduce]", float,
                   double) {
    using T = TestType;
    const auto [d0, d1, d2] = GENERATE(
        table<Index, Index, Index>({{1, 1, 1}, {2, 3, 4}, {5, 1, 7}, {3, 64, 33}, {16, 9, 1}}));
    const int axis = GENERATE(0, 1, 2, -1, -3);
    const bool keepdim = GENERATE(false, true);
    const Shape s{d0, d1, d2};
    CAPTURE(s, axis, keepdim);
    std::mt19937_64 rng(42);
    const Tensor<T> x = Tensor<T>::randn(s, rng);
    const Tensor<double> x64 = reference::to_double<T>(x);
    const int ax = axis < 0 ? axis + 3 : axis;

    Shape expected_shape = s;
    if (keepdim) {
        expected_shape[ax] = 1;
    } else {
        std::vector<Index> dims;
        for (int a = 0; a < 3; ++a)
            if (a != ax) dims.push_back(s[a]);
        expected_shape = Shape(dims);
    }

    const Tensor<T> total = headwise::sum(x, axis, keepdim);
    const Tensor<T> average = headwise::mean(x, axis, keepdim);
    const Tensor<T> largest = headwise::max(x, axis, keepdim);
    REQUIRE(total.shape() == expected_shape);
    REQUIRE(average.shape() == expected_shape);
    REQUIRE(largest.shape() == expected_shape);
    HEADWISE_CHECK_CLOSE(total, reference::reduce(x64, ax, keepdim, reference::Reduce::sum),
                         Tol<T>::rel);
    HEADWISE_CHECK_CLOSE(average, reference::reduce(x64, ax, keepdim, reference::Reduce::mean),
                         Tol<T>::rel);
    // max picks an element: exact.
    HEADWISE_CHECK_CLOSE(largest, reference::reduce(x64, ax, keepdim, reference::Reduce::max), 0.0);
}

TEMPLATE_TEST_CASE("sum and mean of all elements", "[reduce]", float, double) {
    using T = TestType;
    const Index n = GENERATE(1, 7, 1000, 4099);
    CAPTURE(n);
    std::mt19937_64 rng(42);
    const Tensor<T> x = Tensor<T>::uniform(Shape{n, 3}, 0.0, 1.0, rng);
    const double expected = reference::sum_all(reference::to_double<T>(x));
    CHECK_THAT(static_cast<double>(headwise::sum(x)), WithinRel(expected, Tol<T>::rel));
    CHECK_THAT(static_cast<double>(headwise::mean(x)),
               WithinRel(expected / static_cast<double>(3 * n), Tol<T>::rel));
    CHECK(headwise::sum(Tensor<T>(Shape{0, 4})) == T(0));
}

TEMPLATE_TEST_CASE("reductions of small known tensors", "[reduce]", float, double) {
    using T = TestType;
    // [[1, 5, 3],
    //  [4, 2, 6]]
    const Tensor<T> x(Shape{2, 3}, {T(1), T(5), T(3), T(4), T(2), T(6)});
    const Tensor<T> s0 = headwise::sum(x, 0);
    REQUIRE(s0.shape() == Shape{3});
    CHECK(s0(0) == T(5));
    CHECK(s0(1) == T(7));
    CHECK(s0(2) == T(9));
    const Tensor<T> m1 = headwise::max(x, -1, true);
    REQUIRE(m1.shape() == (Shape{2, 1}));
    CHECK(m1(0, 0) == T(5));
    CHECK(m1(1, 0) == T(6));
    const Tensor<T> a1 = headwise::mean(x, 1);
    CHECK(a1(0) == T(3));
    CHECK(a1(1) == T(4));

    // Reducing a rank-1 tensor gives rank 0 (or [1] with keepdim).
    const Tensor<T> v(Shape{4}, {T(-1), T(-7), T(-3), T(-2)});
    const Tensor<T> m = headwise::max(v, 0);
    REQUIRE(m.shape() == Shape{});
    CHECK(m.data()[0] == T(-1));  // negative values: not initialised from 0
    CHECK(headwise::sum(v, 0, true).shape() == Shape{1});
    CHECK(headwise::sum(x) == T(21));
    CHECK(headwise::mean(x) == T(3.5));
}

TEMPLATE_TEST_CASE("a sum over an empty axis is zero", "[reduce]", float, double) {
    using T = TestType;
    const Tensor<T> x(Shape{2, 0, 3});
    const Tensor<T> s = headwise::sum(x, 1);
    REQUIRE(s.shape() == (Shape{2, 3}));
    for (const T v : s) CHECK(v == T(0));
    CHECK(headwise::sum(x, 0).shape() == (Shape{0, 3}));
    CHECK(headwise::max(x, 2).shape() == (Shape{2, 0}));  // nothing to take the max of: empty
}

TEST_CASE("reduction errors name the axis or the empty extent", "[reduce]") {
    const Tensor<float> x(Shape{2, 3, 4});
    REQUIRE_THROWS_AS(headwise::sum(x, 3), std::invalid_argument);
    REQUIRE_THROWS_WITH(headwise::sum(x, 3),
                        "headwise::sum: axis: must lie in [-3, 3) for a tensor of shape "
                        "[2, 3, 4], got 3");
    REQUIRE_THROWS_WITH(headwise::mean(x, -4),
                        "headwise::mean: axis: must lie in [-3, 3) for a tensor of shape "
                        "[2, 3, 4], got -4");
    REQUIRE_THROWS_WITH(headwise::max(Tensor<double>(Shape{}, {1.0}), 0),
                        "headwise::max: axis: must lie in [0, 0) for a tensor of shape [], got 0");

    const Tensor<double> empty(Shape{2, 0, 3});
    REQUIRE_THROWS_AS(headwise::max(empty, 1), std::invalid_argument);
    REQUIRE_THROWS_WITH(headwise::max(empty, 1),
                        "headwise::max: x: must have a non-zero extent along axis 1, got "
                        "[2, 0, 3]");
    REQUIRE_THROWS_WITH(headwise::mean(empty, -2),
                        "headwise::mean: x: must have a non-zero extent along axis 1, got "
                        "[2, 0, 3]");
    REQUIRE_THROWS_AS(headwise::mean(empty), std::invalid_argument);
    REQUIRE_THROWS_WITH(headwise::mean(empty),
                        "headwise::mean: x: must not be empty, got [2, 0, 3]");
}

}  // namespace test_reduce
