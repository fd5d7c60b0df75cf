// SPDX-License-Identifier: MIT
// The blocked attention kernels against the materialised ones: every mask kind, appended keys,
// dropout, tiles that do not divide L or S, fully masked rows, NaN scores, skipped tiles, and
// gradcheck of the blocked backward; each on every path this CPU runs (the packed panels' AVX2
// register tile, and the ops::gemm products of CPUs without AVX2 + FMA).
#include <headwise/gradcheck.hpp>
#include <headwise/ops/attention.hpp>
#include <headwise/ops/blocked_attention.hpp>

#include <algorithm>  // std::max, std::max_element
#include <cmath>      // std::sqrt, std::isnan, std::isfinite, std::exp, std::log, std::abs
#include <limits>     // std::numeric_limits
#include <string>     // std::string
#include <tuple>      // std::get
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/match.hpp"
#include "support/tolerance.hpp"

namespace test_ops_blocked_attention {

using namespace headwise;
using headwise::detail::SimdLevel;
using headwise::test::Tol;

namespace {

/// The instruction sets the blocked kernels choose between that this CPU runs: none (the
/// ops::gemm products) always, and its own level where that has AVX2 + FMA (the packed panels).
std::vector<SimdLevel> levels_here() {
    std::vector<SimdLevel> levels = {SimdLevel::none};
    if (detail::cpu_simd_level() != SimdLevel::none) levels.push_back(detail::cpu_simd_level());
    return levels;
}

enum MaskBits : int {
    kBool = 1,         // a boolean [L, S0] mask, one row fully hidden
    kBias = 2,         // an additive [L, S0] bias with a few -inf
    kPadding = 4,      // a key padding mask [S0] with a run of padded keys
    kCausal = 8,       // causal, top-left unless kBottomRight
    kAppended = 16,    // two keys past the masked ones (bias_k, zero attention): never masked
    kBottomRight = 32  // causal aligned bottom-right: query i sees keys j <= i + S0 - L
};

/// One slice's inputs and masks, drawn from a fixed seed. S0 = the keys the masks cover.
template <class T>
struct Slice {
    Index L, S, D, Dv, S0;
    Tensor<T> Q, K, V, dO, bias;
    Tensor<bool> mask, padding;
    ops::ScoreMask<T> sm;

