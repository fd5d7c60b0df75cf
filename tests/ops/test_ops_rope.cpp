// SPDX-License-Identifier: MIT
// Tests of headwise/ops/rope.hpp: the tables and both conventions against double loops, the
// backward by finite differences and as the transpose, in place and strided use, transformers'
// rotations and tables, and the errors (shapes, and the bases and factors the module refuses).
#include <headwise/ops/rope.hpp>

#include <headwise/gradcheck.hpp>

#include <cmath>      // std::cos, std::sin, std::pow, std::nextafter, std::isfinite
#include <limits>     // std::numeric_limits
#include <random>     // std::mt19937_64
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string, std::stod
#include <utility>    // std::pair
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/golden.hpp"
#include "support/match.hpp"
#include "support/tolerance.hpp"

namespace test_ops_rope {

using headwise::Index;
using headwise::RopeConvention;
using headwise::Shape;
using headwise::Tensor;
namespace ops = headwise::ops;
using headwise::test::Tol;

namespace {

constexpr RopeConvention kConventions[] = {RopeConvention::rotate_half,
                                           RopeConvention::interleaved};

/// The rotation written as Hugging Face and GPT-J write it, in double: y = x * cos + r(x) * sin,
/// with cos and sin of each feature's angle (pair i's angle on both of its features) and r
/// rotate_half (cat(-x2, x1)) or rotate_every_two ((-x1, x0, -x3, x2, ...)). X [R, D] at
/// positions pos[r]; `sign` -1 rotates backwards.
Tensor<double> reference_rope(const Tensor<double>& X, const std::vector<Index>& pos, double base,
                              double factor, RopeConvention c, double sign = 1.0) {
    const Index R = X.size(0), D = X.size(1);
    Tensor<double> Y(X.shape());
    for (Index r = 0; r < R; ++r)
        for (Index d = 0; d < D; ++d) {
            const bool half = c == RopeConvention::rotate_half;
            const Index pair = half ? d % (D / 2) : d / 2;  // which theta_i
            const double angle =
                static_cast<double>(pos[static_cast<std::size_t>(r)]) / factor /
                std::pow(base, 2.0 * static_cast<double>(pair) / static_cast<double>(D));
            double rotated = 0.0;  // r(x)[d]
            if (half)
                rotated = d < D / 2 ? -X(r, d + D / 2) : X(r, d - D / 2);
            else
                rotated = d % 2 == 0 ? -X(r, d + 1) : X(r, d - 1);
            Y(r, d) = X(r, d) * std::cos(angle) + rotated * sign * std::sin(angle);
        }
    return Y;
}

template <class T>
struct Tables {
    Tensor<T> cos, sin;  // [R, D/2]
};

template <class T>
Tables<T> make_tables(const std::vector<Index>& pos, Index D, double base, double factor) {
    const auto R = static_cast<Index>(pos.size());
    Tables<T> t{Tensor<T>(Shape{R, D / 2}), Tensor<T>(Shape{R, D / 2})};
    ops::rope_tables<T>(pos.data(), base, factor, t.cos.matrix(), t.sin.matrix());
    return t;
}

template <class T, class U>
Tensor<T> cast(const Tensor<U>& x) {
    Tensor<T> y(x.shape());
    for (Index i = 0; i < x.numel(); ++i) y.data()[i] = static_cast<T>(x.data()[i]);
    return y;
}

}  // namespace

TEMPLATE_TEST_CASE("rope_tables: cos and sin of (position / factor) base^(-2i / D)", "[ops][rope]",
                   float, double) {
    using T = TestType;
    const std::vector<Index> pos{0, 1, 7, 3, 200, 4095};
    for (const auto& [D, base, factor] : std::vector<std::tuple<Index, double, double>>{
             {8, 10000.0, 1.0}, {6, 500000.0, 4.0}, {2, 2.0, 1.5}}) {
        CAPTURE(D, base, factor);
        const Tables<T> t = make_tables<T>(pos, D, base, factor);
        Tensor<double> cos_ref(t.cos.shape()), sin_ref(t.sin.shape());
        for (std::size_t r = 0; r < pos.size(); ++r)
            for (Index i = 0; i < D / 2; ++i) {
                const double a =
                    static_cast<double>(pos[r]) / factor *
                    std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(D));
                cos_ref(static_cast<Index>(r), i) = std::cos(a);
                sin_ref(static_cast<Index>(r), i) = std::sin(a);
            }
        HEADWISE_CHECK_CLOSE(t.cos, cos_ref, Tol<T>::rel);
        HEADWISE_CHECK_CLOSE(t.sin, sin_ref, Tol<T>::rel);
        // The consecutive overload is the pointer one over first, first + 1, ...
        Tensor<T> c2(Shape{3, D / 2}), s2(Shape{3, D / 2});
        ops::rope_tables<T>(Index{5}, base, factor, c2.matrix(), s2.matrix());
        const std::vector<Index> five{5, 6, 7};
        const Tables<T> t2 = make_tables<T>(five, D, base, factor);
        CHECK(headwise::test::identical(c2, t2.cos));
        CHECK(headwise::test::identical(s2, t2.sin));
    }
}

