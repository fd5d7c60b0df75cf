// SPDX-License-Identifier: MIT
// Tests of headwise/compare.hpp: allclose and max_abs_diff, across shapes and scalar types.
#include <headwise/compare.hpp>

#include <limits>   // std::numeric_limits
#include <sstream>  // std::ostringstream
#include <vector>   // std::vector

#include "support/catch.hpp"

namespace test_compare {

using headwise::Difference;
using headwise::Index;
using headwise::Shape;
using headwise::Tensor;
using headwise::TensorView;

TEMPLATE_TEST_CASE("max_abs_diff finds the largest difference and where it is", "[compare]", float,
                   double) {
    Tensor<TestType> a(Shape{2, 3, 2});
    Tensor<TestType> b(Shape{2, 3, 2});
    for (Index i = 0; i < a.numel(); ++i) a.data()[i] = b.data()[i] = static_cast<TestType>(i + 1);
    a(1, 2, 0) += TestType(0.5);   // |diff| 0.5 at value 11: relative 0.5 / 11.5
    a(0, 0, 1) -= TestType(0.25);  // |diff| 0.25 at value 2: relative 0.25 / 2 (the largest)

    const Difference d = headwise::max_abs_diff(a, b);
    CHECK(d.max_abs == 0.5);
    CHECK(d.flat_index == 10);
    CHECK(d.where == "[1, 2, 0]");
    CHECK_THAT(d.max_rel, WithinRel(0.125, 1e-12));

    std::ostringstream os;
    os << d;
    CHECK(os.str() == "max |a - b| = 0.5 at [1, 2, 0] (max relative 0.125)");

    const Difference same = headwise::max_abs_diff(b, b);
    CHECK(same.max_abs == 0.0);
    CHECK(same.max_rel == 0.0);
    CHECK(same.flat_index == 0);  // the first element, when all differences are 0
    CHECK(same.where == "[0, 0, 0]");
}

TEST_CASE("max_abs_diff compares a float tensor with a double reference", "[compare]") {
    const Tensor<double> ref(Shape{3}, {0.1, 0.2, 1.0 / 3.0});
    Tensor<float> got(Shape{3}, {0.1f, 0.2f, 1.0f / 3.0f});
    const Difference d = headwise::max_abs_diff(got, ref);
    CHECK(d.max_abs > 0.0);  // float rounding is visible in double
    CHECK(d.max_abs < 1e-7);
    CHECK(d.max_rel < 1e-7);
    CHECK(headwise::allclose(got, ref));
    CHECK_FALSE(headwise::allclose(got, ref, 0.0, 1e-12));

    // Views and tensors mix freely; so do const and mutable views.
    const TensorView<float> mutable_view = got.view();
    const TensorView<const double> const_view = ref;
    CHECK(headwise::max_abs_diff(mutable_view, const_view).max_abs == d.max_abs);
    CHECK(headwise::max_abs_diff(ref, got).max_abs == d.max_abs);
}

TEST_CASE("allclose follows NumPy: |a - b| <= atol + rtol * |b|", "[compare]") {
    const Tensor<double> b(Shape{2}, {100.0, 0.0});
    // rtol: 1e-3 relative to |b| = 100 allows 0.1 at the first element.
    CHECK(headwise::allclose(Tensor<double>(Shape{2}, {100.09, 0.0}), b, 1e-3, 0.0));
    CHECK_FALSE(headwise::allclose(Tensor<double>(Shape{2}, {100.11, 0.0}), b, 1e-3, 0.0));
    // atol: the only allowance where b is 0.
    CHECK(headwise::allclose(Tensor<double>(Shape{2}, {100.0, 1e-9}), b, 0.0, 1e-8));
    CHECK_FALSE(headwise::allclose(Tensor<double>(Shape{2}, {100.0, 1e-7}), b, 1e-3, 1e-8));
    // Defaults rtol = 1e-5, atol = 1e-8.
    CHECK(headwise::allclose(Tensor<double>(Shape{2}, {100.0009, 5e-9}), b));
    CHECK_FALSE(headwise::allclose(Tensor<double>(Shape{2}, {100.0011, 0.0}), b));
    // Asymmetric, as in NumPy: b is the reference.
    const Tensor<double> x(Shape{1}, {1.0}), y(Shape{1}, {2.0});
    CHECK(headwise::allclose(x, y, 0.5, 0.0));        // 1 <= 0.5 * 2
    CHECK_FALSE(headwise::allclose(y, x, 0.5, 0.0));  // 1 > 0.5 * 1
}

TEST_CASE("NaN is never close, and equal infinities are", "[compare]") {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double inf = std::numeric_limits<double>::infinity();
    const Tensor<double> a(Shape{3}, {1.0, nan, 3.0});
    const Tensor<double> b(Shape{3}, {1.0, 2.0, 3.5});
    CHECK_FALSE(headwise::allclose(a, a));
    CHECK_FALSE(headwise::allclose(a, b, 1.0, 1.0));

    const Difference d = headwise::max_abs_diff(a, b);
    CHECK(std::isnan(d.max_abs));  // fails every `d.max_abs <= tol`
    CHECK(d.flat_index == 1);
    CHECK(d.where == "[1]");

    const Tensor<double> c(Shape{2}, {inf, -inf});
    CHECK(headwise::allclose(c, c));
    CHECK(headwise::max_abs_diff(c, c).max_abs == 0.0);
    CHECK_FALSE(headwise::allclose(c, Tensor<double>(Shape{2}, {inf, inf})));
    CHECK(headwise::max_abs_diff(c, Tensor<double>(Shape{2}, {inf, 0.0})).where == "[1]");
}

TEST_CASE("empty and rank-0 tensors compare", "[compare]") {
    const Tensor<float> e1(Shape{0, 3}), e2(Shape{0, 3});
    const Difference d = headwise::max_abs_diff(e1, e2);
    CHECK(d.max_abs == 0.0);
    CHECK(d.flat_index == -1);
    CHECK(d.where.empty());
    CHECK(headwise::allclose(e1, e2));

    std::ostringstream os;
    os << d;
    CHECK(os.str() == "max |a - b| = 0 at - (max relative 0)");

    const Tensor<double> s1(Shape{}, {1.0}), s2(Shape{}, {1.5});
    CHECK(headwise::max_abs_diff(s1, s2).where == "[]");
    CHECK(headwise::max_abs_diff(s1, s2).max_abs == 0.5);
}

TEST_CASE("comparing tensors of different shapes throws", "[compare]") {
    const Tensor<float> a(Shape{2, 3});
    const Tensor<double> b(Shape{3, 2});
    REQUIRE_THROWS_AS(headwise::max_abs_diff(a, b), headwise::shape_error);
    REQUIRE_THROWS_WITH(headwise::max_abs_diff(a, b),
                        "headwise::max_abs_diff: b: expected shape [2, 3], got [3, 2]");
    REQUIRE_THROWS_AS(headwise::allclose(a, b), headwise::shape_error);
    REQUIRE_THROWS_WITH(headwise::allclose(a, Tensor<float>(Shape{6})),
                        "headwise::allclose: b: expected shape [2, 3], got [6]");
}

}  // namespace test_compare