    Slice(Index L_, Index S_, Index D_, Index Dv_, int masks, std::uint64_t seed)
        : L(L_), S(S_), D(D_), Dv(Dv_), S0((masks & kAppended) && S_ > 2 ? S_ - 2 : S_) {
        std::mt19937_64 rng(seed);
        Q = Tensor<T>::randn(Shape{L, D}, rng);
        K = Tensor<T>::randn(Shape{S, D}, rng);
        V = Tensor<T>::randn(Shape{S, Dv}, rng);
        dO = Tensor<T>::randn(Shape{L, Dv}, rng);
        if (masks & kBool) {
            mask = Tensor<bool>(Shape{L, S0});
            for (Index i = 0; i < L; ++i)
                for (Index j = 0; j < S0; ++j) mask(i, j) = uniform01(rng) < 0.3;
            for (Index j = 0; j < S0; ++j) mask(L / 2, j) = true;  // a row that sees no key
            sm.mask = mask.data();
            sm.mask_ld = S0;
        }
        if (masks & kBias) {
            bias = Tensor<T>::randn(Shape{L, S0}, rng);
            for (Index i = 0; i < L; ++i)
                for (Index j = 0; j < S0; ++j)
                    if (uniform01(rng) < 0.1) bias(i, j) = -std::numeric_limits<T>::infinity();
            sm.bias = bias.data();
            sm.bias_ld = S0;
        }
        if (masks & kPadding) {  // the last third of the keys are padding
            padding = Tensor<bool>(Shape{S0});
            for (Index j = S0 - S0 / 3; j < S0; ++j) padding(j) = true;
            sm.key_padding = padding.data();
        }
        sm.causal = (masks & kCausal) != 0;
        if (masks & kBottomRight)
            sm.causal_offset = ops::causal_offset(CausalAlignment::bottom_right, L, S0);
        sm.masked_keys = S0;
    }
};

/// The log-sum-exp of row i's visible scores in double, from the slice's masks written out
/// (not through ScoreMask): log sum_j exp(scale Q_i . K_j + bias_ij) over the keys j that no mask
/// hides, with the appended keys (j >= S0) always visible; +inf for a row that sees no key.
template <class T>
double reference_lse(const Slice<T>& x, int masks, double scale, Index i) {
    const Index offset = (masks & kBottomRight) ? x.S0 - x.L : 0;  // causal: j <= i + offset
    std::vector<double> s;
    for (Index j = 0; j < x.S; ++j) {
        double z = 0.0;
        for (Index d = 0; d < x.D; ++d)
            z += static_cast<double>(x.Q(i, d)) * static_cast<double>(x.K(j, d));
        z *= scale;
        if (j < x.S0) {
            if ((masks & kBool) && x.mask(i, j)) continue;
            if ((masks & kPadding) && x.padding(j)) continue;
            if ((masks & kCausal) && j > i + offset) continue;
            if (masks & kBias) z += static_cast<double>(x.bias(i, j));
            if (z == -std::numeric_limits<double>::infinity()) continue;
        }
        s.push_back(z);
    }
    if (s.empty()) return std::numeric_limits<double>::infinity();
    const double m = *std::max_element(s.begin(), s.end());
    double sum = 0.0;
    for (double z : s) sum += std::exp(z - m);
    return m + std::log(sum);
}

template <class T>
struct Materialised {
    Tensor<T> P, A, O, dQ, dK, dV;
};

template <class T>
Materialised<T> run_materialised(const Slice<T>& x, T scale, const ops::Dropout& dropout) {
    Materialised<T> m{Tensor<T>(Shape{x.L, x.S}),  Tensor<T>(Shape{x.L, x.S}),
                      Tensor<T>(Shape{x.L, x.Dv}), Tensor<T>(Shape{x.L, x.D}),
                      Tensor<T>(Shape{x.S, x.D}),  Tensor<T>(Shape{x.S, x.Dv})};
    ops::attention_forward<T>(x.Q.matrix(), x.K.matrix(), x.V.matrix(), x.sm, scale, dropout, 5,
                              m.P.matrix(), m.A.matrix(), m.O.matrix());
    Tensor<T> scratch(Shape{x.L, x.S});
    ops::attention_backward<T>(x.Q.matrix(), x.K.matrix(), x.V.matrix(), m.P.matrix(), scale,
                               dropout, 5, x.dO.matrix(), scratch.matrix(), m.dQ.matrix(),
                               m.dK.matrix(), m.dV.matrix());
    return m;
}

/// The [L] log-sum-exp buffer as the column vector the kernels take.
template <class T>
Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>> column(Tensor<T>& t) {
    return Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>>(t.data(), t.numel());
}

template <class T>
struct Blocked {
    Tensor<T> LSE, O, dQ, dK, dV;
};

template <class T>
Blocked<T> run_blocked(const Slice<T>& x, T scale, const ops::Dropout& dropout,
                       const ops::AttentionTiles& tiles,
                       SimdLevel level = detail::cpu_simd_level()) {
    Blocked<T> b{Tensor<T>(Shape{x.L}), Tensor<T>(Shape{x.L, x.Dv}), Tensor<T>(Shape{x.L, x.D}),
                 Tensor<T>(Shape{x.S, x.D}), Tensor<T>(Shape{x.S, x.Dv})};
    std::vector<T> scratch(static_cast<std::size_t>(
        ops::blocked_attention_backward_scratch(tiles, x.L, x.S, x.D, x.Dv) +
        ops::blocked_attention_forward_scratch(tiles, x.S, x.D, x.Dv)));
    detail::blocked_attention_forward<T>(x.Q.matrix(), x.K.matrix(), x.V.matrix(), x.sm, scale,
                                         dropout, 5, tiles, scratch.data(), column(b.LSE),
                                         b.O.matrix(), level);
    detail::blocked_attention_backward<T>(x.Q.matrix(), x.K.matrix(), x.V.matrix(), b.O.matrix(),
                                          column(b.LSE), x.sm, scale, dropout, 5, tiles,
                                          x.dO.matrix(), scratch.data(), b.dQ.matrix(),
                                          b.dK.matrix(), b.dV.matrix(), level);
    return b;
}

}  // namespace

TEMPLATE_TEST_CASE("blocked attention equals the materialised kernels, forward and backward",
                   "[ops][blocked]", float, double) {
    using T = TestType;
    // (L, S, D, Dv, Br, Bc, masks, dropout p): tiles dividing and not dividing L and S, L or S
    // smaller than a tile, S = 1, L = 1, every mask kind alone and together, appended keys.
    const auto row = GENERATE(table<Index, Index, Index, Index, Index, Index, int, double>({
        {16, 16, 8, 8, 4, 4, 0, 0.0},
        {17, 23, 8, 8, 4, 8, 0, 0.0},   // neither divides
        {5, 7, 4, 4, 64, 128, 0, 0.0},  // smaller than one tile
        {9, 1, 4, 3, 4, 4, 0, 0.0},     // S = 1
        {1, 13, 4, 4, 4, 5, 0, 0.0},    // L = 1
        {13, 11, 6, 5, 4, 3, kBool, 0.0},
        {13, 11, 6, 5, 4, 3, kBias, 0.0},
        {13, 19, 6, 5, 4, 3, kPadding, 0.0},
        {21, 21, 6, 5, 4, 3, kCausal, 0.0},
        {19, 13, 6, 5, 5, 4, kCausal, 0.0},  // L > S
        {9, 22, 6, 5, 4, 3, kCausal | kBottomRight, 0.0},
        {22, 9, 6, 5, 4, 3, kCausal | kBottomRight | kAppended, 0.2},  // rows that see nothing
        {13, 11, 6, 5, 4, 3, kBool | kBias | kPadding | kCausal, 0.0},
        {13, 12, 6, 5, 4, 3, kBool | kPadding | kCausal | kAppended, 0.0},
        {13, 12, 6, 5, 4, 5, kBias | kAppended, 0.0},
        {17, 23, 8, 8, 4, 8, 0, 0.3},
        {13, 12, 6, 5, 4, 3, kBool | kBias | kPadding | kCausal | kAppended, 0.4},
        {40, 70, 16, 16, 16, 32, kCausal, 0.1},
        // The packed panels' edges (16 float or 8 double columns, 6 rows a register tile): head
        // dims and tiles one past and one short of them, and exact multiples.
        {29, 37, 17, 9, 7, 17, 0, 0.0},
        {29, 37, 17, 9, 7, 17, kCausal, 0.0},
        {31, 45, 15, 17, 13, 15, kCausal | kBottomRight, 0.0},
        {36, 48, 16, 8, 6, 16, kCausal, 0.0},
        {24, 33, 33, 7, 12, 32, kCausal | kPadding | kAppended, 0.2},
        // Tiles across the causal diagonal that span several register tiles each way: the
        // products leave out the register tiles past the diagonal (rows cut at the last row's
        // reach, sums from the first row's first key), on both alignments and with dropout.
        {64, 64, 16, 16, 32, 48, kCausal, 0.0},
        {70, 90, 16, 12, 24, 40, kCausal | kBottomRight, 0.0},
        {90, 70, 16, 12, 30, 36, kCausal | kBottomRight, 0.0},  // rows that see nothing
        {50, 50, 8, 8, 18, 34, kCausal, 0.2},
        {50, 52, 8, 8, 18, 34, kCausal | kBias | kAppended, 0.0},
    }));
    const Index L = std::get<0>(row), S = std::get<1>(row), D = std::get<2>(row),
                Dv = std::get<3>(row);
    const ops::AttentionTiles tiles{std::get<4>(row), std::get<5>(row)};
    const int masks = std::get<6>(row);
    const ops::Dropout dropout{std::get<7>(row), 99};
    CAPTURE(L, S, D, Dv, tiles.rows, tiles.cols, masks, dropout.p);

    const Slice<T> x(L, S, D, Dv, masks, 11);
    const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(D)));
    const Materialised<T> m = run_materialised(x, scale, dropout);
    for (const SimdLevel level : levels_here()) {
        INFO("level " << detail::to_string(level));
        const Blocked<T> b = run_blocked(x, scale, dropout, tiles, level);
        HEADWISE_CHECK_CLOSE(b.O, m.O, Tol<T>::rel);
        HEADWISE_CHECK_CLOSE(b.dQ, m.dQ, Tol<T>::rel);
        HEADWISE_CHECK_CLOSE(b.dK, m.dK, Tol<T>::rel);
        HEADWISE_CHECK_CLOSE(b.dV, m.dV, Tol<T>::rel);
        // LSE is the log of the softmax denominator, P[i, j] = exp(S[i, j] - LSE[i]), on every
        // row: +inf exactly where no key is visible, else within T's rounding of the scores.
        for (Index i = 0; i < L; ++i) {
            const double expected = reference_lse(x, masks, static_cast<double>(scale), i);
            CAPTURE(i, b.LSE(i), expected);
            if (expected == std::numeric_limits<double>::infinity()) {
                CHECK(b.LSE(i) == std::numeric_limits<T>::infinity());
            } else {
                CHECK(std::abs(static_cast<double>(b.LSE(i)) - expected) <=
                      test::dot_tolerance<T>(D) * std::max(1.0, std::abs(expected)));
            }
        }
    }
}

