// SPDX-License-Identifier: MIT
// Grouped-query attention: a module with Hkv key/value heads equals a full multi-head module whose
// key/value weights repeat each key/value head for its group (outputs, weights, input gradients;
// the grouped parameter gradients are the repeated copies' gradients summed over each group), in
// every projection; parameter shapes, per-head views and option errors.
#include <headwise/headwise.hpp>

#include <algorithm>  // std::min
#include <map>        // std::map
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/instantiations.hpp"
#include "support/match.hpp"
#include "support/mha_case.hpp"
#include "support/projections.hpp"

namespace test_gqa {

using namespace headwise;
using headwise::test::Inputs;
using headwise::test::MaskKind;
using headwise::test::MhaConfig;
using headwise::test::with;

namespace {

using StateDict = std::map<std::string, Tensor<double>>;
using headwise::test::kProjections;

/// Rows [Hkv D, ...] -> [H D, ...]: each key/value head's D rows once per query head of its
/// group (head h reads key/value head h / (H / Hkv)).
Tensor<double> repeat_heads(TensorView<const double> x, Index H, Index Hkv, Index D) {
    const Index cols = x.numel() / (Hkv * D);
    Tensor<double> out(Shape{H * D, cols});
    for (Index h = 0; h < H; ++h)
        for (Index d = 0; d < D; ++d)
            for (Index c = 0; c < cols; ++c)
                out(h * D + d, c) = x[((h / (H / Hkv)) * D + d) * cols + c];
    return out;
}

/// The adjoint of repeat_heads: [H D, ...] -> [Hkv D, ...], summing each group's copies.
Tensor<double> sum_groups(TensorView<const double> x, Index H, Index Hkv, Index D) {
    const Index cols = x.numel() / (H * D);
    Tensor<double> out(Shape{Hkv * D, cols});
    for (Index h = 0; h < H; ++h)
        for (Index d = 0; d < D; ++d)
            for (Index c = 0; c < cols; ++c)
                out((h / (H / Hkv)) * D + d, c) += x[(h * D + d) * cols + c];
    return out;
}

/// Rows [first, first + count) of a [rows, cols] (or [rows]) tensor.
Tensor<double> row_block(const Tensor<double>& x, Index first, Index count) {
    const Index cols = x.rank() == 1 ? 1 : x.numel() / x.size(0);
    Tensor<double> out(Shape{count, cols});
    for (Index r = 0; r < count; ++r)
        for (Index c = 0; c < cols; ++c) out(r, c) = x.data()[(first + r) * cols + c];
    return out;
}

/// Stacks [r_i, cols] blocks and reshapes to `shape`.
Tensor<double> stack(const std::vector<Tensor<double>>& blocks, const Shape& shape) {
    std::vector<double> v;
    for (const auto& b : blocks) v.insert(v.end(), b.begin(), b.end());
    return Tensor<double>(shape, v);
}

/// `f` (repeat_heads or sum_groups) applied to the key/value part of every in-projection entry
/// and to bias_k, bias_v; query and output entries copied. `from`/`to` key/value heads.
template <class F>
StateDict map_kv(const StateDict& sd, Index E, Index H, Index from, Index to, F f) {
    const Index D = E / H, Hkv = std::min(from, to), kv = from * D;
    StateDict out;
    for (const auto& [name, t] : sd) {
        if (name == "in_proj_weight" || name == "in_proj_bias") {
            const Tensor<double> q = row_block(t, 0, E);
            const Tensor<double> k = f(row_block(t, E, kv).view(), H, Hkv, D);
            const Tensor<double> v = f(row_block(t, E + kv, kv).view(), H, Hkv, D);
            const Index rows = E + 2 * to * D;
            out[name] = stack({q, k, v}, name == "in_proj_weight" ? Shape{rows, E} : Shape{rows});
        } else if (name == "k_proj_weight" || name == "v_proj_weight") {
            out[name] = f(t.view(), H, Hkv, D);
        } else if (name == "bias_k" || name == "bias_v") {
            out[name] = f(t.view(), H, Hkv, D).reshape(Shape{1, 1, to * D});
        } else {
            out[name] = t;
        }
    }
    return out;
}

/// Runs `c` (with c.Hkv key/value heads) on `kernel` against the full module with repeated
/// weights on the materialised kernel, where every query head has a key/value head of its own:
/// outputs, weights, every input gradient and every parameter gradient (the key/value ones summed
/// over each group), so that a grouped backward which loses a head's share of dK or dV fails.
void check_against_repeated(const MhaConfig& c, Projection p,
                            AttentionKernel kernel = AttentionKernel::automatic) {
    const Index Hkv = c.Hkv;
    MhaConfig full_config = c;
    full_config.Hkv = 0;
    MultiheadAttentionOptions o = c.options(p);
    o.attention_kernel = kernel;
    MultiheadAttention<double> gqa(o, 42);
    // Non-zero biases, so that their gradients (and bias_k, bias_v) carry the group sums.
    std::mt19937_64 rng(9);
    StateDict sd = gqa.state_dict();
    for (auto& [name, t] : sd)
        if (name.find("bias") != std::string::npos) t = Tensor<double>::randn(t.shape(), rng);
    gqa.load_state_dict(sd);
    MultiheadAttentionOptions full_options = full_config.options(p);
    full_options.attention_kernel = AttentionKernel::materialised;
    MultiheadAttention<double> full(full_options, 1);
    full.load_state_dict(map_kv(sd, c.E, c.H, Hkv, c.H, repeat_heads));

    const test::MhaData<double> d = test::make_data<double>(c);
    const auto f_gqa = gqa.forward(d.q, d.key(), d.value(), d.masks);
    const auto f_full = full.forward(d.q, d.key(), d.value(), d.masks);
    HEADWISE_CHECK_CLOSE(f_gqa.output, f_full.output, 1e-12);
    if (c.need_weights) HEADWISE_CHECK_CLOSE(f_gqa.attn_weights, f_full.attn_weights, 1e-12);

    const Tensor<double> dy = Tensor<double>::randn(f_gqa.output.shape(), rng);
    const auto g_gqa = gqa.backward(f_gqa, dy);
    const auto g_full = full.backward(f_full, dy);
    HEADWISE_CHECK_CLOSE(g_gqa.query, g_full.query, 1e-12);
    HEADWISE_CHECK_CLOSE(g_gqa.key, g_full.key, 1e-12);
    HEADWISE_CHECK_CLOSE(g_gqa.value, g_full.value, 1e-12);
    const StateDict expected = map_kv(full.grad_dict(), c.E, c.H, c.H, Hkv, sum_groups);
    const StateDict grads = gqa.grad_dict();
    REQUIRE(grads.size() == expected.size());
    for (const auto& [name, g] : grads) {
        CAPTURE(name);
        REQUIRE(expected.count(name) == 1);
        CHECK(g.shape() == expected.at(name).shape());
        HEADWISE_CHECK_CLOSE(g, expected.at(name), 1e-12);
    }
}

}  // namespace

TEST_CASE(
    "grouped-query attention equals multi-head attention with the key/value weights "
    "repeated per group",
    "[gqa]") {
    using C = MhaConfig&;
    const std::vector<MhaConfig> grid = {
        with([](C c) { c.H = 4, c.Hkv = 2; }),
        with([](C c) { c.H = 4, c.Hkv = 1, c.inputs = Inputs::kv_same, c.S = 5; }),
        with([](C c) { c.H = 4, c.Hkv = 4; }),  // Hkv = H is plain multi-head attention
        with([](C c) {
            c.E = 12, c.H = 6, c.Hkv = 2, c.inputs = Inputs::distinct, c.S = 4, c.kdim = 5;
            c.vdim = 7, c.masks = MaskKind::all, c.average = false;
        }),
        with([](C c) {
            c.H = 4, c.Hkv = 2, c.bias_kv = true, c.zero_attn = true, c.masks = MaskKind::all;
        }),
        with([](C c) { c.H = 4, c.Hkv = 1, c.masks = MaskKind::bool_4d, c.bias = false; }),
        with([](C c) {
            c.H = 4, c.Hkv = 2, c.inputs = Inputs::kv_same, c.L = 2, c.S = 6, c.scale = 0.4;
            c.masks = MaskKind::causal, c.alignment = CausalAlignment::bottom_right;
        }),
        with([](C c) { c.H = 8, c.Hkv = 2, c.batched = false, c.masks = MaskKind::key_padding; }),
    };
    for (const MhaConfig& c : grid)
        for (Projection p : kProjections) {
            CAPTURE(c.str(), to_string(p));
            check_against_repeated(c, p);
        }
}

TEST_CASE("grouped-query parameters have API.md's shapes", "[gqa][state]") {
    MultiheadAttentionOptions o;
    o.embed_dim = 16;
    o.num_heads = 8;
    o.num_kv_heads = 2;  // D = 2: K and V have 4 features
    o.add_bias_kv = true;
    const MultiheadAttention<float> packed(o, 1);
    auto sd = packed.state_dict();
    CHECK(sd.at("in_proj_weight").shape() == Shape{16 + 2 * 4, 16});
    CHECK(sd.at("in_proj_bias").shape() == Shape{16 + 2 * 4});
    CHECK(sd.at("bias_k").shape() == Shape{1, 1, 4});
    CHECK(sd.at("bias_v").shape() == Shape{1, 1, 4});
    CHECK(sd.at("out_proj.weight").shape() == Shape{16, 16});
    CHECK(packed.parameter_count() == 24 * 16 + 24 + 2 * 4 + 16 * 16 + 16);

    o.kdim = 5;
    o.vdim = 3;
    const MultiheadAttention<float> split(o, 1);
    sd = split.state_dict();
    CHECK(sd.at("q_proj_weight").shape() == Shape{16, 16});
    CHECK(sd.at("k_proj_weight").shape() == Shape{4, 5});
    CHECK(sd.at("v_proj_weight").shape() == Shape{4, 3});
    CHECK(sd.at("in_proj_bias").shape() == Shape{24});
    CHECK(split.num_kv_heads() == 2);
}

TEST_CASE("the heads of a group view the same key/value parameters", "[gqa][state]") {
    MultiheadAttentionOptions o;
    o.embed_dim = 12;
    o.num_heads = 6;
    o.num_kv_heads = 2;  // groups {0, 1, 2}, {3, 4, 5}; D = 2
    MultiheadAttention<double> m(o, 3);
    for (Index h = 0; h < 6; ++h) {
        CAPTURE(h);
        const Index g = h / 3;
        CHECK(m.head(h).k_weight().data() == m.head(g * 3).k_weight().data());
        CHECK(m.head(h).v_bias().data() == m.head(g * 3).v_bias().data());
        CHECK(m.head(h).k_weight().shape() == Shape{2, 12});
        CHECK(m.head(h).q_weight().shape() == Shape{2, 12});
        // The packed layout: Wq [12, 12] | Wk [4, 12] | Wv [4, 12].
        const auto sd = m.state_dict();
        const Tensor<double>& in = sd.at("in_proj_weight");
        CHECK(m.head(h).k_weight()(1, 5) == in(12 + g * 2 + 1, 5));
        CHECK(m.head(h).v_weight()(0, 7) == in(16 + g * 2, 7));
        CHECK(m.head(h).q_weight()(1, 0) == in(h * 2 + 1, 0));
    }
    CHECK(m.head(2).k_weight().data() != m.head(3).k_weight().data());
    // Writing through one head's view changes the whole group's key head.
    m.head(4).k_weight()(0, 0) = 7.5;
    CHECK(m.head(3).k_weight()(0, 0) == 7.5);
    CHECK(m.state_dict().at("in_proj_weight")(14, 0) == 7.5);
}

TEST_CASE("num_kv_heads must divide num_heads", "[gqa][errors]") {
    MultiheadAttentionOptions o;
    o.embed_dim = 12;
    o.num_heads = 6;
    o.num_kv_heads = 4;
    CHECK_THROWS_WITH(MultiheadAttention<float>(o),
                      "headwise::MultiheadAttention::MultiheadAttention: options.num_kv_heads: "
                      "must divide num_heads = 6, or be 0 for num_heads, got 4");
    o.num_kv_heads = -1;
    CHECK_THROWS_AS(MultiheadAttention<float>(o), std::invalid_argument);
    o.num_kv_heads = 7;
    CHECK_THROWS_AS(MultiheadAttention<float>(o), std::invalid_argument);
    o.num_kv_heads = 1;
    CHECK_NOTHROW(MultiheadAttention<float>(o));
    o.num_kv_heads = 0;
    CHECK(MultiheadAttention<float>(o).num_kv_heads() == 6);
}

TEST_CASE("a grouped-query state dict of the wrong shape is refused", "[gqa][state]") {
    MultiheadAttentionOptions o;
    o.embed_dim = 8;
    o.num_heads = 4;
    o.num_kv_heads = 2;
    MultiheadAttention<double> gqa(o, 1);
    o.num_kv_heads = 0;
    const MultiheadAttention<double> full(o, 1);
    // A full module's [3E, E] in_proj_weight does not fit [E + 2 Hkv D, E] = [16, 8].
    CHECK_THROWS_AS(gqa.load_state_dict(full.state_dict()), shape_error);
}

TEST_CASE(
    "grouped-query attention on the blocked kernel equals multi-head attention with the key/value "
    "weights repeated per group",
    "[gqa][blocked]") {
    // The blocked kernel adds each query head's dK, dV into its group's key/value head, call after
    // call: compared with a module whose heads each have their own, every gradient included.
    using C = MhaConfig&;
    const std::vector<MhaConfig> grid = {
        with([](C c) {
            c.H = 4, c.Hkv = 2, c.L = 5, c.masks = MaskKind::causal, c.need_weights = false;
            c.bias_kv = true;
        }),
        with([](C c) { c.H = 4, c.Hkv = 1, c.inputs = Inputs::kv_same, c.S = 5; }),
        with([](C c) {
            c.E = 12, c.H = 6, c.Hkv = 2, c.inputs = Inputs::distinct, c.S = 4, c.kdim = 5;
            c.vdim = 7, c.masks = MaskKind::all, c.average = false, c.zero_attn = true;
        }),
        with([](C c) { c.H = 8, c.Hkv = 2, c.batched = false, c.masks = MaskKind::key_padding; }),
    };
    for (const MhaConfig& c : grid)
        for (Projection p : kProjections) {
            CAPTURE(c.str(), to_string(p));
            check_against_repeated(c, p, AttentionKernel::blocked);
        }
}

}  // namespace test_gqa
