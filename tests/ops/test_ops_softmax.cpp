// SPDX-License-Identifier: MIT
// Tests of headwise/ops/softmax.hpp: the reference, -infinity masks, overflow, the gradient.
#include <headwise/ops/softmax.hpp>

#include <headwise/compare.hpp>
#include <headwise/gradcheck.hpp>

#include <cmath>     // std::isfinite, std::isnan, std::sqrt
#include <iterator>  // std::size
#include <limits>    // std::numeric_limits
#include <random>    // std::mt19937_64
#include <vector>    // std::vector

#include "support/catch.hpp"
#include "support/reference.hpp"
#include "support/tolerance.hpp"

namespace test_ops_softmax {

using headwise::Index;
using headwise::Shape;
using headwise::Tensor;
using headwise::TensorView;
namespace ops = headwise::ops;
namespace reference = headwise::test::reference;
using headwise::test::Tol;

namespace {

/// Random scores with entries of magnitude ~3 and, with probability `p_masked`, -infinity.
template <class T>
Tensor<T> random_scores(const Shape& shape, double p_masked, std::mt19937_64& rng) {
    Tensor<T> S = Tensor<T>::randn(shape, rng);  // [R, C]
    for (T& s : S) {
        s *= T(3);
        if (headwise::bernoulli(rng, p_masked)) s = -std::numeric_limits<T>::infinity();
    }
    return S;
}

/// Reference softmax backward in double: dS[i, j] = P[i, j] (dP[i, j] - sum_k dP[i, k] P[i, k]).
Tensor<double> softmax_backward_reference(const Tensor<double>& P, const Tensor<double>& dP) {
    const Index R = P.size(0), C = P.size(1);
    Tensor<double> dS(P.shape());  // [R, C]
    for (Index i = 0; i < R; ++i) {
        double dot = 0.0;
        for (Index k = 0; k < C; ++k) dot += dP(i, k) * P(i, k);
        for (Index j = 0; j < C; ++j) dS(i, j) = P(i, j) * (dP(i, j) - dot);
    }
    return dS;
}

/// A contiguous copy of a [rows, cols] matrix or matrix block.
template <class T, class Block>
Tensor<T> copy_block(const Block& M) {
    Tensor<T> t(Shape{M.rows(), M.cols()});
    t.matrix() = M;
    return t;
}

}  // namespace

TEMPLATE_TEST_CASE("softmax_forward matches the reference, in place too", "[ops][softmax]", float,
                   double) {
    using T = TestType;
    const auto [R, C, p_masked] = GENERATE(table<Index, Index, double>({{1, 1, 0.0},
                                                                        {3, 5, 0.0},
                                                                        {8, 33, 0.0},
                                                                        {17, 64, 0.0},
                                                                        {8, 33, 0.3},
                                                                        {17, 64, 0.6},
                                                                        {0, 4, 0.0},
                                                                        {3, 0, 0.0}}));
    CAPTURE(R, C, p_masked);
    std::mt19937_64 rng(42);
    const Tensor<T> S = random_scores<T>(Shape{R, C}, p_masked, rng);  // [R, C]
    Tensor<T> P = Tensor<T>::full(Shape{R, C}, T(9));                  // [R, C], overwritten

    ops::softmax_forward<T>(S.matrix(), P.matrix());

    const Tensor<double> expected = reference::softmax(reference::to_double<T>(S));
    const headwise::Difference d = headwise::max_abs_diff(P, expected);
    INFO(d);
    // Probabilities are <= 1; a few roundings of T in exp, sum and scale.
    CHECK(d.max_abs <= 4 * Tol<T>::rel);

    Tensor<T> in_place = S;  // [R, C]
    ops::softmax_forward<T>(in_place.matrix());
    CHECK(headwise::max_abs_diff(in_place, P).max_abs == 0.0);
    Tensor<T> aliased = S;  // [R, C]
    ops::softmax_forward<T>(aliased.matrix(), aliased.matrix());
    CHECK(headwise::max_abs_diff(aliased, P).max_abs == 0.0);
}

TEMPLATE_TEST_CASE("softmax_forward gives masked entries exactly 0 and rows summing to 1",
                   "[ops][softmax]", float, double) {
    using T = TestType;
    constexpr T inf = std::numeric_limits<T>::infinity();
    // Row 0: two masked keys. Row 1: every key masked. Row 2: one key left.
    const Tensor<T> S(Shape{3, 4}, {T(0.5), -inf, T(2), -inf,  //
                                    -inf, -inf, -inf, -inf,    //
                                    -inf, -inf, T(-3), -inf});
    Tensor<T> P(Shape{3, 4});
    ops::softmax_forward<T>(S.matrix(), P.matrix());

    CHECK(P(0, 1) == T(0));
    CHECK(P(0, 3) == T(0));
    const double e = std::exp(1.5);  // softmax([0.5, 2]) = [1, e^1.5] / (1 + e^1.5)
    CHECK_THAT(static_cast<double>(P(0, 0)), WithinRel(1.0 / (1.0 + e), 4 * Tol<T>::rel));
    CHECK_THAT(static_cast<double>(P(0, 2)), WithinRel(e / (1.0 + e), 4 * Tol<T>::rel));
    for (Index j = 0; j < 4; ++j) {
        CAPTURE(j);
        CHECK(P(1, j) == T(0));  // a fully masked row is zero, not NaN
        CHECK(P(2, j) == (j == 2 ? T(1) : T(0)));
    }
}

TEMPLATE_TEST_CASE("softmax_forward does not overflow or underflow for large scores",
                   "[ops][softmax]", float, double) {
    using T = TestType;
    // exp(1000) overflows and exp(-1000) underflows in float and double alike; only the
    // max-subtracted form gets these right.
    const Tensor<T> S(Shape{3, 3}, {T(1000), T(1001), T(1002),     //
                                    T(-1000), T(-1001), T(-1002),  //
                                    T(1e4), T(-1e4), T(0)});
    Tensor<T> P(Shape{3, 3});
    ops::softmax_forward<T>(S.matrix(), P.matrix());
    for (T p : P) CHECK(std::isfinite(p));

    const Tensor<double> shifted(Shape{2, 3}, {0.0, 1.0, 2.0, 0.0, -1.0, -2.0});
    const Tensor<double> expected = reference::softmax(shifted);
    for (Index i = 0; i < 2; ++i)
        for (Index j = 0; j < 3; ++j) {
            CAPTURE(i, j);
            CHECK_THAT(static_cast<double>(P(i, j)), WithinRel(expected(i, j), 4 * Tol<T>::rel));
        }
    CHECK(P(2, 0) == T(1));
    CHECK(P(2, 1) == T(0));
}

TEMPLATE_TEST_CASE("softmax_forward works on strided column blocks", "[ops][softmax]", float,
                   double) {
    using T = TestType;
    const Index R = 5, C = 6;
    std::mt19937_64 rng(42);
    const Tensor<T> S_wide = random_scores<T>(Shape{R, C + 3}, 0.2, rng);  // [R, C + 3]
    Tensor<T> P_wide = Tensor<T>::full(Shape{R, C + 2}, T(-1));            // [R, C + 2]
    ops::softmax_forward<T>(S_wide.column_block(1, C), P_wide.column_block(2, C));

    // Against the contiguous path, up to rounding: alignment changes which entries Eigen
    // handles in SIMD packets and which in the scalar tail.
    Tensor<T> P(Shape{R, C});  // [R, C]
    ops::softmax_forward<T>(copy_block<T>(S_wide.column_block(1, C)).matrix(), P.matrix());
    const headwise::Difference d =
        headwise::max_abs_diff(copy_block<T>(P_wide.column_block(2, C)), P);
    INFO(d);
    CHECK(d.max_abs <= 4 * Tol<T>::rel);
    for (Index i = 0; i < R; ++i) {
        CHECK(P_wide(i, 0) == T(-1));
        CHECK(P_wide(i, 1) == T(-1));
    }
}

TEMPLATE_TEST_CASE("softmax_backward matches the reference and writes its output", "[ops][softmax]",
                   float, double) {
    using T = TestType;
    const auto [R, C, p_masked] = GENERATE(table<Index, Index, double>(
        {{1, 1, 0.0}, {3, 5, 0.0}, {8, 33, 0.0}, {17, 64, 0.3}, {0, 4, 0.0}}));
    CAPTURE(R, C, p_masked);
    std::mt19937_64 rng(42);
    const Tensor<T> S = random_scores<T>(Shape{R, C}, p_masked, rng);  // [R, C]
    const Tensor<T> dP = Tensor<T>::randn(Shape{R, C}, rng);           // [R, C]
    Tensor<T> P(Shape{R, C});                                          // [R, C]
    ops::softmax_forward<T>(S.matrix(), P.matrix());
    Tensor<T> dS = Tensor<T>::full(Shape{R, C}, T(5));  // [R, C]; overwritten, not added to

    ops::softmax_backward<T>(P.matrix(), dP.matrix(), dS.matrix());

    const Tensor<double> expected =
        softmax_backward_reference(reference::to_double<T>(P), reference::to_double<T>(dP));
    const headwise::Difference d = headwise::max_abs_diff(dS, expected);
    INFO(d);
    CHECK(d.max_abs <= 4 * Tol<T>::rel * std::sqrt(static_cast<double>(C) + 1.0));

    // In place: dP's buffer becomes dS.
    Tensor<T> dP_then_dS = dP;  // [R, C]
    ops::softmax_backward<T>(P.matrix(), dP_then_dS.matrix(), dP_then_dS.matrix());
    CHECK(headwise::max_abs_diff(dP_then_dS, dS).max_abs == 0.0);
}

TEMPLATE_TEST_CASE("softmax_backward gives masked entries and fully masked rows zero gradient",
                   "[ops][softmax]", float, double) {
    using T = TestType;
    constexpr T inf = std::numeric_limits<T>::infinity();
    const Tensor<T> S(Shape{2, 3}, {T(1), -inf, T(2),  //
                                    -inf, -inf, -inf});
    const Tensor<T> dP(Shape{2, 3}, {T(0.3), T(-2), T(1.5),  //
                                     T(4), T(-1), T(0.25)});
    Tensor<T> P(Shape{2, 3}), dS = Tensor<T>::full(Shape{2, 3}, T(7));
    ops::softmax_forward<T>(S.matrix(), P.matrix());
    ops::softmax_backward<T>(P.matrix(), dP.matrix(), dS.matrix());
    CHECK(dS(0, 1) == T(0));
    for (Index j = 0; j < 3; ++j) {
        CAPTURE(j);
        CHECK(dS(1, j) == T(0));
    }
    // The unmasked entries: dS = P (dP - P . dP); the two sum to zero (shift invariance).
    CHECK(dS(0, 0) != T(0));
    CHECK_THAT(static_cast<double>(dS(0, 0) + dS(0, 2)), WithinAbs(0.0, 4 * Tol<T>::rel));
}

TEST_CASE("softmax kernels pass a central-difference gradient check", "[ops][softmax][gradcheck]") {
    const auto [R, C] = GENERATE(table<Index, Index>({{1, 1}, {1, 4}, {3, 5}, {4, 9}}));
    CAPTURE(R, C);
    std::mt19937_64 rng(42);
    const std::vector<Tensor<double>> inputs{Tensor<double>::randn(Shape{R, C}, rng)};
    const auto forward = [](const std::vector<Tensor<double>>& x) {
        Tensor<double> P(x[0].shape());  // [R, C]
        ops::softmax_forward<double>(x[0].matrix(), P.matrix());
        return P;
    };
    const auto backward = [&forward](const std::vector<Tensor<double>>& x,
                                     const Tensor<double>& dP) {
        const Tensor<double> P = forward(x);  // [R, C]
        std::vector<Tensor<double>> grads{Tensor<double>(x[0].shape())};
        ops::softmax_backward<double>(P.matrix(), dP.matrix(), grads[0].matrix());
        return grads;
    };
    const headwise::GradcheckResult result = headwise::gradcheck(forward, backward, inputs, rng);
    INFO("max relative error " << result.max_rel_error << " at " << result.where);
    CHECK(result.ok);
    CHECK(result.max_rel_error <= 1e-6);
    CHECK(result.checked == R * C);
}

TEMPLATE_TEST_CASE("softmax kernels reject mismatched shapes", "[ops][softmax]", float, double) {
    using T = TestType;
    const Tensor<T> S(Shape{2, 3}), dP_bad(Shape{3, 2});
    Tensor<T> P_bad(Shape{2, 4}), dS(Shape{2, 3}), dS_bad(Shape{1, 3});
    CHECK_THROWS_MATCHES(ops::softmax_forward<T>(S.matrix(), P_bad.matrix()), headwise::shape_error,
                         Message("headwise::ops::softmax_forward: P: expected shape [2, 3], got "
                                 "[2, 4]"));
    CHECK_THROWS_MATCHES(ops::softmax_backward<T>(S.matrix(), dP_bad.matrix(), dS.matrix()),
                         headwise::shape_error,
                         Message("headwise::ops::softmax_backward: dP: expected shape [2, 3], "
                                 "got [3, 2]"));
    CHECK_THROWS_MATCHES(ops::softmax_backward<T>(S.matrix(), S.matrix(), dS_bad.matrix()),
                         headwise::shape_error,
                         Message("headwise::ops::softmax_backward: dS: expected shape [2, 3], "
                                 "got [1, 3]"));
}

TEMPLATE_TEST_CASE("softmax_forward: NaN in, NaN out, and a fully masked row is zero",
                   "[ops][softmax][nan]", float, double) {
    using T = TestType;
    constexpr T inf = std::numeric_limits<T>::infinity();
    const T nan = std::numeric_limits<T>::quiet_NaN();
    // A NaN anywhere in a row (first, middle, last, beside -inf), or +inf, makes the whole row
    // NaN, as in PyTorch; the max must not skip a NaN. Rows without either are unaffected.
    const Index C = 70;  // more than one 64-wide chunk of the exp
    const Index nan_at[] = {0, 1, 35, 63, 64, 69};
    const Index R = 4 + static_cast<Index>(std::size(nan_at));
    std::mt19937_64 rng(17);
    Tensor<T> S = random_scores<T>(Shape{R, C}, 0.2, rng);  // [R, C]
    for (Index j = 0; j < C; ++j) S(0, j) = -inf;           // fully masked
    S(1, 5) = inf;                                          // +inf: exp(inf - inf)
    S(2, 0) = T(1);                                         // a finite row
    for (Index r = 0; r < static_cast<Index>(std::size(nan_at)); ++r) S(4 + r, nan_at[r]) = nan;
    for (int in_place = 0; in_place < 2; ++in_place) {
        CAPTURE(in_place);
        Tensor<T> P(S.shape());
        if (in_place) {
            P = S;
            ops::softmax_forward<T>(P.matrix());
        } else {
            ops::softmax_forward<T>(S.matrix(), P.matrix());
        }
        for (Index i = 0; i < R; ++i) {
            CAPTURE(i);
            const bool poisoned = i == 1 || i >= 4;
            double sum = 0;
            for (Index j = 0; j < C; ++j) {
                if (i == 0) CHECK(P(i, j) == T(0));
                if (poisoned) CHECK(std::isnan(P(i, j)));
                if (!poisoned) CHECK(std::isfinite(P(i, j)));
                sum += static_cast<double>(P(i, j));
            }
            if (i == 2 || i == 3) CHECK_THAT(sum, WithinRel(1.0, 8 * Tol<T>::rel));
        }
        // A fully masked row's gradient is exactly zero; a NaN row's is NaN.
        Tensor<T> dP = Tensor<T>::randn(S.shape(), rng), dS(S.shape());
        ops::softmax_backward<T>(P.matrix(), dP.matrix(), dS.matrix());
        for (Index j = 0; j < C; ++j) {
            CHECK(dS(0, j) == T(0));
            CHECK(std::isnan(dS(4, j)));
        }
    }
}

}  // namespace test_ops_softmax
