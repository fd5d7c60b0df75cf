// SPDX-License-Identifier: MIT
// MultiheadAttention::prune_heads: a pruned module equals the unpruned one with the removed heads'
// head_mask 0 (outputs, input gradients and every remaining parameter gradient, in double, on every
// projection), keeps its state-dict names with smaller shapes, saves and loads, decodes; errors.
#include <headwise/headwise.hpp>

#include <algorithm>  // std::find
#include <cstdio>     // std::remove
#include <random>     // std::mt19937_64
#include <stdexcept>  // std::invalid_argument, std::logic_error
#include <string>     // std::string
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/match.hpp"
#include "support/mha_random.hpp"
#include "support/projections.hpp"

namespace test_mha_prune {

using namespace headwise;
using headwise::test::kProjections;

namespace {

struct PruneCase {
    const char* name;
    Index E, H, Hkv, head_dim, kdim, vdim;
    bool bias_kv, zero_attn, rotary;
    std::vector<Index> heads;  // to remove
};

const PruneCase kCases[] = {
    {"H 4, remove 1 and 3", 8, 4, 0, 0, 0, 0, false, false, false, {3, 1}},
    {"H 4, bias_kv, zero_attn, remove 0 (twice)", 8, 4, 0, 0, 0, 0, true, true, false, {0, 0}},
    {"kdim 5, vdim 3, head_dim 3, remove 2", 6, 3, 0, 3, 5, 3, true, false, false, {2}},
    {"GQA H 8 Hkv 2, two from each group", 8, 8, 2, 0, 0, 0, true, false, false, {0, 3, 5, 6}},
    {"GQA H 6 Hkv 3, a whole group", 6, 6, 3, 2, 0, 0, false, false, true, {2, 3}},
    {"multi-query H 4 Hkv 1, rotary", 8, 4, 1, 0, 0, 0, false, false, true, {1}},
};

MultiheadAttentionOptions options_of(const PruneCase& c, Projection p) {
    MultiheadAttentionOptions o;
    o.embed_dim = c.E;
    o.num_heads = c.H;
    o.num_kv_heads = c.Hkv;
    o.head_dim = c.head_dim;
    o.kdim = c.kdim;
    o.vdim = c.vdim;
    o.add_bias_kv = c.bias_kv;
    o.add_zero_attn = c.zero_attn;
    o.rotary.enabled = c.rotary;
    o.projection = p;
    return o;
}

bool removed(const PruneCase& c, Index h) {
    return std::find(c.heads.begin(), c.heads.end(), h) != c.heads.end();
}

/// The entries of `full` (a state or gradient dict of the unpruned module `m`) that the pruned
/// module keeps: the rows of kept query heads and of key/value heads some kept head reads, the
/// columns of kept heads in out_proj.weight.
StateDict<double> kept_part(const StateDict<double>& full, const MultiheadAttention<double>& m,
                            const PruneCase& c) {
    const Index H = m.num_heads(), Hkv = m.num_kv_heads(), D = m.head_dim(), G = H / Hkv;
    std::vector<Index> q, kv;
    for (Index h = 0; h < H; ++h)
        if (!removed(c, h)) q.push_back(h);
    for (Index k = 0; k < Hkv; ++k)
        for (Index h = k * G; h < (k + 1) * G; ++h)
            if (!removed(c, h)) {
                kv.push_back(k);
                break;
            }
    // Rows [D r, D r + D) of x for each r of `heads`, after `first` rows, as [n D, cols].
    const auto rows = [&](const auto& x, Index first, const std::vector<Index>& heads,
                          std::vector<double>& out) {
        const Index cols = x.rank() == 1 ? 1 : x.shape().back();
        for (Index r : heads)
            for (Index d = 0; d < D; ++d)
                for (Index col = 0; col < cols; ++col)
                    out.push_back(x.data()[(first + r * D + d) * cols + col]);
    };
    StateDict<double> out;
    for (const auto& [name, t] : full) {
        std::vector<double> v;
        if (name == "in_proj_weight" || name == "in_proj_bias") {
            rows(t, 0, q, v);
            rows(t, H * D, kv, v);
            rows(t, H * D + Hkv * D, kv, v);
            const Index n = static_cast<Index>(q.size() + 2 * kv.size()) * D;
            out[name] = Tensor<double>(t.rank() == 1 ? Shape{n} : Shape{n, t.shape()[1]}, v);
        } else if (name == "q_proj_weight") {
            rows(t, 0, q, v);
            out[name] = Tensor<double>(Shape{static_cast<Index>(q.size()) * D, t.shape()[1]}, v);
        } else if (name == "k_proj_weight" || name == "v_proj_weight") {
            rows(t, 0, kv, v);
            out[name] = Tensor<double>(Shape{static_cast<Index>(kv.size()) * D, t.shape()[1]}, v);
        } else if (name == "bias_k" || name == "bias_v") {
            rows(t.view().reshape(Shape{Hkv * D}), 0, kv, v);
            out[name] = Tensor<double>(Shape{1, 1, static_cast<Index>(kv.size()) * D}, v);
        } else if (name == "out_proj.weight") {
            const Index E = t.shape()[0];
            for (Index r = 0; r < E; ++r)
                for (Index h : q)
                    for (Index d = 0; d < D; ++d) v.push_back(t(r, h * D + d));
            out[name] = Tensor<double>(Shape{E, static_cast<Index>(q.size()) * D}, v);
        } else {
            out[name] = t;
        }
    }
    return out;
}

}  // namespace

TEST_CASE("a pruned module equals the unpruned one with those heads masked to 0", "[mha][prune]") {
    for (const PruneCase& c : kCases)
        for (Projection p : kProjections) {
            CAPTURE(c.name, to_string(p));
            MultiheadAttention<double> full(options_of(c, p), 42);
            test::randomize_parameters(full, 8);
            MultiheadAttention<double> pruned = full;
            // Gradients accumulated before pruning are cut with the weights.
            std::mt19937_64 rng(4);
            const Index B = 2, L = 3, S = 4;
            const Tensor<double> q = Tensor<double>::randn(Shape{B, L, c.E}, rng);
            const Tensor<double> k = Tensor<double>::randn(Shape{B, S, full.kdim()}, rng);
            const Tensor<double> v = Tensor<double>::randn(Shape{B, S, full.vdim()}, rng);
            const Tensor<double> dy = Tensor<double>::randn(Shape{B, L, c.E}, rng);
            full.backward(full.forward(q, k, v), dy);
            pruned.backward(pruned.forward(q, k, v), dy);
            pruned.prune_heads(c.heads);
            CHECK(pruned.num_heads() * full.head_dim() == pruned.inner_dim());
            CHECK(pruned.head_dim() == full.head_dim());
            CHECK(pruned.options().head_dim == full.head_dim());

            AttentionMasks<double> masks;
            masks.head_mask = Tensor<double>(Shape{c.H});
            for (Index h = 0; h < c.H; ++h) masks.head_mask(h) = removed(c, h) ? 0.0 : 1.0;
            masks.need_weights = true;
            masks.average_attn_weights = false;
            const auto ff = full.forward(q, k, v, masks);
            AttentionMasks<double> plain;
            plain.need_weights = true;
            plain.average_attn_weights = false;
            const auto fp = pruned.forward(q, k, v, plain);
            HEADWISE_CHECK_CLOSE(fp.output, ff.output, 1e-12);
            const auto gf = full.backward(ff, dy);
            const auto gp = pruned.backward(fp, dy);
            HEADWISE_CHECK_CLOSE(gp.query, gf.query, 1e-12);
            HEADWISE_CHECK_CLOSE(gp.key, gf.key, 1e-12);
            HEADWISE_CHECK_CLOSE(gp.value, gf.value, 1e-12);
            const StateDict<double> expected_grads = kept_part(full.grad_dict(), full, c);
            const StateDict<double> expected_values = kept_part(full.state_dict(), full, c);
            const StateDict<double> grads = pruned.grad_dict(), values = pruned.state_dict();
            REQUIRE(grads.size() == expected_grads.size());
            for (const auto& [name, g] : grads) {
                CAPTURE(name);
                REQUIRE(g.shape() == expected_grads.at(name).shape());
                HEADWISE_CHECK_CLOSE(g, expected_grads.at(name), 1e-12);
                HEADWISE_CHECK_CLOSE(values.at(name), expected_values.at(name), 0.0);
            }
            // The per-head weights of the remaining heads are the full module's.
            Index n = 0;
            for (Index h = 0; h < c.H; ++h) {
                if (removed(c, h)) continue;
                const Index L_Sx = L * (S + (c.bias_kv ? 1 : 0) + (c.zero_attn ? 1 : 0));
                for (Index b = 0; b < B; ++b)
                    for (Index i = 0; i < L_Sx; ++i)
                        CHECK(fp.attn_weights.data()[(b * pruned.num_heads() + n) * L_Sx + i] ==
                              Catch::Approx(ff.attn_weights.data()[(b * c.H + h) * L_Sx + i])
                                  .margin(1e-13));
                ++n;
            }
            // A module built with the pruned options loads the pruned state dict.
            MultiheadAttention<double> rebuilt(pruned.options(), 1);
            rebuilt.load_state_dict(values);
            rebuilt.eval();
            pruned.eval();
            HEADWISE_CHECK_CLOSE(rebuilt.forward(q, k, v).output, pruned.forward(q, k, v).output,
                                 0.0);
        }
}

TEST_CASE("a pruned module saves, loads and decodes", "[mha][prune][decode]") {
    for (Projection p : kProjections) {
        CAPTURE(to_string(p));
        const PruneCase& c = kCases[3];  // GQA H 8 Hkv 2, with bias_kv
        MultiheadAttention<double> full(options_of(c, p), 42);
        test::randomize_parameters(full, 8);
        full.eval();
        MultiheadAttention<double> pruned = full;
        pruned.prune_heads(c.heads);
        CHECK(pruned.num_heads() == 4);
        CHECK(pruned.num_kv_heads() == 2);
        const std::string path = "test_mha_prune_" + std::string(to_string(p)) + ".safetensors";
        io::save_safetensors(path, pruned.state_dict());
        MultiheadAttention<double> loaded(pruned.options(), 3);
        loaded.load_state_dict(io::load_safetensors<double>(path));
        std::remove(path.c_str());
        loaded.eval();
        std::mt19937_64 rng(5);
        const Index B = 2, L = 5;
        const Tensor<double> x = Tensor<double>::randn(Shape{B, L, c.E}, rng);
        Tensor<double> gates(Shape{c.H});
        for (Index h = 0; h < c.H; ++h) gates(h) = removed(c, h) ? 0.0 : 1.0;
        KVCache<double> full_cache = full.make_kv_cache(B, L);
        KVCache<double> cache = loaded.make_kv_cache(B, L);
        for (Index t = 0; t < L; ++t) {
            Tensor<double> token(Shape{B, 1, c.E});
            for (Index b = 0; b < B; ++b)
                for (Index e = 0; e < c.E; ++e) token(b, 0, e) = x(b, t, e);
            HEADWISE_CHECK_CLOSE(loaded.decode(token, cache),
                                 full.decode(token, full_cache, {}, gates), 1e-12);
        }
    }
}

TEST_CASE("prune_heads: errors leave the module as it was", "[mha][prune][errors]") {
    const std::string fn = "headwise::MultiheadAttention::prune_heads: ";
    MultiheadAttentionOptions o;
    o.embed_dim = 8;
    o.num_heads = 4;
    o.num_kv_heads = 2;
    MultiheadAttention<double> m(o, 1);
    const auto before = m.state_dict();
    REQUIRE_THROWS_AS(m.prune_heads({1, 4}), std::invalid_argument);
    REQUIRE_THROWS_WITH(m.prune_heads({1, 4}), fn + "heads: must be in [0, 4), got 4");
    REQUIRE_THROWS_WITH(m.prune_heads({-1}), fn + "heads: must be in [0, 4), got -1");
    REQUIRE_THROWS_WITH(m.prune_heads({0, 1, 2, 3}),
                        fn + "heads: would remove all 4 heads; at least one must stay");
    REQUIRE_THROWS_WITH(m.prune_heads({0}),
                        fn + "heads: grouped-query attention needs the key/value heads that "
                             "remain to keep equally many query heads (or none), got 1 for "
                             "key/value head 0 and 2 for key/value head 1");
    CHECK(m.num_heads() == 4);
    for (const auto& [name, t] : m.state_dict()) HEADWISE_CHECK_CLOSE(t, before.at(name), 0.0);
    m.prune_heads({});  // nothing
    CHECK(m.num_heads() == 4);
    m.prune_heads({0, 1});  // a whole group
    CHECK(m.num_heads() == 2);
    CHECK(m.num_kv_heads() == 1);
    MultiheadAttention<float> f(o, 1);
    f.with_precision(Precision::bf16);
    REQUIRE_THROWS_AS(f.prune_heads({0, 1}), std::logic_error);
    REQUIRE_THROWS_WITH(f.prune_heads({0, 1}),
                        fn + "needs the float32 weights (the module computes in bf16 or from a "
                             "stored type); with_precision(Precision::float32) first");
    CHECK(f.num_heads() == 4);
}

}  // namespace test_mha_prune
