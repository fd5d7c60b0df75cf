// SPDX-License-Identifier: MIT
// Tests of headwise/shape.hpp: extents, rank, numel, printing, comparison and the checks.
#include <headwise/shape.hpp>

#include <sstream>    // std::ostringstream
#include <stdexcept>  // std::invalid_argument, std::length_error
#include <vector>     // std::vector

#include "support/catch.hpp"

namespace test_shape {

using headwise::Index;
using headwise::Shape;

TEST_CASE("a shape holds its extents outermost first", "[shape]") {
    const Shape s{8, 128, 512};
    CHECK(s.rank() == 3);
    CHECK(s[0] == 8);
    CHECK(s[1] == 128);
    CHECK(s[2] == 512);
    CHECK(s.back() == 512);
    CHECK(s.numel() == 8 * 128 * 512);
    CHECK(s.to_vector() == std::vector<Index>{8, 128, 512});
    CHECK(std::vector<Index>(s.begin(), s.end()) == std::vector<Index>{8, 128, 512});

    Shape t = s;
    t[1] = 64;  // extents are writable
    CHECK(t.str() == "[8, 64, 512]");
    CHECK(s.str() == "[8, 128, 512]");  // a copy, not a reference
}

TEST_CASE("rank 0 is a scalar and a zero extent means no elements", "[shape]") {
    const Shape scalar;
    CHECK(scalar.rank() == 0);
    CHECK(scalar.numel() == 1);
    CHECK(scalar.back() == 1);
    CHECK(scalar.str() == "[]");
    CHECK(Shape{}.rank() == 0);

    const Shape empty{3, 0, 5};
    CHECK(empty.rank() == 3);
    CHECK(empty.numel() == 0);
    CHECK(Shape{0}.numel() == 0);
    CHECK(Shape{0}.rank() == 1);
}

TEST_CASE("shapes from a vector equal those from a brace list", "[shape]") {
    const std::vector<Index> dims{2, 3, 4};
    CHECK(Shape(dims) == Shape{2, 3, 4});
    CHECK(Shape(std::vector<Index>{}) == Shape{});
}

TEST_CASE("shapes compare by rank and every extent", "[shape]") {
    CHECK(Shape{2, 3} == Shape{2, 3});
    CHECK_FALSE(Shape{2, 3} != Shape{2, 3});
    CHECK(Shape{2, 3} != Shape{3, 2});
    CHECK(Shape{2, 3} != Shape{2, 3, 1});  // same numel, other rank
    CHECK(Shape{6} != Shape{2, 3});
    CHECK(Shape{} != Shape{1});
}

TEST_CASE("drop_front removes leading axes", "[shape]") {
    const Shape s{2, 3, 4};
    CHECK(s.drop_front() == Shape{3, 4});
    CHECK(s.drop_front(2) == Shape{4});
    CHECK(s.drop_front(3) == Shape{});
    CHECK(s.drop_front(5) == Shape{});  // more than the rank: all of them
    CHECK(s.drop_front(0) == s);
}

TEST_CASE("normalize_axis counts negative axes from the back", "[shape]") {
    const Shape s{2, 3, 4};
    CHECK(s.normalize_axis(-1) == 2);
    CHECK(s.normalize_axis(-3) == 0);
    CHECK(s.normalize_axis(0) == 0);
    CHECK(s.normalize_axis(2) == 2);
}

TEST_CASE("shapes print as a bracketed list", "[shape]") {
    std::ostringstream os;
    os << Shape{8, 128, 512} << ' ' << Shape{} << ' ' << Shape{7};
    CHECK(os.str() == "[8, 128, 512] [] [7]");
}

TEST_CASE("shapes hold up to kMaxRank axes", "[shape]") {
    STATIC_REQUIRE(Shape::kMaxRank == 8);
    const Shape s{1, 2, 1, 2, 1, 2, 1, 2};
    CHECK(s.rank() == 8);
    CHECK(s.numel() == 16);

    REQUIRE_THROWS_AS((Shape{1, 2, 3, 4, 5, 6, 7, 8, 9}), std::invalid_argument);
    REQUIRE_THROWS_WITH((Shape{1, 2, 3, 4, 5, 6, 7, 8, 9}),
                        "headwise::Shape: rank 9 exceeds the maximum rank 8");
    REQUIRE_THROWS_WITH(Shape(std::vector<Index>(9, 1)),
                        "headwise::Shape: rank 9 exceeds the maximum rank 8");
}

TEST_CASE("negative extents are rejected", "[shape]") {
    REQUIRE_THROWS_AS((Shape{1, -2}), std::invalid_argument);
    REQUIRE_THROWS_WITH((Shape{1, -2}), "headwise::Shape: negative extent -2");
    REQUIRE_THROWS_WITH(Shape(std::vector<Index>{-1}), "headwise::Shape: negative extent -1");
}

TEST_CASE("an element count that overflows Index throws, naming the shape", "[shape][overflow]") {
    const Index big = Index(1) << 62;
    CHECK(Shape{big}.numel() == big);  // the largest power of two that fits
    CHECK(Shape{big, 1, 1}.numel() == big);
    REQUIRE_THROWS_AS((Shape{big, 4}), std::length_error);
    REQUIRE_THROWS_WITH((Shape{big, 4}),
                        "headwise::Shape::Shape: shape [4611686018427387904, 4] has more "
                        "elements than an Index (64-bit signed) can count");
    // A zero extent does not excuse the others: every partial product must fit too.
    REQUIRE_THROWS_AS((Shape{Index(1) << 40, Index(1) << 40, 0}), std::length_error);
    REQUIRE_THROWS_AS(Shape(std::vector<Index>{3, big}), std::length_error);
    // Extents written one by one are checked when counted.
    Shape s{2, 3};
    s[0] = big;
    s[1] = 2;
    REQUIRE_THROWS_AS(s.numel(), std::length_error);
    REQUIRE_THROWS_WITH(s.numel(),
                        "headwise::Shape::numel: shape [4611686018427387904, 2] has "
                        "more elements than an Index (64-bit signed) can count");
}

}  // namespace test_shape