TEMPLATE_TEST_CASE("blocked attention drops exactly the entries the materialised kernel drops",
                   "[ops][blocked][dropout]", float, double) {
    using T = TestType;
    // V = identity columns make O's row i the dropped, normalised row i of P: O = A.
    const Index L = 11, S = 9;
    Slice<T> x(L, S, 4, S, kCausal, 3);
    x.V = Tensor<T>(Shape{S, S});
    for (Index j = 0; j < S; ++j) x.V(j, j) = T(1);
    const ops::Dropout dropout{0.5, 2024};
    const T scale = T(0.5);
    const Materialised<T> m = run_materialised(x, scale, dropout);
    for (const SimdLevel level : levels_here()) {
        INFO("level " << detail::to_string(level));
        const Blocked<T> b = run_blocked(x, scale, dropout, ops::AttentionTiles{4, 2}, level);
        Index dropped = 0;
        for (Index i = 0; i < L; ++i)
            for (Index j = 0; j <= i && j < S; ++j) {
                CAPTURE(i, j);
                CHECK((m.A(i, j) == T(0)) == (b.O(i, j) == T(0)));
                dropped += m.A(i, j) == T(0);
            }
        CHECK(dropped > 10);  // about half of the 65 visible entries
        HEADWISE_CHECK_CLOSE(b.O, m.A, Tol<T>::rel);
    }
}

