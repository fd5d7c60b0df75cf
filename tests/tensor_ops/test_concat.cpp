// SPDX-License-Identifier: MIT
// Tests of headwise/tensor_ops/concat.hpp: concat against an element loop, split as its inverse.
#include <headwise/tensor_ops/concat.hpp>

#include <random>     // std::mt19937_64
#include <stdexcept>  // std::invalid_argument
#include <tuple>      // std::tuple
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/match.hpp"
#include "support/reference.hpp"

namespace test_concat {

using headwise::Index;
using headwise::Shape;
using headwise::Tensor;
using headwise::TensorView;
namespace reference = headwise::test::reference;

using headwise::test::identical;

TEMPLATE_TEST_CASE("concat matches the reference along every axis, and split undoes it", "[concat]",
                   float, double) {
    using T = TestType;
    // Extents along the joined axis of three parts (one may be empty), the others fixed.
    const auto [e0, e1, e2] =
        GENERATE(table<Index, Index, Index>({{1, 1, 1}, {2, 3, 4}, {5, 0, 2}, {0, 0, 3}}));
    const int axis = GENERATE(0, 1, 2, -1);
    CAPTURE(e0, e1, e2, axis);
    const int ax = axis < 0 ? axis + 3 : axis;
    std::mt19937_64 rng(42);
    std::vector<Tensor<T>> parts;
    for (const Index e : {e0, e1, e2}) {
        Shape s{2, 3, 4};
        s[ax] = e;
        parts.push_back(Tensor<T>::randn(s, rng));
    }
    const std::vector<TensorView<const T>> views(parts.begin(), parts.end());

    const Tensor<T> joined = headwise::concat(views, axis);
    Shape expected_shape{2, 3, 4};
    expected_shape[ax] = e0 + e1 + e2;
    REQUIRE(joined.shape() == expected_shape);
    CHECK(identical<T>(joined, reference::concat<T>(views, ax)));

    const std::vector<Tensor<T>> pieces = headwise::split(joined, {e0, e1, e2}, axis);
    REQUIRE(pieces.size() == 3);
    for (std::size_t i = 0; i < 3; ++i) {
        CAPTURE(i);
        CHECK(identical<T>(pieces[i], parts[i]));
    }
}

TEST_CASE("concat of named tensors and of bool masks", "[concat]") {
    const Tensor<float> a(Shape{2, 1}, {1, 2}), b(Shape{2, 2}, {3, 4, 5, 6});
    const Tensor<float> ab = headwise::concat<float>({a, b}, -1);
    CHECK(identical<float>(ab, Tensor<float>(Shape{2, 3}, {1, 3, 4, 2, 5, 6})));
    const Tensor<float> single = headwise::concat<float>({b}, 0);
    CHECK(identical<float>(single, b));
    CHECK(single.data() != b.data());  // a copy

    const Tensor<bool> m1(Shape{1, 2}, {true, false}), m2(Shape{1, 2}, {false, true});
    const Tensor<bool> m = headwise::concat<bool>({m1, m2, m1});
    CHECK(identical<bool>(m, Tensor<bool>(Shape{3, 2}, {true, false, false, true, true, false})));
    const std::vector<Tensor<bool>> back = headwise::split(m, {2, 1});
    CHECK(identical<bool>(back[1], m1));
}

TEST_CASE("split cuts consecutive pieces, empty ones included", "[concat]") {
    const Tensor<double> x = Tensor<double>::arange(12).reshape({3, 4});
    const std::vector<Tensor<double>> cols = headwise::split(x, {1, 0, 3}, 1);
    REQUIRE(cols.size() == 3);
    CHECK(identical<double>(cols[0], Tensor<double>(Shape{3, 1}, {0, 4, 8})));
    CHECK(cols[1].shape() == (Shape{3, 0}));
    CHECK(identical<double>(cols[2], Tensor<double>(Shape{3, 3}, {1, 2, 3, 5, 6, 7, 9, 10, 11})));
    CHECK(headwise::split(Tensor<double>(Shape{0, 2}), {}, 0).empty());  // no pieces of nothing
}

TEST_CASE("concat and split errors", "[concat]") {
    const Tensor<float> a(Shape{2, 3, 4});
    REQUIRE_THROWS_AS(headwise::concat<float>({}, 0), std::invalid_argument);
    REQUIRE_THROWS_WITH(headwise::concat<float>({}, 0),
                        "headwise::concat: parts: must hold at least one tensor, got 0");
    REQUIRE_THROWS_AS(headwise::concat<float>({a, Tensor<float>(Shape{3, 5, 4})}, 1),
                      headwise::shape_error);
    REQUIRE_THROWS_WITH(headwise::concat<float>({a, a, Tensor<float>(Shape{3, 5, 4})}, 1),
                        "headwise::concat: parts[2]: expected shape [2, *, 4], got [3, 5, 4]");
    REQUIRE_THROWS_WITH(headwise::concat<float>({a, Tensor<float>(Shape{2, 3})}, 0),
                        "headwise::concat: parts[1]: expected shape [*, 3, 4], got [2, 3]");
    REQUIRE_THROWS_WITH(headwise::concat<float>({a, a}, 3),
                        "headwise::concat: axis: must lie in [-3, 3) for a tensor of shape "
                        "[2, 3, 4], got 3");

    REQUIRE_THROWS_AS(headwise::split(a, {1, 1}, 1), std::invalid_argument);
    REQUIRE_THROWS_WITH(headwise::split(a, {1, 1}, 1),
                        "headwise::split: sizes: must be non-negative and add up to 3, the extent "
                        "of axis 1 of x (shape [2, 3, 4]), got [1, 1]");
    REQUIRE_THROWS_WITH(headwise::split(a, {5, -1}, -1),
                        "headwise::split: sizes: must be non-negative and add up to 4, the extent "
                        "of axis 2 of x (shape [2, 3, 4]), got [5, -1]");
    REQUIRE_THROWS_WITH(headwise::split(a, {}, 0),
                        "headwise::split: sizes: must be non-negative and add up to 2, the extent "
                        "of axis 0 of x (shape [2, 3, 4]), got []");
    REQUIRE_THROWS_WITH(headwise::split(a, {2}, -4),
                        "headwise::split: axis: must lie in [-3, 3) for a tensor of shape "
                        "[2, 3, 4], got -4");
}

}  // namespace test_concat
