// SPDX-License-Identifier: MIT
// Score masks: the causal rule in both alignments, appended keys left visible, and tiles of a
// slice masked exactly as the whole slice.
#include <headwise/ops/score_mask.hpp>
#include <headwise/random.hpp>

#include <algorithm>  // std::min
#include <cmath>      // std::isinf
#include <random>     // std::mt19937_64
#include <utility>    // std::pair

#include "support/catch.hpp"
#include "support/match.hpp"

namespace test_ops_score_mask {

using namespace headwise;

TEST_CASE("the causal rule: top-left j <= i, bottom-right j <= i + S - L", "[ops][score_mask]") {
    const auto [L, S] =
        GENERATE(table<Index, Index>({{1, 1}, {1, 5}, {3, 5}, {5, 5}, {5, 3}, {4, 1}}));
    CAPTURE(L, S);
    for (CausalAlignment a : {CausalAlignment::top_left, CausalAlignment::bottom_right}) {
        CAPTURE(to_string(a));
        ops::ScoreMask<double> m;
        m.causal = true;
        m.causal_offset = ops::causal_offset(a, L, S);
        for (Index i = 0; i < L; ++i) {
            // Count the visible keys of row i straight from the definition.
            Index visible = 0;
            for (Index j = 0; j < S; ++j)
                visible += a == CausalAlignment::top_left ? (j <= i) : (j <= i + S - L);
            CAPTURE(i);
            CHECK(m.causal_end(i, S) == visible);
        }
    }
    // Bottom-right: the last query sees every key; top-left: the first query sees key 0 only.
    ops::ScoreMask<double> m;
    m.causal = true;
    m.causal_offset = ops::causal_offset(CausalAlignment::bottom_right, L, S);
    CHECK(m.causal_end(L - 1, S) == S);
    CHECK(ops::causal_offset(CausalAlignment::top_left, L, S) == 0);
    // Not causal: every covered key is visible.
    ops::ScoreMask<double> none;
    CHECK(none.causal_end(0, S) == S);
}

TEST_CASE("appended keys past masked_keys are never hidden", "[ops][score_mask]") {
    ops::ScoreMask<double> m;
    m.causal = true;
    m.causal_offset = ops::causal_offset(CausalAlignment::bottom_right, 2, 3);  // 1
    m.masked_keys = 3;                                                          // 2 appended keys
    Tensor<double> S(Shape{2, 5});
    ops::apply_score_mask<double>(m, S.matrix());
    // Row 0 sees keys 0, 1 (j <= 0 + 1) and the appended 3, 4; row 1 sees all.
    const bool hidden[2][5] = {{false, false, true, false, false},
                               {false, false, false, false, false}};
    for (Index i = 0; i < 2; ++i)
        for (Index j = 0; j < 5; ++j) {
            CAPTURE(i, j);
            CHECK(std::isinf(S(i, j)) == hidden[i][j]);
        }
}

TEST_CASE("masking tiles of a slice equals masking the whole slice", "[ops][score_mask]") {
    const Index L = 7, S = 9;
    const Index masked_keys = GENERATE(Index(-1), Index(9), Index(6));
    const CausalAlignment a = GENERATE(CausalAlignment::top_left, CausalAlignment::bottom_right);
    CAPTURE(masked_keys, to_string(a));
    const Index covered = masked_keys < 0 ? S : masked_keys;
    std::mt19937_64 rng(5);
    Tensor<bool> mask(Shape{L, S}), padding(Shape{S});
    for (bool& x : mask) x = uniform01(rng) < 0.3;
    for (bool& x : padding) x = uniform01(rng) < 0.2;
    const Tensor<double> bias = Tensor<double>::randn(Shape{L, S}, rng);
    ops::ScoreMask<double> m;
    m.mask = mask.data();
    m.mask_ld = S;
    m.bias = bias.data();
    m.bias_ld = S;
    m.key_padding = padding.data();
    m.causal = true;
    m.causal_offset = ops::causal_offset(a, L, covered);
    m.masked_keys = masked_keys;

    const Tensor<double> scores = Tensor<double>::randn(Shape{L, S}, rng);
    Tensor<double> whole = scores;
    ops::apply_score_mask<double>(m, whole.matrix());
    Tensor<double> tiled = scores;
    for (const auto& [rows, cols] : {std::pair<Index, Index>{3, 4}, {2, 2}, {7, 9}, {1, 5}}) {
        CAPTURE(rows, cols);
        tiled = scores;
        for (Index r0 = 0; r0 < L; r0 += rows)
            for (Index c0 = 0; c0 < S; c0 += cols) {
                const Index h = std::min(rows, L - r0), w = std::min(cols, S - c0);
                ops::apply_score_mask<double>(m, tiled.matrix().block(r0, c0, h, w), r0, c0);
            }
        CHECK(test::identical(tiled, whole));
    }
}

}  // namespace test_ops_score_mask