TEMPLATE_TEST_CASE("blocked weights recomputed from the log-sum-exp equal the materialised ones",
                   "[ops][blocked]", float, double) {
    using T = TestType;
    const auto row = GENERATE(table<int, double>({{0, 0.0},
                                                  {kBool | kBias | kPadding | kCausal, 0.0},
                                                  {kCausal | kAppended, 0.3},
                                                  {kCausal | kBottomRight, 0.0}}));
    const int masks = std::get<0>(row);
    const ops::Dropout dropout{std::get<1>(row), 5};
    CAPTURE(masks, dropout.p);
    const Slice<T> x(13, 11, 4, 4, masks, 6);
    const ops::AttentionTiles tiles{4, 3};
    const Materialised<T> m = run_materialised(x, T(0.6), dropout);
    Blocked<T> b = run_blocked(x, T(0.6), dropout, tiles);
    std::vector<T> scratch(static_cast<std::size_t>(ops::blocked_attention_weights_scratch(tiles)));
    const Tensor<T>& A = dropout.active() ? m.A : m.P;  // the materialised weights after dropout
    Tensor<T> W(Shape{x.L, x.S});
    ops::blocked_attention_weights<T>(x.Q.matrix(), x.K.matrix(), x.sm, T(0.6), dropout, 5,
                                      column(b.LSE), tiles, scratch.data(), T(1), W.matrix());
    HEADWISE_CHECK_CLOSE(W, A, Tol<T>::rel);
    // alpha scales what is added: W + 0.5 A = 1.5 A.
    ops::blocked_attention_weights<T>(x.Q.matrix(), x.K.matrix(), x.sm, T(0.6), dropout, 5,
                                      column(b.LSE), tiles, scratch.data(), T(0.5), W.matrix());
    for (T& v : W) v /= T(1.5);
    HEADWISE_CHECK_CLOSE(W, A, Tol<T>::rel);
}