TEMPLATE_TEST_CASE("rope_forward matches the rotate_half and rotate_every_two loops", "[ops][rope]",
                   float, double) {
    using T = TestType;
    std::mt19937_64 rng(11);
    const std::vector<Index> pos{0, 1, 2, 9, 31, 1000, 5};
    for (RopeConvention c : kConventions)
        for (const auto& [D, base, factor] : std::vector<std::tuple<Index, double, double>>{
                 {8, 10000.0, 1.0}, {16, 500000.0, 8.0}, {2, 100.0, 1.0}, {10, 1000.0, 2.5}}) {
            CAPTURE(to_string(c), D, base, factor);
            const auto X = Tensor<double>::randn(Shape{7, D}, rng);
            const Tables<T> t = make_tables<T>(pos, D, base, factor);
            const Tensor<T> Xt = cast<T>(X);
            Tensor<T> Y(X.shape());
            ops::rope_forward<T>(Xt.matrix(), t.cos.matrix(), t.sin.matrix(), c, Y.matrix());
            HEADWISE_CHECK_CLOSE(Y, reference_rope(X, pos, base, factor, c), Tol<T>::rel);
            // Position 0 is the identity, exactly.
            for (Index d = 0; d < D; ++d) CHECK(Y(0, d) == Xt(0, d));
        }
}

TEMPLATE_TEST_CASE("rope_forward in place and on a strided column block gives the same bits",
                   "[ops][rope]", float, double) {
    using T = TestType;
    std::mt19937_64 rng(12);
    const Index R = 5, D = 6, W = 20, col = 7;  // a head's block inside a [R, W] projection
    const std::vector<Index> pos{3, 4, 5, 6, 7};
    const Tables<T> t = make_tables<T>(pos, D, 10000.0, 1.0);
    for (RopeConvention c : kConventions) {
        CAPTURE(to_string(c));
        Tensor<T> wide = Tensor<T>::randn(Shape{R, W}, rng);
        const Tensor<T> before = wide;
        Tensor<T> X(Shape{R, D}), Y(Shape{R, D});
        X.matrix() = before.matrix().middleCols(col, D);
        ops::rope_forward<T>(X.matrix(), t.cos.matrix(), t.sin.matrix(), c, Y.matrix());
        ops::rope_forward<T>(wide.matrix().middleCols(col, D), t.cos.matrix(), t.sin.matrix(), c,
                             wide.matrix().middleCols(col, D));  // in place
        Tensor<T> got(Shape{R, D});
        got.matrix() = wide.matrix().middleCols(col, D);
        CHECK(headwise::test::identical(got, Y));
        // The other columns are untouched.
        wide.matrix().middleCols(col, D) = before.matrix().middleCols(col, D);
        CHECK(headwise::test::identical(wide, before));
    }
}

TEST_CASE("rope_backward matches finite differences of rope_forward", "[ops][rope][gradcheck]") {
    const std::vector<Index> pos{0, 2, 5, 17};
    for (RopeConvention c : kConventions) {
        CAPTURE(to_string(c));
        const Index D = 8;
        const Tables<double> t = make_tables<double>(pos, D, 10000.0, 2.0);
        const auto f = [&](const std::vector<Tensor<double>>& x) {
            Tensor<double> y(x[0].shape());
            ops::rope_forward<double>(x[0].matrix(), t.cos.matrix(), t.sin.matrix(), c, y.matrix());
            return y;
        };
        const auto back = [&](const std::vector<Tensor<double>>&, const Tensor<double>& dy) {
            Tensor<double> dx(dy.shape());
            ops::rope_backward<double>(dy.matrix(), t.cos.matrix(), t.sin.matrix(), c, dx.matrix());
            return std::vector<Tensor<double>>{dx};
        };
        std::mt19937_64 rng(13);
        const auto X = Tensor<double>::randn(Shape{4, D}, rng);
        const headwise::GradcheckResult r = headwise::gradcheck(f, back, {X}, rng);
        INFO(r.where);
        CHECK(r.checked == X.numel());
        CHECK(r.max_rel_error <= 1e-8);
    }
}

