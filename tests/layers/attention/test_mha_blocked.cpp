// SPDX-License-Identifier: MIT
// MultiheadAttention's choice of attention kernel, and the blocked kernel inside the module on
// sequences longer than one tile, with masks the caller no longer holds at backward.
#include <headwise/headwise.hpp>

#include <random>  // std::mt19937_64

#include "support/catch.hpp"
#include "support/instantiations.hpp"
#include "support/match.hpp"
#include "support/tolerance.hpp"

namespace test_mha_blocked {

using namespace headwise;
using headwise::test::Tol;

namespace {

MultiheadAttentionOptions small_options(AttentionKernel kernel) {
    MultiheadAttentionOptions o;
    o.embed_dim = 16;
    o.num_heads = 2;
    o.attention_kernel = kernel;
    return o;
}

}  // namespace

TEST_CASE("the automatic choice: blocked beyond 512 * 512 scores without weights",
          "[mha][blocked]") {
    const MultiheadAttention<float> automatic(small_options(AttentionKernel::automatic));
    CHECK(automatic.kernel_for(128, 128, false) == AttentionKernel::materialised);
    CHECK(automatic.kernel_for(512, 512, false) == AttentionKernel::materialised);
    CHECK(automatic.kernel_for(512, 513, false) == AttentionKernel::blocked);
    CHECK(automatic.kernel_for(1024, 1024, false) == AttentionKernel::blocked);
    CHECK(automatic.kernel_for(4096, 4096, false) == AttentionKernel::blocked);
    CHECK(automatic.kernel_for(1, 1 << 20, false) == AttentionKernel::blocked);
    CHECK(automatic.kernel_for(4096, 4096, true) == AttentionKernel::materialised);
    MultiheadAttentionOptions o = small_options(AttentionKernel::automatic);
    o.add_bias_kv = true;  // S' = S + 1 counts
    CHECK(MultiheadAttention<float>(o).kernel_for(512, 511, false) ==
          AttentionKernel::materialised);
    CHECK(MultiheadAttention<float>(o).kernel_for(512, 512, false) == AttentionKernel::blocked);
    for (AttentionKernel forced : {AttentionKernel::blocked, AttentionKernel::materialised}) {
        const MultiheadAttention<float> m(small_options(forced));
        CHECK(m.kernel_for(8, 8, false) == forced);
        CHECK(m.kernel_for(4096, 4096, true) == forced);
    }
    CHECK(std::string(to_string(AttentionKernel::blocked)) == "blocked");
}

TEST_CASE(
    "blocked equals materialised in the module over many tiles, masks dropped before backward",
    "[mha][blocked]") {
    // 300 queries over 300 keys: three query tiles and two key tiles of 128 x 256, neither
    // dividing; causal (upper tiles skipped), key padding (a padded block), dropout, bias_kv.
    const Index B = 2, L = 300, E = 16;
    const bool need_weights = GENERATE(false, true);
    CAPTURE(need_weights);
    std::mt19937_64 rng(3);
    const auto x = Tensor<double>::randn(Shape{B, L, E}, rng);
    const auto dy = Tensor<double>::randn(Shape{B, L, E}, rng);
    const auto bias = Tensor<double>::randn(Shape{L, L}, rng);
    AttentionForward<double> f[2];
    MultiheadAttentionOptions options[2] = {small_options(AttentionKernel::blocked),
                                            small_options(AttentionKernel::materialised)};
    std::vector<MultiheadAttention<double>> modules;
    for (MultiheadAttentionOptions& o : options) {
        o.dropout = 0.2;
        o.add_bias_kv = true;
        modules.emplace_back(o, 17);
    }
    for (int i = 0; i < 2; ++i) {
        // The masks live only for the forward: backward must not need the caller's copy.
        AttentionMasks<double> masks;
        masks.is_causal = true;
        masks.key_padding_mask = Tensor<bool>(Shape{B, L});
        for (Index j = 40; j < L; ++j) masks.key_padding_mask(1, j) = true;  // batch 1: 40 keys
        masks.attn_bias = bias;
        masks.need_weights = need_weights;
        f[i] = modules[static_cast<std::size_t>(i)].forward(x, x, x, masks);
    }
    HEADWISE_CHECK_CLOSE(f[0].output, f[1].output, Tol<double>::rel);
    if (need_weights) {
        CHECK(f[0].attn_weights.shape() == Shape{B, L, L + 1});  // averaged: [B, L, S']
        HEADWISE_CHECK_CLOSE(f[0].attn_weights, f[1].attn_weights, Tol<double>::rel);
    }
    const AttentionGradients<double> g0 = modules[0].backward(f[0], dy);
    const AttentionGradients<double> g1 = modules[1].backward(f[1], dy);
    HEADWISE_CHECK_CLOSE(g0.query, g1.query, Tol<double>::rel);
    HEADWISE_CHECK_CLOSE(g0.key, g1.key, Tol<double>::rel);
    HEADWISE_CHECK_CLOSE(g0.value, g1.value, Tol<double>::rel);
    const auto grads1 = modules[1].grad_dict();
    for (const auto& [name, grad] : modules[0].grad_dict()) {
        CAPTURE(name);
        HEADWISE_CHECK_CLOSE(grad, grads1.at(name), Tol<double>::rel);
    }
}

TEST_CASE("per-head weights on the blocked kernel equal the materialised ones", "[mha][blocked]") {
    std::mt19937_64 rng(8);
    const auto q = Tensor<float>::randn(Shape{2, 9, 16}, rng);
    const auto kv = Tensor<float>::randn(Shape{2, 11, 16}, rng);
    AttentionMasks<float> masks;
    masks.need_weights = true;
    masks.average_attn_weights = false;
    masks.attn_mask = Tensor<bool>(Shape{9, 11});
    for (Index j = 0; j < 11; ++j) masks.attn_mask(4, j) = true;  // a row that sees nothing
    MultiheadAttention<float> blocked(small_options(AttentionKernel::blocked), 2);
    MultiheadAttention<float> materialised(small_options(AttentionKernel::materialised), 2);
    blocked.eval();
    materialised.eval();
    const auto fb = blocked.forward(q, kv, kv, masks);
    const auto fm = materialised.forward(q, kv, kv, masks);
    CHECK(fb.attn_weights.shape() == Shape{2, 2, 9, 11});
    HEADWISE_CHECK_CLOSE(fb.attn_weights, fm.attn_weights, Tol<float>::rel);
    HEADWISE_CHECK_CLOSE(fb.output, fm.output, Tol<float>::rel);
    for (Index j = 0; j < 11; ++j) CHECK(fb.attn_weights(1, 0, 4, j) == 0.0f);
}

TEST_CASE("blocked equals materialised at input magnitude 1e30, causal", "[mha][blocked]") {
    // Scores ~1e60 apart: every row's softmax is exactly one-hot, so the gradient through the
    // softmax is exactly zero (the materialised kernel's Σ_k P_ik dP_ik is dP_ij itself). The
    // blocked kernel must not leave a rounding difference of two ~1e30 dot products there: times
    // |K| ~ 1e30 it used to reach dQ as ~1e44 and dWq as ~1e74.
    const Index B = 1, L = 6, E = 8;
    const double dropout = GENERATE(0.0, 0.3);
    CAPTURE(dropout);
    std::mt19937_64 rng(20);
    auto x = Tensor<double>::randn(Shape{B, L, E}, rng);
    for (double& v : x) v *= 1e30;
    const auto dy = Tensor<double>::randn(Shape{B, L, E}, rng);
    AttentionMasks<double> masks;
    masks.is_causal = true;
    MultiheadAttentionOptions o = small_options(AttentionKernel::materialised);
    o.embed_dim = E;
    o.dropout = dropout;
    MultiheadAttention<double> materialised(o, 5);
    o.attention_kernel = AttentionKernel::blocked;
    MultiheadAttention<double> blocked(o, 5);
    const auto fm = materialised.forward(x, x, x, masks);
    const auto fb = blocked.forward(x, x, x, masks);
    HEADWISE_CHECK_CLOSE(fb.output, fm.output, Tol<double>::rel);
    const auto gm = materialised.backward(fm, dy);
    const auto gb = blocked.backward(fb, dy);
    HEADWISE_CHECK_CLOSE(gb.query, gm.query, Tol<double>::rel);
    HEADWISE_CHECK_CLOSE(gb.key, gm.key, Tol<double>::rel);
    HEADWISE_CHECK_CLOSE(gb.value, gm.value, Tol<double>::rel);
    const auto grads_m = materialised.grad_dict();
    for (const auto& [name, grad] : blocked.grad_dict()) {
        CAPTURE(name);
        HEADWISE_CHECK_CLOSE(grad, grads_m.at(name), Tol<double>::rel);
    }
}

TEST_CASE("attention_tiles: checked, and any tiles give the default tiles' results",
          "[mha][blocked]") {
    MultiheadAttentionOptions o = small_options(AttentionKernel::blocked);
    o.attention_tiles = {0, 4};
    REQUIRE_THROWS_AS(MultiheadAttention<float>(o), std::invalid_argument);
    REQUIRE_THROWS_WITH(MultiheadAttention<float>(o),
                        "headwise::MultiheadAttention::MultiheadAttention: "
                        "options.attention_tiles: rows and cols must be positive, got 0 x 4");
    o.attention_tiles = {3, -1};
    REQUIRE_THROWS_WITH(MultiheadAttention<float>(o),
                        "headwise::MultiheadAttention::MultiheadAttention: "
                        "options.attention_tiles: rows and cols must be positive, got 3 x -1");

    // 7 queries over 9 keys, causal, dropout: tiles of 1 x 1 and 2 x 3 cross every row and key;
    // tiles far larger than the call cover it whole. A backward runs with its forward's tiles,
    // so a module of other tiles differentiates it (tiles are not compared).
    const Index B = 2, L = 7, S = 9, E = 16;
    std::mt19937_64 rng(4);
    const auto q = Tensor<double>::randn(Shape{B, L, E}, rng);
    const auto kv = Tensor<double>::randn(Shape{B, S, E}, rng);
    const auto dy = Tensor<double>::randn(Shape{B, L, E}, rng);
    AttentionMasks<double> masks;
    masks.is_causal = true;
    o.dropout = 0.25;
    o.attention_tiles = {};
    MultiheadAttention<double> reference(o, 9);
    const auto f0 = reference.forward(q, kv, kv, masks);
    const auto g0 = reference.backward(f0, dy);
    const Index huge = Index(1) << 40;
    for (const ops::AttentionTiles tiles :
         {ops::AttentionTiles{1, 1}, ops::AttentionTiles{2, 3}, ops::AttentionTiles{huge, huge}}) {
        CAPTURE(tiles.rows, tiles.cols);
        o.attention_tiles = tiles;
        MultiheadAttention<double> m(o, 9);
        const auto f = m.forward(q, kv, kv, masks);
        HEADWISE_CHECK_CLOSE(f.output, f0.output, Tol<double>::rel);
        MultiheadAttentionOptions default_tiles = o;
        default_tiles.attention_tiles = {};
        MultiheadAttention<double> other(default_tiles, 9);
        const auto g = other.backward(f, dy);
        HEADWISE_CHECK_CLOSE(g.query, g0.query, Tol<double>::rel);
        HEADWISE_CHECK_CLOSE(g.key, g0.key, Tol<double>::rel);
        HEADWISE_CHECK_CLOSE(g.value, g0.value, Tol<double>::rel);
        const auto grads0 = reference.grad_dict();
        for (const auto& [name, grad] : other.grad_dict()) {
            CAPTURE(name);
            HEADWISE_CHECK_CLOSE(grad, grads0.at(name), Tol<double>::rel);
        }
    }
}

}  // namespace test_mha_blocked