TEMPLATE_TEST_CASE("a row that sees no key gets zero output and zero gradients, never NaN",
                   "[ops][blocked]", float, double) {
    using T = TestType;
    const Index L = 6, S = 5;
    Slice<T> x(L, S, 3, 3, kBool, 8);
    for (Index j = 0; j < S; ++j) x.mask(1, j) = true;  // rows 1 and L / 2 = 3 see nothing
    for (const SimdLevel level : levels_here()) {
        INFO("level " << detail::to_string(level));
        const Blocked<T> b =
            run_blocked(x, T(0.7), ops::Dropout{0.2, 1}, ops::AttentionTiles{2, 2}, level);
        for (Index i : {Index{1}, Index{3}}) {
            CHECK(b.LSE(i) == std::numeric_limits<T>::infinity());
            for (Index e = 0; e < 3; ++e) {
                CHECK(b.O(i, e) == T(0));
                CHECK(b.dQ(i, e) == T(0));
            }
        }
        for (const Tensor<T>* t : {&b.O, &b.dQ, &b.dK, &b.dV})
            for (T v : *t) CHECK(std::isfinite(v));
    }
}

TEMPLATE_TEST_CASE("a NaN or +inf score makes its row's output NaN and leaves the other rows alone",
                   "[ops][blocked]", float, double) {
    using T = TestType;
    const Index L = 6, S = 7;
    Slice<T> x(L, S, 3, 3, kBias, 4);
    for (Index i = 0; i < L; ++i)
        for (Index j = 0; j < S; ++j)
            if (std::isinf(x.bias(i, j))) x.bias(i, j) = T(0);
    x.bias(2, 5) = std::numeric_limits<T>::quiet_NaN();
    x.bias(4, 0) = std::numeric_limits<T>::infinity();  // exp(s - max) = exp(inf - inf)
    for (const SimdLevel level : levels_here()) {
        INFO("level " << detail::to_string(level));
        const Blocked<T> b =
            run_blocked(x, T(0.7), ops::Dropout{}, ops::AttentionTiles{2, 3}, level);
        for (Index i = 0; i < L; ++i)
            for (Index e = 0; e < 3; ++e) {
                CAPTURE(i, e);
                CHECK(std::isnan(b.O(i, e)) == (i == 2 || i == 4));
                if (i != 2 && i != 4) CHECK(std::isfinite(b.dQ(i, e)));
            }
    }
}