TEMPLATE_TEST_CASE("rope_backward is the transpose and the inverse of rope_forward", "[ops][rope]",
                   float, double) {
    using T = TestType;
    std::mt19937_64 rng(14);
    const std::vector<Index> pos{1, 4, 9, 16, 25, 36};
    for (RopeConvention c : kConventions) {
        CAPTURE(to_string(c));
        const Index D = 12;
        const Tables<T> t = make_tables<T>(pos, D, 10000.0, 1.0);
        const Tensor<T> X = Tensor<T>::randn(Shape{6, D}, rng);
        const Tensor<T> G = Tensor<T>::randn(Shape{6, D}, rng);
        Tensor<T> Y(X.shape()), dX(X.shape()), back(X.shape());
        ops::rope_forward<T>(X.matrix(), t.cos.matrix(), t.sin.matrix(), c, Y.matrix());
        ops::rope_backward<T>(G.matrix(), t.cos.matrix(), t.sin.matrix(), c, dX.matrix());
        // <R x, g> = <x, R^T g>
        double lhs = 0.0, rhs = 0.0, norm = 0.0;
        for (Index i = 0; i < X.numel(); ++i) {
            lhs += static_cast<double>(Y.data()[i]) * static_cast<double>(G.data()[i]);
            rhs += static_cast<double>(X.data()[i]) * static_cast<double>(dX.data()[i]);
            norm += std::abs(static_cast<double>(X.data()[i]) * static_cast<double>(dX.data()[i]));
        }
        CHECK(std::abs(lhs - rhs) <= Tol<T>::rel * 10 * norm);
        // R^T R x = x: the rotation is orthogonal.
        ops::rope_backward<T>(Y.matrix(), t.cos.matrix(), t.sin.matrix(), c, back.matrix());
        HEADWISE_CHECK_CLOSE(back, X, Tol<T>::rel * 4);
        // And the backward is the rotation by the negated angle (the reference with sign -1).
        HEADWISE_CHECK_CLOSE(dX, reference_rope(cast<double>(G), pos, 10000.0, 1.0, c, -1.0),
                             Tol<T>::rel);
    }
}

TEMPLATE_TEST_CASE("rope_forward matches transformers' rotations and tables", "[ops][rope][golden]",
                   float, double) {
    using T = TestType;
    for (const std::string& name : headwise::test::golden_case_names("rope")) {
        const headwise::test::GoldenCase g = headwise::test::load_golden_case(name, "rope");
        if (g.meta.at("kind") != "rotate") continue;
        CAPTURE(name);
        const auto c = g.meta_int("convention") == 0 ? RopeConvention::rotate_half
                                                     : RopeConvention::interleaved;
        const double base = std::stod(g.meta.at("theta")), factor = std::stod(g.meta.at("factor"));
        const Tensor<double>& P = g.tensor("positions");  // [B, L]
        const Index B = P.size(0), L = P.size(1);
        for (const char* which : {"q", "k"}) {
            const Tensor<double>& X = g.tensor(which);  // [B, heads, L, D]
            const Tensor<double>& want = g.tensor(std::string(which) + "_rot");
            const Index heads = X.size(1), D = X.size(3);
            Tensor<T> got(X.shape());
            for (Index b = 0; b < B; ++b) {
                std::vector<Index> pos(static_cast<std::size_t>(L));
                for (Index l = 0; l < L; ++l)
                    pos[static_cast<std::size_t>(l)] = static_cast<Index>(P(b, l));
                const Tables<T> t = make_tables<T>(pos, D, base, factor);
                if (g.flag("hf_tables")) {  // transformers computes the angles in float32
                    Tensor<double> hc(Shape{L, D / 2}), hs(Shape{L, D / 2});
                    for (Index l = 0; l < L; ++l)
                        for (Index i = 0; i < D / 2; ++i) {
                            hc(l, i) = g.tensor("hf_cos")(b, l, i);
                            hs(l, i) = g.tensor("hf_sin")(b, l, i);
                        }
                    HEADWISE_CHECK_CLOSE(t.cos, hc, 2e-6);
                    HEADWISE_CHECK_CLOSE(t.sin, hs, 2e-6);
                }
                for (Index h = 0; h < heads; ++h) {
                    const Index offset = (b * heads + h) * L * D;
                    const Tensor<T> x = cast<T>(Tensor<double>(
                        Shape{L, D},
                        std::vector<double>(X.data() + offset, X.data() + offset + L * D)));
                    headwise::MatrixMap<T> y(got.data() + offset, L, D);
                    ops::rope_forward<T>(x.matrix(), t.cos.matrix(), t.sin.matrix(), c, y);
                }
            }
            CAPTURE(which);
            HEADWISE_CHECK_CLOSE(got, want, headwise::test::kGoldenTolerance<T>);
        }
    }
}

