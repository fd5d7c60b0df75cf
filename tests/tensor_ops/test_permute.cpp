// SPDX-License-Identifier: MIT
// Tests of headwise/tensor_ops/permute.hpp: every permutation against an index-by-index loop.
#include <headwise/tensor_ops/permute.hpp>

#include <algorithm>  // std::next_permutation
#include <random>     // std::mt19937_64
#include <stdexcept>  // std::invalid_argument
#include <tuple>      // std::tuple
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/match.hpp"
#include "support/reference.hpp"

namespace test_permute {

using headwise::Index;
using headwise::Shape;
using headwise::Tensor;
using headwise::TensorView;
namespace reference = headwise::test::reference;

using headwise::test::identical;

TEMPLATE_TEST_CASE("permute matches the reference for every permutation of rank 4", "[permute]",
                   float, double) {
    using T = TestType;
    const auto [d0, d1, d2, d3] = GENERATE(table<Index, Index, Index, Index>(
        {{2, 3, 4, 5}, {1, 7, 1, 3}, {3, 1, 2, 1}, {2, 0, 3, 2}}));
    const Shape s{d0, d1, d2, d3};
    CAPTURE(s);
    std::mt19937_64 rng(42);
    const Tensor<T> x = Tensor<T>::randn(s, rng);

    std::vector<int> axes{0, 1, 2, 3};
    int count = 0;
    do {
        CAPTURE(axes);
        const Tensor<T> y = headwise::permute(x, axes);
        const Tensor<T> expected = reference::permute<T>(x, axes);
        REQUIRE(y.shape() == expected.shape());
        CHECK(identical<T>(y, expected));  // a copy: exact
        ++count;
    } while (std::next_permutation(axes.begin(), axes.end()));
    CHECK(count == 24);
}

TEMPLATE_TEST_CASE("B L H D <-> B H L D round-trips", "[permute]", float, double) {
    using T = TestType;
    const auto [B, L, H, D] =
        GENERATE(table<Index, Index, Index, Index>({{2, 5, 4, 8}, {1, 1, 1, 1}, {3, 17, 2, 16}}));
    CAPTURE(B, L, H, D);
    std::mt19937_64 rng(42);
    const Tensor<T> x = Tensor<T>::randn(Shape{B, L, H, D}, rng);  // [B, L, H, D]
    const Tensor<T> heads = headwise::permute(x, {0, 2, 1, 3});    // [B, H, L, D]
    REQUIRE(heads.shape() == (Shape{B, H, L, D}));
    for (Index b = 0; b < B; ++b)
        for (Index h = 0; h < H; ++h)
            for (Index l = 0; l < L; ++l)
                for (Index d = 0; d < D; ++d) REQUIRE(heads(b, h, l, d) == x(b, l, h, d));
    const Tensor<T> back = headwise::permute(heads, {0, 2, 1, 3});  // [B, L, H, D]
    CHECK(identical<T>(back, x));
    // The same with negative axes.
    CHECK(identical<T>(headwise::permute(x, {0, -2, 1, -1}), heads));
}

TEMPLATE_TEST_CASE("transpose swaps two axes, the last two by default", "[permute]", float,
                   double) {
    using T = TestType;
    std::mt19937_64 rng(42);
    const Tensor<T> m = Tensor<T>::randn(Shape{3, 5}, rng);
    const Tensor<T> mt = headwise::transpose(m);
    REQUIRE(mt.shape() == Shape{5, 3});
    for (Index i = 0; i < 3; ++i)
        for (Index j = 0; j < 5; ++j) REQUIRE(mt(j, i) == m(i, j));

    const Tensor<T> x = Tensor<T>::randn(Shape{2, 3, 4}, rng);
    CHECK(identical<T>(headwise::transpose(x), reference::permute<T>(x, {0, 2, 1})));
    CHECK(identical<T>(headwise::transpose(x, 0, 2), reference::permute<T>(x, {2, 1, 0})));
    CHECK(identical<T>(headwise::transpose(x, -3, 1), reference::permute<T>(x, {1, 0, 2})));
    CHECK(identical<T>(headwise::transpose(x, 1, 1), x));  // swapping an axis with itself
}

TEST_CASE("permute moves bool masks and handles ranks 0 and 1", "[permute]") {
    const Tensor<bool> mask(Shape{2, 3}, {true, false, false, false, true, true});
    const Tensor<bool> t = headwise::permute(mask, {1, 0});
    REQUIRE(t.shape() == Shape{3, 2});
    CHECK(identical<bool>(t, Tensor<bool>(Shape{3, 2}, {true, false, false, true, false, true})));

    const Tensor<float> scalar(Shape{}, {4.5f});
    CHECK(headwise::permute(scalar, {}).data()[0] == 4.5f);
    const Tensor<float> v(Shape{3}, {1, 2, 3});
    CHECK(identical<float>(headwise::permute(v, {0}), v));
    CHECK(identical<float>(headwise::permute(v, {-1}), v));

    // A view of user memory goes in without a copy and comes out as a new tensor.
    std::vector<double> buffer{1, 2, 3, 4, 5, 6};
    const Tensor<double> p = headwise::transpose(headwise::view(buffer.data(), Shape{3, 2}));
    CHECK(identical<double>(p, Tensor<double>(Shape{2, 3}, {1, 3, 5, 2, 4, 6})));
}

TEST_CASE("permute and transpose reject axes that are not a permutation", "[permute]") {
    const Tensor<float> x(Shape{2, 3, 4});
    REQUIRE_THROWS_AS(headwise::permute(x, {0, 0, 1}), std::invalid_argument);
    REQUIRE_THROWS_WITH(headwise::permute(x, {0, 0, 1}),
                        "headwise::permute: axes: must list each of the 3 axes of x (shape "
                        "[2, 3, 4]) once, got [0, 0, 1]");
    REQUIRE_THROWS_WITH(headwise::permute(x, {0, 1}),
                        "headwise::permute: axes: must list each of the 3 axes of x (shape "
                        "[2, 3, 4]) once, got [0, 1]");
    REQUIRE_THROWS_WITH(headwise::permute(x, {0, 1, 3}),
                        "headwise::permute: axes: must list each of the 3 axes of x (shape "
                        "[2, 3, 4]) once, got [0, 1, 3]");
    REQUIRE_THROWS_WITH(headwise::permute(x, {2, -1, 0}),  // -1 is 2 again
                        "headwise::permute: axes: must list each of the 3 axes of x (shape "
                        "[2, 3, 4]) once, got [2, -1, 0]");
    REQUIRE_THROWS_WITH(headwise::permute(x, {0, 1, -4}),
                        "headwise::permute: axes: must list each of the 3 axes of x (shape "
                        "[2, 3, 4]) once, got [0, 1, -4]");

    REQUIRE_THROWS_AS(headwise::transpose(x, 0, 3), std::invalid_argument);
    REQUIRE_THROWS_WITH(headwise::transpose(x, 0, 3),
                        "headwise::transpose: axis1: must lie in [-3, 3) for a tensor of shape "
                        "[2, 3, 4], got 3");
    REQUIRE_THROWS_WITH(headwise::transpose(x, -4, 0),
                        "headwise::transpose: axis0: must lie in [-3, 3) for a tensor of shape "
                        "[2, 3, 4], got -4");
    REQUIRE_THROWS_WITH(headwise::transpose(Tensor<float>(Shape{5})),
                        "headwise::transpose: axis0: must lie in [-1, 1) for a tensor of shape "
                        "[5], got -2");
}

}  // namespace test_permute
