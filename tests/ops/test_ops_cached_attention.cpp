// SPDX-License-Identifier: MIT
// The cached-attention kernel: equal to attention_forward over any number of keys (chunk edges
// included) with masks, and free of heap temporaries (built with EIGEN_RUNTIME_NO_MALLOC).
#define EIGEN_RUNTIME_NO_MALLOC
#include <headwise/ops/attention.hpp>
#include <headwise/ops/cached_attention.hpp>
#include <headwise/random.hpp>

#include <random>  // std::mt19937_64

#include "support/catch.hpp"
#include "support/match.hpp"
#include "support/tolerance.hpp"

using namespace headwise;
using headwise::test::Tol;

TEMPLATE_TEST_CASE("cached_attention_forward equals attention_forward", "[ops][cached_attention]",
                   float, double) {
    using T = TestType;
    const auto [R, S, D] = GENERATE(table<Index, Index, Index>(
        {{1, 1, 4}, {1, 127, 8}, {3, 128, 8}, {8, 129, 16}, {2, 300, 64}, {5, 7, 3}}));
    const bool masked = GENERATE(false, true);
    CAPTURE(R, S, D, masked);
    std::mt19937_64 rng(3);
    const auto Q = Tensor<T>::randn(Shape{R, D}, rng);
    const auto K = Tensor<T>::randn(Shape{S, D}, rng);
    const auto V = Tensor<T>::randn(Shape{S, D + 1}, rng);
    Tensor<bool> padding(Shape{S});
    for (Index j = 1; j < S; ++j) padding(j) = uniform01(rng) < 0.3;
    ops::ScoreMask<T> mask;
    if (masked) {
        mask.key_padding = padding.data();
        mask.causal = true;  // the last R of S queries: bottom-right
        mask.causal_offset = ops::causal_offset(CausalAlignment::bottom_right, R, S);
    }
    const T scale = T(0.3);
    Tensor<T> P(Shape{R, S}), O(Shape{R, D + 1}), P_ref(Shape{R, S}), O_ref(Shape{R, D + 1});
    ops::attention_forward<T>(Q.matrix(), K.matrix(), V.matrix(), mask, scale, ops::Dropout{}, 0,
                              P_ref.matrix(), P_ref.matrix(), O_ref.matrix());
    ops::cached_attention_forward<T>(Q.matrix(), K.matrix(), V.matrix(), mask, scale, P.matrix(),
                                     O.matrix());
    HEADWISE_CHECK_CLOSE(P, P_ref, Tol<T>::rel);
    HEADWISE_CHECK_CLOSE(O, O_ref, Tol<T>::rel);
}

TEMPLATE_TEST_CASE("cached_attention_forward allocates nothing, whatever the number of keys",
                   "[ops][cached_attention][alloc]", float, double) {
    using T = TestType;
    const auto [R, S, D] = GENERATE(
        table<Index, Index, Index>({{1, 4096, 64}, {8, 4096, 64}, {4, 2000, 128}, {1, 1000, 128}}));
    CAPTURE(R, S, D);
    std::mt19937_64 rng(4);
    const auto Q = Tensor<T>::randn(Shape{R, D}, rng);
    const auto K = Tensor<T>::randn(Shape{S, D}, rng);
    const auto V = Tensor<T>::randn(Shape{S, D}, rng);
    Tensor<T> P(Shape{R, S}), O(Shape{R, D});
    Eigen::internal::set_is_malloc_allowed(false);  // an Eigen heap temporary would abort here
    ops::cached_attention_forward<T>(Q.matrix(), K.matrix(), V.matrix(), {}, T(0.125), P.matrix(),
                                     O.matrix());
    Eigen::internal::set_is_malloc_allowed(true);
    CHECK(O.numel() == R * D);
}
