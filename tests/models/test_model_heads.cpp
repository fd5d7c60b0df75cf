// SPDX-License-Identifier: MIT
// models/heads.hpp through BertModel and LlamaModel: per-layer head masks, per-head attention
// maps (output_attentions) and prune_heads, against the out-projection columns scaled by the
// gates and against the unpruned model with the pruned heads masked to 0, in double.

#include <headwise/io/safetensors.hpp>
#include <headwise/layers/transformer_encoder_layer.hpp>
#include <headwise/models/bert.hpp>
#include <headwise/models/llama.hpp>

#include <algorithm>  // std::max
#include <cmath>      // std::abs
#include <cstdint>    // std::int64_t
#include <fstream>    // std::ofstream
#include <random>     // std::mt19937_64
#include <stdexcept>  // std::invalid_argument, std::runtime_error
#include <string>     // std::string
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/golden.hpp"
#include "support/instantiations.hpp"
#include "support/projections.hpp"

namespace test_model_heads {

using headwise::AttentionMasks;
using headwise::Index;
using headwise::Projection;
using headwise::Shape;
using headwise::StateDict;
using headwise::Tensor;
using headwise::models::BertConfig;
using headwise::models::BertModel;
using headwise::models::HeadOptions;
using headwise::models::HeadsToPrune;
using headwise::models::LlamaConfig;
using headwise::models::LlamaModel;
using headwise::test::kProjections;

namespace {

double max_diff(const Tensor<double>& a, const Tensor<double>& b) {
    REQUIRE(a.shape() == b.shape());
    double worst = 0;
    for (Index i = 0; i < a.numel(); ++i)
        worst = std::max(worst, std::abs(a.data()[i] - b.data()[i]));
    return worst;
}

BertConfig bert_config() {
    BertConfig c;
    c.vocab_size = 40;
    c.hidden_size = 16;
    c.num_hidden_layers = 3;
    c.num_attention_heads = 4;
    c.intermediate_size = 24;
    c.max_position_embeddings = 12;
    return c;
}

// Input ids [2, 7], the second sequence padded after 5 tokens.
struct Batch {
    Tensor<std::int64_t> ids{Shape{2, 7}, {1, 5, 9, 13, 2, 30, 7, 1, 22, 17, 4, 2, 0, 0}};
    Tensor<bool> padding{Shape{2, 7}};
    Batch() {
        padding(1, 5) = true;
        padding(1, 6) = true;
    }
};

// Gates [N, H] with values other than 0 and 1 (the reference scales out-projection columns).
Tensor<double> some_gates(Index N, Index H) {
    Tensor<double> g(Shape{N, H});
    for (Index i = 0; i < N * H; ++i) g.data()[i] = 0.25 * static_cast<double>((i * 7) % 5);
    return g;
}

// Head h's output enters the out-projection through columns [h D, (h + 1) D): gating the head
// by g equals scaling those columns by g.
void scale_out_columns(StateDict<double>& sd, const std::string& name, Index H, Index D,
                       const double* gates) {
    Tensor<double>& w = sd.at(name);  // [E, H D]
    const Index E = w.size(0);
    for (Index r = 0; r < E; ++r)
        for (Index h = 0; h < H; ++h)
            for (Index d = 0; d < D; ++d) w.data()[r * H * D + h * D + d] *= gates[h];
}

// Head mask of the unpruned model: 0 on the pruned heads, 1 elsewhere.
Tensor<double> mask_of(const HeadsToPrune& heads, Index N, Index H) {
    Tensor<double> m(Shape{N, H});
    for (Index i = 0; i < N * H; ++i) m.data()[i] = 1.0;
    for (const auto& [layer, list] : heads)
        for (Index h : list) m(layer, h) = 0.0;
    return m;
}

LlamaConfig llama_config(Index kv_heads) {
    LlamaConfig c;
    c.vocab_size = 50;
    c.hidden_size = 16;
    c.intermediate_size = 20;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = kv_heads;
    c.max_position_embeddings = 32;
    c.attention_bias = true;
    return c;
}

// A Llama model with random weights (the constructor leaves them unwritten).
LlamaModel<double> random_llama(const LlamaConfig& c, Projection p, std::uint64_t seed) {
    LlamaModel<double> m(c, p, headwise::uninitialized);
    std::mt19937_64 rng(seed);
    StateDict<double> sd = m.state_dict();
    for (auto& [name, t] : sd) {
        t = Tensor<double>::randn(t.shape(), rng);
        if (name.find("norm") != std::string::npos)
            for (Index i = 0; i < t.numel(); ++i) t.data()[i] = 1.0 + 0.1 * t.data()[i];
    }
    m.load_state_dict(sd);
    return m;
}

template <class F>
std::string message_of(F&& f) {
    try {
        f();
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
    return "(no std::invalid_argument)";
}

}  // namespace

TEST_CASE("encoder layer returns each head's weights, gated, only when asked") {
    headwise::TransformerEncoderLayerOptions o;
    o.d_model = 12;
    o.nhead = 3;
    o.dim_feedforward = 20;
    o.dropout = 0.0;
    headwise::TransformerEncoderLayer<double> layer(o, 3);
    std::mt19937_64 rng(1);
    const auto x = Tensor<double>::randn(Shape{2, 5, 12}, rng);
    AttentionMasks<double> masks;
    const auto plain = layer.forward(x, masks);
    CHECK(plain.attn_weights.numel() == 0);
    masks.need_weights = true;
    masks.average_attn_weights = false;
    const auto f = layer.forward(x, masks);
    CHECK(max_diff(f.output, plain.output) == 0.0);
    const auto direct = layer.self_attn().forward(x, x, x, masks);  // post-norm: the input
    REQUIRE(f.attn_weights.shape() == Shape{2, 3, 5, 5});
    CHECK(max_diff(f.attn_weights, direct.attn_weights) == 0.0);
    // Gated: head 1 at 0.5 halves its map; backward still works after the weights moved out.
    masks.head_mask = Tensor<double>(Shape{3}, {1.0, 0.5, 1.0});
    const auto g = layer.forward(x, masks);
    double worst = 0;
    for (Index i = 0; i < g.attn_weights.numel(); ++i) {
        const bool head1 = (i / 25) % 3 == 1;
        worst = std::max(worst, std::abs(g.attn_weights.data()[i] -
                                         (head1 ? 0.5 : 1.0) * f.attn_weights.data()[i]));
    }
    CHECK(worst < 1e-15);
    const Tensor<double> dx = layer.backward(g, g.output);
    CHECK(dx.shape() == x.shape());
}

TEST_CASE("BertModel head_mask equals the out-projection columns scaled by the gates") {
    const Projection p = GENERATE(from_range(kProjections));
    CAPTURE(p);
    BertModel<double> model(bert_config(), p, 11);
    const Batch in;
    const Tensor<double> gates = some_gates(3, 4);
    HeadOptions<double> heads;
    heads.head_mask = gates;
    const auto out = model.forward(in.ids, in.padding, {}, heads);
    CHECK(out.attentions.empty());

    StateDict<double> sd = model.state_dict();
    for (Index n = 0; n < 3; ++n)
        scale_out_columns(sd,
                          "encoder.layer." + std::to_string(n) + ".attention.output.dense.weight",
                          4, 4, gates.data() + n * 4);
    BertModel<double> scaled(bert_config(), p, 11);
    scaled.load_state_dict(sd);
    const Tensor<double> want = scaled.forward(in.ids, in.padding);
    CHECK(max_diff(out.last_hidden_state, want) < 1e-12);

    // [H]: the same gates in every layer.
    HeadOptions<double> row;
    const Tensor<double> one(Shape{4}, {1.0, 0.0, 0.5, 1.0});
    row.head_mask = one;
    Tensor<double> tiled(Shape{3, 4});
    for (Index n = 0; n < 3; ++n)
        for (Index h = 0; h < 4; ++h) tiled(n, h) = one(h);
    HeadOptions<double> full;
    full.head_mask = tiled;
    CHECK(max_diff(model.forward(in.ids, in.padding, {}, row).last_hidden_state,
                   model.forward(in.ids, in.padding, {}, full).last_hidden_state) == 0.0);
    // No mask: the plain forward exactly.
    CHECK(max_diff(model.forward(in.ids, in.padding, {}, HeadOptions<double>{}).last_hidden_state,
                   model.forward(in.ids, in.padding)) == 0.0);

    const Tensor<double> bad(Shape{2, 4});
    HeadOptions<double> wrong;
    wrong.head_mask = bad;
    CHECK(message_of([&] { model.forward(in.ids, in.padding, {}, wrong); }) ==
          "headwise::models::BertModel::forward: heads.head_mask: expected shape [3, 4] or [4], "
          "got [2, 4]");
}

TEST_CASE("BertModel output_attentions gives each layer's per-head maps") {
    BertModel<double> model(bert_config(), Projection::fused, 5);
    const Batch in;
    HeadOptions<double> heads;
    heads.output_attentions = true;
    const auto out = model.forward(in.ids, in.padding, {}, heads);
    CHECK(max_diff(out.last_hidden_state, model.forward(in.ids, in.padding)) == 0.0);
    REQUIRE(out.attentions.size() == 3);
    // Layer 2's maps from its attention run on layer 1's output: a 2-layer model's last state.
    BertConfig two = bert_config();
    two.num_hidden_layers = 2;
    BertModel<double> first(two, Projection::fused, 0);
    first.load_state_dict(model.state_dict(), "", [] {
        headwise::LoadRules r;
        r.ignored_prefixes = {"encoder.layer.2."};
        return r;
    }());
    const Tensor<double> x2 = first.forward(in.ids, in.padding);  // [2, 7, 16]
    AttentionMasks<double> masks;
    masks.key_padding_mask = in.padding;
    masks.need_weights = true;
    masks.average_attn_weights = false;
    auto& attn = model.layers()[2].attention();
    const auto direct = attn.forward(x2, x2, x2, masks);
    for (const Tensor<double>& a : out.attentions) CHECK(a.shape() == Shape{2, 4, 7, 7});
    CHECK(max_diff(out.attentions[2], direct.attn_weights) < 1e-14);
    // Rows sum to 1; padding keys get 0.
    double worst = 0, padded = 0;
    for (const Tensor<double>& a : out.attentions)
        for (Index r = 0; r < 2 * 4 * 7; ++r) {
            double sum = 0;
            for (Index j = 0; j < 7; ++j) sum += a.data()[r * 7 + j];
            worst = std::max(worst, std::abs(sum - 1.0));
            if (r >= 4 * 7) padded = std::max(padded, a.data()[r * 7 + 5] + a.data()[r * 7 + 6]);
        }
    CHECK(worst < 1e-14);
    CHECK(padded == 0.0);
    // With a head mask the maps are gated.
    const Tensor<double> gates = some_gates(3, 4);
    heads.head_mask = gates;
    const auto gated = model.forward(in.ids, in.padding, {}, heads);
    const Tensor<double> ref = model
                                   .forward(in.ids, in.padding, {},
                                            [&] {
                                                HeadOptions<double> h;
                                                h.head_mask = gates;
                                                return h;
                                            }())
                                   .last_hidden_state;
    CHECK(max_diff(gated.last_hidden_state, ref) == 0.0);
    // Layer 0's input does not depend on the gates: its maps are the ungated ones times the gate.
    double gap = 0;
    for (Index i = 0; i < gated.attentions[0].numel(); ++i) {
        const Index h = (i / 49) % 4;
        gap = std::max(gap, std::abs(gated.attentions[0].data()[i] -
                                     gates(0, h) * out.attentions[0].data()[i]));
    }
    CHECK(gap < 1e-15);
}

TEST_CASE("BertModel prune_heads equals the heads masked to 0, and saves and loads") {
    const Projection p = GENERATE(from_range(kProjections));
    CAPTURE(p);
    BertModel<double> model(bert_config(), p, 7);
    const Batch in;
    const HeadsToPrune heads{{0, {1, 3}}, {2, {0}}};
    HeadOptions<double> masked;
    const Tensor<double> m = mask_of(heads, 3, 4);
    masked.head_mask = m;
    const Tensor<double> want = model.forward(in.ids, in.padding, {}, masked).last_hidden_state;

    BertModel<double> pruned = model;
    pruned.prune_heads(heads);
    CHECK(pruned.layers()[0].attention().num_heads() == 2);
    CHECK(pruned.layers()[1].attention().num_heads() == 4);
    CHECK(pruned.layers()[2].attention().num_heads() == 3);
    CHECK(pruned.config().pruned_heads == heads);
    CHECK(max_diff(pruned.forward(in.ids, in.padding), want) < 1e-12);

    // The same names, narrower shapes.
    const StateDict<double> sd = pruned.state_dict(), full = model.state_dict();
    REQUIRE(sd.size() == full.size());
    for (const auto& [name, t] : full) REQUIRE(sd.count(name) == 1);
    CHECK(sd.at("encoder.layer.0.attention.self.query.weight").shape() == Shape{8, 16});
    CHECK(sd.at("encoder.layer.0.attention.self.value.bias").shape() == Shape{8});
    CHECK(sd.at("encoder.layer.0.attention.output.dense.weight").shape() == Shape{16, 8});
    CHECK(sd.at("encoder.layer.2.attention.self.key.weight").shape() == Shape{12, 16});
    CHECK(sd.at("encoder.layer.1.attention.self.key.weight").shape() == Shape{16, 16});

    // Saved and loaded into a model built from the pruned configuration.
    headwise::test::ScratchDir dir("model-heads");
    headwise::io::save_safetensors(dir.file("pruned.safetensors"), sd);
    BertModel<double> loaded(pruned.config(), p, 99);
    loaded.load_state_dict(headwise::io::load_safetensors<double>(dir.file("pruned.safetensors")));
    CHECK(max_diff(loaded.forward(in.ids, in.padding), want) < 1e-12);

    // Pruning again uses the unpruned numbering: layer 0's head 2 of heads {0, 2}.
    pruned.prune_heads({{0, {2}}});
    HeadOptions<double> more;
    const Tensor<double> m2 = mask_of({{0, {1, 2, 3}}, {2, {0}}}, 3, 4);
    more.head_mask = m2;
    CHECK(pruned.layers()[0].attention().num_heads() == 1);
    CHECK(pruned.config().pruned_heads.at(0) == std::vector<Index>{1, 2, 3});
    CHECK(max_diff(pruned.forward(in.ids, in.padding),
                   model.forward(in.ids, in.padding, {}, more).last_hidden_state) < 1e-12);
    // output_attentions on a pruned model: each layer its own head count.
    HeadOptions<double> maps;
    maps.output_attentions = true;
    const auto out = pruned.forward(in.ids, in.padding, {}, maps);
    CHECK(out.attentions[0].shape() == Shape{2, 1, 7, 7});
    CHECK(out.attentions[2].shape() == Shape{2, 3, 7, 7});
    // A [N, H] head mask needs equal head counts.
    CHECK(message_of([&] { pruned.forward(in.ids, in.padding, {}, more); }) ==
          "headwise::models::BertModel::forward: heads.head_mask: needs every layer to have the "
          "same number of heads (layer 0 has 1 after prune_heads), got layer 1 with 4");
}

TEST_CASE("BertModel prune_heads refuses bad heads before anything changes") {
    BertModel<double> model(bert_config(), Projection::fused, 7);
    model.prune_heads({{1, {2}}});
    const StateDict<double> before = model.state_dict();
    const auto refused = [&](const HeadsToPrune& heads) {
        const std::string what = message_of([&] { model.prune_heads(heads); });
        const StateDict<double> after = model.state_dict();
        for (const auto& [name, t] : before) {
            REQUIRE(after.at(name).shape() == t.shape());
            CHECK(max_diff(after.at(name), t) == 0.0);
        }
        CHECK(model.config().pruned_heads == HeadsToPrune{{1, {2}}});
        return what;
    };
    const std::string fn = "headwise::models::BertModel::prune_heads: ";
    CHECK(refused({{0, {1}}, {3, {0}}}) == fn + "heads: layers in [0, 3), got layer 3");
    CHECK(refused({{-1, {0}}}) == fn + "heads: layers in [0, 3), got layer -1");
    CHECK(refused({{0, {1}}, {2, {4}}}) == fn + "heads[2]: heads in [0, 4), got head 4");
    CHECK(refused({{0, {-1}}}) == fn + "heads[0]: heads in [0, 4), got head -1");
    CHECK(refused({{0, {1, 3, 1}}}) == fn + "heads[0]: each head listed once, got head 1 twice");
    CHECK(refused({{1, {2}}}) ==
          fn + "heads[1]: heads not pruned before, got head 2, pruned already");
    CHECK(refused({{0, {1}}, {1, {0, 1, 3}}}) ==
          fn + "heads[1]: at least one of the layer's 3 heads left, got every head");
    CHECK(refused({{2, {0, 1, 2, 3}}}) ==
          fn + "heads[2]: at least one of the layer's 4 heads left, got every head");
    // The configuration goes through the same checks.
    BertConfig c = bert_config();
    c.pruned_heads = {{0, {0, 1, 2, 3}}};
    CHECK(message_of([&] { BertModel<double> m(c); }) ==
          "headwise::models::BertModel::BertModel: config.pruned_heads: heads[0]: at least one "
          "of the layer's 4 heads left, got every head");
    // An empty list changes nothing.
    model.prune_heads({{0, {}}});
    CHECK(model.config().pruned_heads == HeadsToPrune{{1, {2}}});
}

TEST_CASE("LlamaModel head_mask and output_attentions") {
    const Projection p = GENERATE(from_range(kProjections));
    CAPTURE(p);
    const LlamaConfig c = llama_config(2);
    LlamaModel<double> model = random_llama(c, p, 3);
    const Tensor<std::int64_t> ids(Shape{2, 6}, {3, 14, 15, 9, 26, 5, 35, 8, 9, 7, 0, 0});
    Tensor<bool> padding(Shape{2, 6});
    padding(1, 4) = true;
    padding(1, 5) = true;
    const Tensor<double> gates = some_gates(2, 4);
    HeadOptions<double> heads;
    heads.head_mask = gates;
    const auto out = model.forward(ids, padding, heads);
    StateDict<double> sd = model.state_dict();
    for (Index n = 0; n < 2; ++n)
        scale_out_columns(sd, "layers." + std::to_string(n) + ".self_attn.o_proj.weight", 4, 4,
                          gates.data() + n * 4);
    LlamaModel<double> scaled = random_llama(c, p, 4);
    scaled.load_state_dict(sd);
    const Tensor<double> want = scaled.forward(ids, padding);
    // Real tokens only (padding rows are not meaningful).
    const auto real_gap = [&](const Tensor<double>& a, const Tensor<double>& b) {
        double worst = 0;
        for (Index b_ = 0; b_ < 2; ++b_)
            for (Index t = 0; t < 6; ++t)
                if (!padding(b_, t))
                    for (Index e = 0; e < 16; ++e)
                        worst = std::max(worst, std::abs(a(b_, t, e) - b(b_, t, e)));
        return worst;
    };
    CHECK(real_gap(out.last_hidden_state, want) < 1e-12);

    // Decode in two chunks with the gates.
    auto cache = model.make_cache(2, 6);
    Tensor<std::int64_t> a(Shape{2, 4}), b(Shape{2, 2});
    Tensor<bool> pa(Shape{2, 4}), pb(Shape{2, 2});
    for (Index s = 0; s < 2; ++s)
        for (Index t = 0; t < 6; ++t) {
            (t < 4 ? a(s, t) : b(s, t - 4)) = ids(s, t);
            (t < 4 ? pa(s, t) : pb(s, t - 4)) = padding(s, t);
        }
    const Tensor<double> y1 = model.decode(a, cache, pa, gates);
    const Tensor<double> y2 = model.decode(b, cache, pb, gates);
    double chunk_gap = 0;
    for (Index s = 0; s < 2; ++s)
        for (Index t = 0; t < 6; ++t)
            if (!padding(s, t))
                for (Index e = 0; e < 16; ++e)
                    chunk_gap =
                        std::max(chunk_gap,
                                 std::abs((t < 4 ? y1(s, t, e) : y2(s, t - 4, e)) - want(s, t, e)));
    CHECK(chunk_gap < 1e-12);

    // output_attentions: the forward path gives the same states and causal, gated maps.
    heads.output_attentions = true;
    const auto maps = model.forward(ids, padding, heads);
    CHECK(real_gap(maps.last_hidden_state, want) < 1e-12);
    REQUIRE(maps.attentions.size() == 2);
    HeadOptions<double> ungated;
    ungated.output_attentions = true;
    const auto plain = model.forward(ids, padding, ungated);
    double causal = 0, rows = 0, gating = 0;
    for (Index s = 0; s < 2; ++s)
        for (Index h = 0; h < 4; ++h)
            for (Index i = 0; i < 6; ++i) {
                if (padding(s, i)) continue;
                double sum = 0;
                for (Index j = 0; j < 6; ++j) {
                    const double w = plain.attentions[1](s, h, i, j);
                    sum += w;
                    if (j > i || padding(s, j)) causal = std::max(causal, std::abs(w));
                    gating =
                        std::max(gating, std::abs(maps.attentions[0](s, h, i, j) -
                                                  gates(0, h) * plain.attentions[0](s, h, i, j)));
                }
                rows = std::max(rows, std::abs(sum - 1.0));
            }
    CHECK(causal == 0.0);
    CHECK(rows < 1e-14);
    CHECK(gating < 1e-15);
    Tensor<bool> left(Shape{2, 6});
    left(1, 0) = true;
    CHECK(message_of([&] { model.forward(ids, left, ungated); }) ==
          "headwise::models::LlamaModel::forward: padding_mask: padding after each sequence's "
          "tokens only with output_attentions (left padding shifts the rotary positions; use "
          "decode), got padding before token 1 of sequence 1");
}

TEST_CASE("LlamaModel prune_heads with grouped-query attention") {
    const Projection p = GENERATE(from_range(kProjections));
    CAPTURE(p);
    const LlamaConfig c = llama_config(2);  // groups {0, 1} and {2, 3}
    LlamaModel<double> model = random_llama(c, p, 8);
    const Tensor<std::int64_t> ids(Shape{2, 5}, {3, 14, 15, 9, 26, 35, 8, 9, 7, 1});
    const HeadsToPrune heads{{0, {0, 1}}, {1, {1, 2}}};
    HeadOptions<double> masked;
    const Tensor<double> m = mask_of(heads, 2, 4);
    masked.head_mask = m;
    const Tensor<double> want = model.forward(ids, {}, masked).last_hidden_state;

    LlamaModel<double> pruned = model;
    auto stale = pruned.make_cache(2, 5);
    pruned.prune_heads(heads);
    CHECK(pruned.layers()[0].self_attn().num_heads() == 2);
    CHECK(pruned.layers()[0].self_attn().num_kv_heads() == 1);  // group 0 gone
    CHECK(pruned.layers()[1].self_attn().num_kv_heads() == 2);  // each group keeps one
    CHECK(max_diff(pruned.forward(ids), want) < 1e-12);
    const StateDict<double> sd = pruned.state_dict();
    CHECK(sd.at("layers.0.self_attn.q_proj.weight").shape() == Shape{8, 16});
    CHECK(sd.at("layers.0.self_attn.k_proj.weight").shape() == Shape{4, 16});
    CHECK(sd.at("layers.0.self_attn.v_proj.bias").shape() == Shape{4});
    CHECK(sd.at("layers.0.self_attn.o_proj.weight").shape() == Shape{16, 8});
    CHECK(sd.at("layers.1.self_attn.k_proj.weight").shape() == Shape{8, 16});

    // A cache made before pruning is refused, unchanged; a new one decodes as forward does.
    const Tensor<std::int64_t> first(Shape{2, 3}, {3, 14, 15, 35, 8, 9});
    CHECK(message_of([&] { pruned.decode(first, stale); }) ==
          "headwise::models::LlamaModel::decode: cache.layers[0]: a cache for 1 key/value heads "
          "of 4 features, 2 sequences and the other layers' size (make_cache after "
          "prune_heads), got 2 key/value heads, batch 2, size 0");
    CHECK(stale.size() == 0);
    auto cache = pruned.make_cache(2, 5);
    const Tensor<double> y = pruned.decode(first, cache);
    double gap = 0;
    for (Index s = 0; s < 2; ++s)
        for (Index t = 0; t < 3; ++t)
            for (Index e = 0; e < 16; ++e)
                gap = std::max(gap, std::abs(y(s, t, e) - want(s, t, e)));
    CHECK(gap < 1e-12);

    // Saved and loaded into a model of the pruned configuration.
    headwise::test::ScratchDir dir("model-heads-llama");
    headwise::io::save_safetensors(dir.file("pruned.safetensors"), sd);
    LlamaModel<double> loaded(pruned.config(), p, headwise::uninitialized);
    loaded.load_state_dict(headwise::io::load_safetensors<double>(dir.file("pruned.safetensors")));
    CHECK(max_diff(loaded.forward(ids), want) < 1e-12);

    // Unequal groups are refused, nothing changed.
    const std::string fn = "headwise::models::LlamaModel::prune_heads: ";
    CHECK(message_of([&] {
              model.prune_heads({{0, {0, 1}}, {1, {3}}});
          }) == fn + "heads[1]: the key/value heads that remain keeping equally many query heads "
                     "(groups of 2), got 2 and 1 (key/value head 1)");
    CHECK(model.layers()[0].self_attn().num_heads() == 4);
    CHECK(model.config().pruned_heads.empty());
}

TEST_CASE("BertConfig reads pruned_heads from config.json") {
    headwise::test::ScratchDir dir("model-heads-config");
    const auto read = [&](const std::string& pruned) {
        std::ofstream(dir.file("config.json"))
            << R"({"model_type": "bert", "vocab_size": 40, "hidden_size": 16,
                 "num_hidden_layers": 3, "num_attention_heads": 4, "intermediate_size": 24,
                 "max_position_embeddings": 12, "pruned_heads": )"
            << pruned << "}";
        return BertConfig::from_json_file(dir.file("config.json"));
    };
    // Hugging Face writes the layers as strings.
    const BertConfig c = read(R"({"0": [1, 3], "2": [0]})");
    CHECK(c.pruned_heads == HeadsToPrune{{0, {1, 3}}, {2, {0}}});
    CHECK(read("{}").pruned_heads.empty());
    BertModel<double> model(c, Projection::fused, 3);
    CHECK(model.layers()[0].attention().num_heads() == 2);
    CHECK(model.layers()[2].attention().num_heads() == 3);
    const auto error = [&](const std::string& pruned) {
        try {
            read(pruned);
        } catch (const std::runtime_error& e) {
            const std::string what = e.what();
            return what.substr(what.find("pruned_heads"));
        }
        return std::string("(no std::runtime_error)");
    };
    CHECK(error("[1]") ==
          "pruned_heads: expected an object {\"layer\": [head, ...]}, got an array of 1 element");
    CHECK(error(R"({"3": [0]})") ==
          "pruned_heads: expected layer keys in [0, num_hidden_layers = 3), got \"3\"");
    CHECK(error(R"({"x": [0]})") ==
          "pruned_heads: expected layer keys in [0, num_hidden_layers = 3), got \"x\"");
    CHECK(error(R"({"1": [4]})") ==
          "pruned_heads: expected heads in [0, num_attention_heads = 4), got 4");
    CHECK(error(R"({"1": 2})") == "pruned_heads: expected a list of heads, got 2");
}

}  // namespace test_model_heads