TEMPLATE_TEST_CASE("NaN reaches the same outputs and gradients as in the materialised kernel",
                   "[ops][blocked]", float, double) {
    // A NaN behind a mask is not hidden by it (NaN in, NaN out), so a tile that the mask hides
    // may not be skipped when it holds one: the pattern of NaN must be the materialised one.
    using T = TestType;
    const int where = GENERATE(0, 1, 2, 3);  // V of a padded key, K of a padded key, a causally
                                             // hidden bias entry, dO
    CAPTURE(where);
    Slice<T> x(9, 12, 3, 3, kPadding | kCausal | kBias, 12);
    for (Index i = 0; i < x.L; ++i)
        for (Index j = 0; j < x.S0; ++j)
            if (std::isinf(x.bias(i, j))) x.bias(i, j) = T(0);
    const T nan = std::numeric_limits<T>::quiet_NaN();
    if (where == 0) x.V(11, 1) = nan;  // keys 8 to 11 are padding: a skippable block
    if (where == 1) x.K(10, 0) = nan;
    if (where == 2) x.bias(1, 9) = nan;  // hidden from row 1 by the causal rule and padding
    if (where == 3) x.dO(0, 2) = nan;
    const ops::AttentionTiles tiles{4, 4};
    const Materialised<T> m = run_materialised(x, T(0.5), ops::Dropout{});
    const auto same_nan = [](const Tensor<T>& a, const Tensor<T>& e) {
        for (Index i = 0; i < a.numel(); ++i)
            if (std::isnan(a.data()[i]) != std::isnan(e.data()[i])) return false;
        return true;
    };
    for (const SimdLevel level : levels_here()) {
        INFO("level " << detail::to_string(level));
        const Blocked<T> b = run_blocked(x, T(0.5), ops::Dropout{}, tiles, level);
        CHECK(same_nan(b.O, m.O));
        CHECK(same_nan(b.dQ, m.dQ));
        CHECK(same_nan(b.dK, m.dK));
        CHECK(same_nan(b.dV, m.dV));
        bool any = false;
        for (const Tensor<T>* t : {&b.O, &b.dQ, &b.dK, &b.dV})
            for (T v : *t) any = any || std::isnan(v);
        CHECK(any);  // the NaN got somewhere
    }
}

TEST_CASE("tiles that a mask hides completely are found, appended keys never", "[ops][blocked]") {
    ops::ScoreMask<float> causal;
    causal.causal = true;
    CHECK(ops::tile_hidden(causal, 16, 0, 4, 4, 4));        // rows 0-3, keys 4-7: above diagonal
    CHECK_FALSE(ops::tile_hidden(causal, 16, 0, 4, 3, 4));  // key 3 is seen by row 3
    CHECK_FALSE(ops::tile_hidden(causal, 16, 4, 4, 0, 4));  // below the diagonal
    causal.masked_keys = 6;                                 // keys 6, 7 appended
    CHECK_FALSE(ops::tile_hidden(causal, 8, 0, 2, 4, 4));
    CHECK(ops::tile_hidden(causal, 8, 0, 2, 4, 2));
    causal.masked_keys = -1;
    causal.causal_offset = 4;                              // bottom-right, L = 4, S = 8
    CHECK_FALSE(ops::tile_hidden(causal, 8, 0, 2, 4, 2));  // row 1 sees key 5
    CHECK(ops::tile_hidden(causal, 8, 0, 2, 6, 2));

    bool padding[8] = {false, false, false, false, true, true, true, true};
    ops::ScoreMask<float> padded;
    padded.key_padding = padding;
    CHECK(ops::tile_hidden(padded, 8, 0, 4, 4, 4));
    CHECK_FALSE(ops::tile_hidden(padded, 8, 0, 4, 3, 4));

    bool mask[2 * 4] = {true, true, false, true, true, true, true, true};
    ops::ScoreMask<float> boolean;
    boolean.mask = mask;
    boolean.mask_ld = 4;
    CHECK(ops::tile_hidden(boolean, 4, 0, 2, 0, 2));
    CHECK_FALSE(ops::tile_hidden(boolean, 4, 0, 2, 2, 2));
    CHECK_FALSE(ops::tile_hidden(ops::ScoreMask<float>{}, 4, 0, 2, 0, 2));
}