TEST_CASE("rope kernels reject odd head widths and mis-shaped tables", "[ops][rope][errors]") {
    Tensor<double> X(Shape{3, 5}), Y(Shape{3, 5}), C(Shape{3, 2}), S(Shape{3, 2});
    CHECK_THROWS_WITH(ops::rope_forward<double>(X.matrix(), C.matrix(), S.matrix(),
                                                RopeConvention::rotate_half, Y.matrix()),
                      "headwise::ops::rope_forward: X: must have an even number of columns "
                      "(pairs), got [3, 5]");
    Tensor<double> X4(Shape{3, 4}), Y4(Shape{3, 4}), C3(Shape{3, 3});
    CHECK_THROWS_AS(ops::rope_backward<double>(X4.matrix(), C3.matrix(), S.matrix(),
                                               RopeConvention::interleaved, Y4.matrix()),
                    headwise::shape_error);
    CHECK_THROWS_WITH(ops::rope_backward<double>(X4.matrix(), C3.matrix(), S.matrix(),
                                                 RopeConvention::interleaved, Y4.matrix()),
                      "headwise::ops::rope_backward: Cos: expected shape [3, 2], got [3, 3]");
    Tensor<double> Y5(Shape{2, 4});
    CHECK_THROWS_AS(ops::rope_forward<double>(X4.matrix(), C.matrix(), S.matrix(),
                                              RopeConvention::rotate_half, Y5.matrix()),
                    headwise::shape_error);
    CHECK_THROWS_AS(ops::rope_tables<double>(Index{0}, 10000.0, 1.0, C.matrix(), C3.matrix()),
                    headwise::shape_error);
}