TEST_CASE("blocked backward matches finite differences, masks and dropout included",
          "[ops][blocked][gradcheck]") {
    const auto row = GENERATE(table<Index, Index, Index, int, double>({
        {5, 7, 3, 0, 0.0},
        {7, 5, 2, kBool | kBias | kPadding | kCausal, 0.0},
        {6, 7, 3, kCausal | kAppended, 0.3},
        {5, 6, 2, kBool | kPadding, 0.5},
    }));
    const Index L = std::get<0>(row), S = std::get<1>(row), D = std::get<2>(row);
    const int masks = std::get<3>(row);
    const ops::Dropout dropout{std::get<4>(row), 77};
    CAPTURE(L, S, D, masks, dropout.p);
    const ops::AttentionTiles tiles{2, 3};
    const auto x = std::make_shared<Slice<double>>(L, S, D, D, masks, 21);
    const double scale = 0.8;
    for (const SimdLevel level : levels_here()) {
        INFO("level " << detail::to_string(level));
        const auto f = [=](const std::vector<Tensor<double>>& in) {
            Slice<double> y = *x;
            y.Q = in[0];
            y.K = in[1];
            y.V = in[2];
            return run_blocked(y, scale, dropout, tiles, level).O;
        };
        const auto back = [=](const std::vector<Tensor<double>>& in, const Tensor<double>& dO) {
            Slice<double> y = *x;
            y.Q = in[0];
            y.K = in[1];
            y.V = in[2];
            y.dO = dO;
            const Blocked<double> b = run_blocked(y, scale, dropout, tiles, level);
            return std::vector<Tensor<double>>{b.dQ, b.dK, b.dV};
        };
        std::mt19937_64 rng(5);
        const GradcheckResult r = gradcheck(f, back, {x->Q, x->K, x->V}, rng);
        INFO(r.where);
        CHECK(r.checked == (L + 2 * S) * D);
        CHECK(r.max_rel_error <= 1e-6);
    }
}

TEST_CASE("blocked gradients accumulate into dQ, dK, dV", "[ops][blocked]") {
    const Slice<double> x(5, 6, 3, 3, kCausal, 2);
    const ops::AttentionTiles tiles{2, 4};
    Blocked<double> b = run_blocked(x, 0.5, ops::Dropout{}, tiles);
    Tensor<double> dQ = b.dQ, dK = b.dK, dV = b.dV;
    std::vector<double> scratch(static_cast<std::size_t>(
        ops::blocked_attention_backward_scratch(tiles, x.L, x.S, x.D, x.Dv)));
    ops::blocked_attention_backward<double>(x.Q.matrix(), x.K.matrix(), x.V.matrix(), b.O.matrix(),
                                            column(b.LSE), x.sm, 0.5, ops::Dropout{}, 5, tiles,
                                            x.dO.matrix(), scratch.data(), dQ.matrix(), dK.matrix(),
                                            dV.matrix());
    // Tile by tile, so equal to twice one call up to the rounding of the additions.
    for (Tensor<double>* t : {&b.dQ, &b.dK, &b.dV})
        for (double& v : *t) v *= 2;
    HEADWISE_CHECK_CLOSE(dQ, b.dQ, 1e-15);
    HEADWISE_CHECK_CLOSE(dK, b.dK, 1e-15);
    HEADWISE_CHECK_CLOSE(dV, b.dV, 1e-15);
}