TEST_CASE("rope_tables refuses the bases and factors the module refuses, before writing",
          "[ops][rope][errors]") {
    const double kInf = std::numeric_limits<double>::infinity();
    const double kNaN = std::numeric_limits<double>::quiet_NaN();
    const std::string fn = "headwise::ops::rope_tables: ";
    Tensor<double> C(Shape{3, 2}), S(Shape{3, 2});
    C.fill(7.0);
    S.fill(7.0);
    const std::vector<Index> pos{0, 1, 2};
    for (const auto& [base, shown] :
         std::vector<std::pair<double, std::string>>{{0.0, "0"},
                                                     {-10000.0, "-1e+04"},
                                                     {1.0, "1"},
                                                     {0.5, "0.5"},
                                                     {kInf, "inf"},
                                                     {-kInf, "-inf"}}) {
        CAPTURE(base);
        const std::string message = fn + "base: must be finite and greater than 1, got " + shown;
        CHECK_THROWS_AS(ops::rope_tables<double>(Index{0}, base, 1.0, C.matrix(), S.matrix()),
                        std::invalid_argument);
        CHECK_THROWS_WITH(ops::rope_tables<double>(Index{0}, base, 1.0, C.matrix(), S.matrix()),
                          message);
        CHECK_THROWS_WITH(ops::rope_tables<double>(pos.data(), base, 1.0, C.matrix(), S.matrix()),
                          message);
    }
    CHECK_THROWS_WITH(ops::rope_tables<double>(Index{0}, kNaN, 1.0, C.matrix(), S.matrix()),
                      ContainsSubstring(fn + "base: must be finite and greater than 1, got") &&
                          ContainsSubstring("nan"));
    for (const auto& [factor, shown] : std::vector<std::pair<double, std::string>>{
             {0.0, "0"}, {-2.0, "-2"}, {0.5, "0.5"}, {kInf, "inf"}}) {
        CAPTURE(factor);
        const std::string message =
            fn + "scaling_factor: must be finite and at least 1, got " + shown;
        CHECK_THROWS_WITH(
            ops::rope_tables<float>(Index{0}, 10000.0, factor, Tensor<float>(Shape{3, 2}).matrix(),
                                    Tensor<float>(Shape{3, 2}).matrix()),
            message);
        CHECK_THROWS_WITH(
            ops::rope_tables<double>(pos.data(), 10000.0, factor, C.matrix(), S.matrix()), message);
    }
    CHECK_THROWS_WITH(
        ops::rope_tables<double>(Index{0}, 10000.0, kNaN, C.matrix(), S.matrix()),
        ContainsSubstring(fn + "scaling_factor: must be finite and at least 1, got") &&
            ContainsSubstring("nan"));
    CHECK_THROWS_WITH(ops::rope_tables<double>(static_cast<const Index*>(nullptr), 10000.0, 1.0,
                                               C.matrix(), S.matrix()),
                      fn + "positions: must point to Cos.rows() positions, got null for 3 rows");
    for (Index i = 0; i < C.numel(); ++i) {  // nothing written
        CHECK(C.data()[i] == 7.0);
        CHECK(S.data()[i] == 7.0);
    }
    // The module's own limits are accepted: base just above 1, factor 1.
    ops::rope_tables<double>(Index{0}, std::nextafter(1.0, 2.0), 1.0, C.matrix(), S.matrix());
    CHECK(C(0, 0) == 1.0);
    CHECK(std::isfinite(C(2, 1)));
    Tensor<double> none(Shape{0, 2});
    ops::rope_tables<double>(static_cast<const Index*>(nullptr), 10000.0, 1.0, none.matrix(),
                             none.matrix());
}

TEST_CASE("rope frequency_factors divide each pair's frequency, checked before writing",
          "[ops][rope][errors]") {
    // llama.cpp's rope_freqs: theta_i / factor_i, after the scaling type's change.
    headwise::RopeScaling s;
    s.frequency_factors = {1.0, 2.0, 4.0, 8.0};
    for (Index i = 0; i < 4; ++i)
        CHECK(ops::rope_frequency(10000.0, 8, s, 0, i) ==
              std::pow(10000.0, -2.0 * static_cast<double>(i) / 8.0) /
                  s.frequency_factors[static_cast<std::size_t>(i)]);
    Tensor<double> C(Shape{3, 4}), S(Shape{3, 4});
    ops::rope_tables<double>(Index{0}, 10000.0, 1.0, s, C.matrix(), S.matrix());
    CHECK(C.matrix()(2, 3) == std::cos(2.0 * std::pow(10000.0, -6.0 / 8.0) / 8.0));
    CHECK(S.matrix()(2, 1) == std::sin(2.0 * std::pow(10000.0, -2.0 / 8.0) / 2.0));

    const std::string fn = "headwise::ops::rope_tables: ";
    C.fill(7.0);
    S.fill(7.0);
    s.frequency_factors = {1.0, 2.0, 4.0};
    CHECK_THROWS_MATCHES(
        ops::rope_tables<double>(Index{0}, 10000.0, 1.0, s, C.matrix(), S.matrix()),
        std::invalid_argument,
        Message(fn + "scaling.frequency_factors: must be empty or hold one "
                     "factor per pair (Cos.cols() = 4), got 3 factors"));
    for (const auto& [bad, shown] : std::vector<std::pair<double, std::string>>{
             {0.0, "0"}, {-2.0, "-2"}, {std::numeric_limits<double>::infinity(), "inf"}}) {
        CAPTURE(bad);
        s.frequency_factors = {1.0, bad, 4.0, 8.0};
        CHECK_THROWS_MATCHES(
            ops::rope_tables<double>(Index{0}, 10000.0, 1.0, s, C.matrix(), S.matrix()),
            std::invalid_argument,
            Message(fn + "scaling.frequency_factors[1]: must be finite and positive, got " +
                    shown));
    }
    for (Index i = 0; i < C.numel(); ++i) {  // nothing written
        CHECK(C.data()[i] == 7.0);
        CHECK(S.data()[i] == 7.0);
    }
}

}  // namespace test_ops_rope