TEST_CASE("the blocked kernels check every shape and the tiles in every build", "[ops][blocked]") {
    const Index L = 5, S = 6, D = 3;
    std::mt19937_64 rng(9);
    const auto Q = Tensor<double>::randn(Shape{L, D}, rng);
    const auto K = Tensor<double>::randn(Shape{S, D}, rng);
    const auto V = Tensor<double>::randn(Shape{S, D}, rng);
    const auto V_short = Tensor<double>::randn(Shape{S - 1, D}, rng);
    const ops::AttentionTiles tiles{2, 4};
    std::vector<double> scratch(
        static_cast<std::size_t>(ops::blocked_attention_forward_scratch(tiles, S, D, D)));
    Eigen::VectorXd LSE(L), LSE_short(L - 1);
    Tensor<double> O(Shape{L, D});
    const auto forward = [&](const Tensor<double>& v, Eigen::VectorXd& lse,
                             const ops::AttentionTiles& t) {
        ops::blocked_attention_forward<double>(Q.matrix(), K.matrix(), v.matrix(), {}, 1.0, {}, 0,
                                               t, scratch.data(), lse, O.matrix());
    };
    const std::string fn = "headwise::ops::blocked_attention_forward: ";
    CHECK_THROWS_MATCHES(forward(V_short, LSE, tiles), shape_error,
                         Message(fn + "V: expected shape [6, 3], got [5, 3]"));
    CHECK_THROWS_MATCHES(forward(V, LSE_short, tiles), shape_error,
                         Message(fn + "LSE: expected shape [5, 1], got [4, 1]"));
    CHECK_THROWS_MATCHES(forward(V, LSE, ops::AttentionTiles{0, 4}), std::invalid_argument,
                         Message(fn + "tiles: rows and cols must be positive, got 0 x 4"));
    CHECK(test::identical(O, Tensor<double>(Shape{L, D})));  // nothing written
    CHECK_NOTHROW(forward(V, LSE, tiles));
}

TEST_CASE("the blocked kernels' exp for non-positive exponents equals exp within 2 ulp",
          "[ops][blocked]") {
    // x - shift from 0 down past log(smallest normal float), a little above 0 (a log-sum-exp
    // rounded below a score), both ends of the flush to 0, -inf and NaN; 37 entries, so that the
    // last 5 go through the masked tail.
    std::vector<float> x;
    for (int i = 0; i <= 30; ++i) x.push_back(-0.0025f * static_cast<float>(i * i * i));
    x.insert(x.end(), {1e-6f, -87.33f, -87.34f, -1e30f, -std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::quiet_NaN()});
    const float shift = 0.375f;  // the shifted values, x - shift, are what exp is taken of
    for (float& v : x) v += shift;
    std::vector<float> y(x.size(), 7.0f);
    const float sum =
        detail::exp_nonpositive_sum(x.data(), shift, y.data(), static_cast<Index>(x.size()));
    CHECK(std::isnan(sum));  // the NaN entry
    double finite_sum = 0;
    for (std::size_t j = 0; j < x.size(); ++j) {
        const double z = static_cast<double>(x[j] - shift);
        CAPTURE(j, z, y[j]);
        if (std::isnan(z)) {
            CHECK(std::isnan(y[j]));
        } else if (z < std::log(static_cast<double>(std::numeric_limits<float>::min()))) {
            CHECK(y[j] == 0.0f);  // exactly 0, -inf included
        } else {
            const double expected = std::exp(z);
            CHECK(std::abs(static_cast<double>(y[j]) - expected) <= 2 * 0x1p-24 * expected);
            finite_sum += static_cast<double>(y[j]);
        }
    }
    std::vector<float> y2(x.size() - 1);  // without the NaN: the sum of what was written
    const float sum2 =
        detail::exp_nonpositive_sum(x.data(), shift, y2.data(), static_cast<Index>(y2.size()));
    CHECK(std::abs(static_cast<double>(sum2) - finite_sum) <= 1e-6 * finite_sum);
}

}  // namespace test_ops_blocked_attention
