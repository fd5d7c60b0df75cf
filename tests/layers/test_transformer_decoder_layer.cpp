// SPDX-License-Identifier: MIT
// Tests of TransformerDecoderLayer: a torch layer loaded by its state-dict names matches in output
// and every gradient under every projection and mask form; gradcheck with dropout; contract and
// errors.
#include <headwise/gradcheck.hpp>
#include <headwise/io/npy.hpp>
#include <headwise/layers/transformer_decoder_layer.hpp>

#include <cstdint>    // std::uint64_t
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string
#include <utility>    // std::move
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/golden.hpp"
#include "support/golden_layers.hpp"
#include "support/instantiations.hpp"
#include "support/match.hpp"
#include "support/projections.hpp"
#include "support/tolerance.hpp"
#include "support/training_golden.hpp"

namespace test_transformer_decoder_layer {

using namespace headwise;
using headwise::test::cast;
using headwise::test::kProjections;

namespace {

using test::DecoderCase;
using test::load_decoder_case;

template <class T>
TransformerDecoderLayer<T> golden_layer(const DecoderCase& c, Projection projection) {
    TransformerDecoderLayerOptions o = c.options;
    o.projection = projection;
    TransformerDecoderLayer<T> layer(o, 99);
    StateDict<T> sd;
    for (const auto& entry : c.state) sd.emplace(entry.first, cast<T>(entry.second));
    layer.load_state_dict(sd);  // torch's names, no renaming
    return layer;
}

// How the causal target mask reaches the layer: as torch's boolean or float tgt_mask was stored,
// or as is_causal (torch 2's tgt_is_causal; torch 1.13 has only the mask).
enum class CausalForm { stored, is_causal };

/// Row b of a [B, ...] tensor, as an unbatched tensor [...].
template <class U>
Tensor<U> row(const Tensor<U>& t, Index b) {
    const Shape inner = t.shape().drop_front();
    Tensor<U> r(inner);
    for (Index i = 0; i < inner.numel(); ++i) r.data()[i] = t.data()[b * inner.numel() + i];
    return r;
}

template <class T>
AttentionMasks<T> tgt_masks_of(const DecoderCase& c, CausalForm form) {
    AttentionMasks<T> m;
    m.key_padding_mask = c.tgt_key_padding_mask;
    if (form == CausalForm::is_causal)
        m.is_causal = true;
    else if (c.tgt_mask_float.numel() != 0)
        m.attn_bias = cast<T>(c.tgt_mask_float);
    else
        m.attn_mask = c.tgt_mask;
    return m;
}

template <class T>
AttentionMasks<T> memory_masks_of(const DecoderCase& c) {
    AttentionMasks<T> m;
    m.attn_mask = c.memory_mask;
    m.key_padding_mask = c.memory_key_padding_mask;
    return m;
}

TransformerDecoderLayerOptions tiny_options() {
    TransformerDecoderLayerOptions o;
    o.d_model = 4;
    o.nhead = 2;
    o.dim_feedforward = 6;
    o.dropout = 0.0;
    return o;
}

}  // namespace

TEMPLATE_TEST_CASE(
    "a torch decoder layer matches in output, both input gradients and every "
    "parameter gradient",
    "[decoder][golden]", float, double) {
    using T = TestType;
    const std::string name = GENERATE("post_norm_relu", "pre_norm_gelu");
    const CausalForm form = GENERATE(CausalForm::stored, CausalForm::is_causal);
    const Projection projection = GENERATE(from_range(kProjections));
    CAPTURE(name, form == CausalForm::stored ? "stored mask" : "is_causal", to_string(projection));
    const DecoderCase c = load_decoder_case(name);
    TransformerDecoderLayer<T> layer = golden_layer<T>(c, projection);
    const auto f = layer.forward(cast<T>(c.tgt), cast<T>(c.memory), tgt_masks_of<T>(c, form),
                                 memory_masks_of<T>(c));
    HEADWISE_CHECK_CLOSE(f.output, c.output, test::kGoldenTolerance<T>);
    const auto g = layer.backward(f, cast<T>(c.grad_output));
    HEADWISE_CHECK_CLOSE(g.tgt, c.grad_tgt, test::kGoldenTolerance<T>);
    HEADWISE_CHECK_CLOSE(g.memory, c.grad_memory, test::kGoldenTolerance<T>);
    const StateDict<T> grads = layer.grad_dict();
    REQUIRE(grads.size() == c.grads.size());
    REQUIRE(grads.size() == 18);
    for (const auto& entry : c.grads) {
        CAPTURE(entry.first);
        HEADWISE_CHECK_CLOSE(grads.at(entry.first), entry.second, test::kGoldenTolerance<T>);
    }
}

TEMPLATE_TEST_CASE("an unbatched decoder call matches the torch layer's batch row",
                   "[decoder][golden]", float, double) {
    // Batches are independent, so row b of torch's output and input gradients is what the
    // unbatched call on row b computes (the parameter gradients sum over rows: not compared).
    using T = TestType;
    const std::string name = GENERATE("post_norm_relu", "pre_norm_gelu");
    const Index b = GENERATE(Index{0}, Index{1});
    CAPTURE(name, b);
    const DecoderCase c = load_decoder_case(name);
    TransformerDecoderLayer<T> layer = golden_layer<T>(c, Projection::fused);
    AttentionMasks<T> tgt_masks = tgt_masks_of<T>(c, CausalForm::stored);
    tgt_masks.key_padding_mask = row(c.tgt_key_padding_mask, b);  // [L]
    AttentionMasks<T> memory_masks = memory_masks_of<T>(c);
    memory_masks.key_padding_mask = row(c.memory_key_padding_mask, b);  // [S]
    const auto f =
        layer.forward(cast<T>(row(c.tgt, b)), cast<T>(row(c.memory, b)), tgt_masks, memory_masks);
    REQUIRE(f.output.rank() == 2);
    HEADWISE_CHECK_CLOSE(f.output, row(c.output, b), test::kGoldenTolerance<T>);
    const auto g = layer.backward(f, cast<T>(row(c.grad_output, b)));
    HEADWISE_CHECK_CLOSE(g.tgt, row(c.grad_tgt, b), test::kGoldenTolerance<T>);
    HEADWISE_CHECK_CLOSE(g.memory, row(c.grad_memory, b), test::kGoldenTolerance<T>);
}

TEST_CASE("the decoder layer passes gradcheck with dropout, for tgt, memory and every parameter",
          "[decoder][gradcheck]") {
    const bool norm_first = GENERATE(false, true);
    const Activation activation = GENERATE(Activation::relu, Activation::gelu);
    CAPTURE(norm_first, to_string(activation));
    TransformerDecoderLayerOptions o = tiny_options();
    o.dropout = 0.2;
    o.activation = activation;
    o.norm_first = norm_first;
    const TransformerDecoderLayer<double> base(o, 5);
    Generator rng(17);
    const std::vector<Parameter<const double>> params = base.parameters();
    std::vector<Tensor<double>> inputs{Tensor<double>::randn(Shape{2, 3, 4}, rng),   // tgt
                                       Tensor<double>::randn(Shape{2, 4, 4}, rng)};  // memory
    for (const Parameter<const double>& p : params) {
        Tensor<double> v(p.value.shape());
        for (Index i = 0; i < v.numel(); ++i)  // away from zero: ReLU kinks stay out of reach
            v.data()[i] = p.value[i] + (p.name.find("bias") != std::string::npos ? 0.3 : 0.0);
        inputs.push_back(std::move(v));
    }
    AttentionMasks<double> tgt_masks;
    tgt_masks.is_causal = true;
    AttentionMasks<double> memory_masks;
    memory_masks.key_padding_mask = Tensor<bool>(Shape{2, 4});
    memory_masks.key_padding_mask(1, 3) = true;
    // Each evaluation runs a copy of `base`: the same dropout streams, hence the same masks.
    auto make = [&](const std::vector<Tensor<double>>& in) {
        TransformerDecoderLayer<double> layer = base;
        StateDict<double> sd;
        for (std::size_t i = 0; i < params.size(); ++i) sd.emplace(params[i].name, in[i + 2]);
        layer.load_state_dict(sd);
        return layer;
    };
    const GradcheckResult r = gradcheck(
        [&](const std::vector<Tensor<double>>& in) {
            return make(in).forward(in[0], in[1], tgt_masks, memory_masks).output;
        },
        [&](const std::vector<Tensor<double>>& in, const Tensor<double>& dy) {
            TransformerDecoderLayer<double> layer = make(in);
            const auto f = layer.forward(in[0], in[1], tgt_masks, memory_masks);
            auto g = layer.backward(f, dy);
            std::vector<Tensor<double>> grads{std::move(g.tgt), std::move(g.memory)};
            const StateDict<double> pg = layer.grad_dict();
            for (const Parameter<const double>& p : params) grads.push_back(pg.at(p.name));
            return grads;
        },
        inputs, rng, {1e-5, 1e-6});
    INFO(r.where);
    CHECK(r.ok);
    Index entries = 0;  // tgt's, memory's and every parameter's: each one has a gradient
    for (const Tensor<double>& in : inputs) entries += in.numel();
    CHECK(r.checked == entries);
}

TEST_CASE("decoder dropout comes from the seed: reproducible, and off in eval mode",
          "[decoder][dropout]") {
    TransformerDecoderLayerOptions o = tiny_options();
    o.d_model = 8;
    o.dim_feedforward = 16;
    o.dropout = 0.3;
    Generator rng(4);
    const Tensor<float> tgt = Tensor<float>::randn(Shape{2, 3, 8}, rng);
    const Tensor<float> memory = Tensor<float>::randn(Shape{2, 5, 8}, rng);
    TransformerDecoderLayer<float> a(o, 7), b(o, 7), other(o, 8);
    const auto fa = a.forward(tgt, memory), fb = b.forward(tgt, memory);
    CHECK(test::identical(fa.output, fb.output));  // the same seed: the same masks
    other.load_state_dict(a.state_dict());
    CHECK_FALSE(test::identical(other.forward(tgt, memory).output, fa.output));  // other masks
    const auto fa2 = a.forward(tgt, memory);  // the next masks of the same streams
    CHECK_FALSE(test::identical(fa2.output, fa.output));
    // Backward regenerates each forward's own masks, in any order: the gradients of two
    // forwards taken in reverse equal those of fresh copies that ran one forward each.
    Tensor<float> dy = Tensor<float>::randn(fa.output.shape(), rng);
    const auto g2 = a.backward(fa2, dy);
    const auto g1 = a.backward(fa, dy);
    const auto gb = b.backward(fb, dy);
    CHECK(test::identical(g1.tgt, gb.tgt));
    CHECK(test::identical(g1.memory, gb.memory));
    CHECK_FALSE(test::identical(g2.tgt, gb.tgt));
    a.eval();
    const auto e1 = a.forward(tgt, memory), e2 = a.forward(tgt, memory);
    CHECK(test::identical(e1.output, e2.output));
    CHECK_FALSE(test::identical(e1.output, fa.output));
    // Eval mode equals training mode without dropout.
    o.dropout = 0.0;
    TransformerDecoderLayer<float> plain(o, 7);
    plain.load_state_dict(a.state_dict());
    HEADWISE_CHECK_CLOSE(plain.forward(tgt, memory).output, e1.output, test::Tol<float>::rel);
}

TEST_CASE("the decoder layer follows the module contract", "[decoder]") {
    TransformerDecoderLayerOptions o = tiny_options();
    o.d_model = 8;
    o.dim_feedforward = 16;
    o.dropout = 0.1;
    TransformerDecoderLayer<float> layer(o, 1);
    std::vector<std::string> names;
    for (const Parameter<float>& p : layer.parameters()) names.push_back(p.name);
    CHECK(names ==
          std::vector<std::string>{"self_attn.in_proj_weight", "self_attn.in_proj_bias",
                                   "self_attn.out_proj.weight", "self_attn.out_proj.bias",
                                   "multihead_attn.in_proj_weight", "multihead_attn.in_proj_bias",
                                   "multihead_attn.out_proj.weight", "multihead_attn.out_proj.bias",
                                   "linear1.weight", "linear1.bias", "linear2.weight",
                                   "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight",
                                   "norm2.bias", "norm3.weight", "norm3.bias"});
    CHECK(layer.parameter_count() == 2 * (3 * 64 + 24 + 64 + 8) + 128 + 16 + 128 + 8 + 48);
    // A whole-model state dict loads by prefix.
    StateDict<float> model = layer.state_dict("decoder.layers.0.");
    model.emplace("encoder.weight", Tensor<float>(Shape{3}));
    TransformerDecoderLayer<float> other(o, 2);
    CHECK_FALSE(test::identical(other.state_dict().at("multihead_attn.in_proj_weight"),
                                layer.state_dict().at("multihead_attn.in_proj_weight")));
    other.load_state_dict(model, "decoder.layers.0.");
    for (const auto& entry : layer.state_dict()) {
        CAPTURE(entry.first);
        CHECK(test::identical(other.state_dict().at(entry.first), entry.second));
    }
    // The two attentions start from different weights (their own seeds).
    CHECK_FALSE(test::identical(layer.state_dict().at("self_attn.in_proj_weight"),
                                layer.state_dict().at("multihead_attn.in_proj_weight")));
    // eval(): no dropout, deterministic, nothing saved for backward.
    layer.eval();
    CHECK_FALSE(layer.multihead_attn().is_training());
    Generator rng(3);
    const Tensor<float> x = Tensor<float>::randn(Shape{2, 3, 8}, rng);
    const Tensor<float> m = Tensor<float>::randn(Shape{2, 4, 8}, rng);
    const auto a = layer.forward(x, m);
    CHECK_FALSE(a.differentiable());
    CHECK_THROWS_MATCHES(layer.backward(a, a.output), std::invalid_argument,
                         Message("headwise::TransformerDecoderLayer::backward: fwd: comes from a "
                                 "forward in eval mode, which saves nothing for backward; call "
                                 "train() before forward"));
    layer.train();
    CHECK(layer.multihead_attn().is_training());
    // zero_grad clears what backward accumulated; a second backward doubles it.
    const auto t = layer.forward(x, m);
    const Tensor<float> dy = Tensor<float>::randn(t.output.shape(), rng);
    layer.backward(t, dy);
    const StateDict<float> once = layer.grad_dict();
    layer.backward(t, dy);
    HEADWISE_CHECK_CLOSE(
        layer.grad_dict().at("norm3.weight"),
        [&] {
            Tensor<float> twice = once.at("norm3.weight");
            twice.matrix() *= 2.0f;
            return twice;
        }(),
        test::Tol<float>::rel);
    layer.zero_grad();
    CHECK(layer.grad_dict().at("multihead_attn.in_proj_weight").matrix().isZero(0.0f));
    // A moved layer is the same layer: its records stay valid.
    TransformerDecoderLayer<float> moved = std::move(layer);
    CHECK_NOTHROW(moved.backward(t, dy));
}

TEST_CASE("the decoder layer's errors name the argument, before anything changes",
          "[decoder][errors]") {
    TransformerDecoderLayerOptions o = tiny_options();
    o.d_model = 8;
    o.dim_feedforward = 16;
    o.dropout = 0.1;
    TransformerDecoderLayer<float> layer(o, 1);
    Generator rng(3);
    const Tensor<float> tgt = Tensor<float>::randn(Shape{2, 3, 8}, rng);
    const Tensor<float> memory = Tensor<float>::randn(Shape{2, 5, 8}, rng);
    const std::vector<std::uint64_t> streams = layer.random_state();
    const std::string fwd = "headwise::TransformerDecoderLayer::forward: ";
    auto fails = [&](TensorView<const float> t, TensorView<const float> m,
                     const AttentionMasks<float>& tm, const AttentionMasks<float>& mm,
                     const std::string& message) {
        CAPTURE(message);
        REQUIRE_THROWS_AS(layer.forward(t, m, tm, mm), shape_error);
        REQUIRE_THROWS_WITH(layer.forward(t, m, tm, mm), fwd + message);
        CHECK(layer.random_state() == streams);  // no dropout stream was drawn
    };
    const AttentionMasks<float> none;
    fails(Tensor<float>(Shape{2, 3, 7}), memory, none, none,
          "tgt: expected shape [B, L, 8] or [L, 8], got [2, 3, 7]");
    fails(Tensor<float>(Shape{8}), memory, none, none,
          "tgt: expected shape [B, L, 8] or [L, 8], got [8]");
    fails(tgt, Tensor<float>(Shape{2, 5, 6}), none, none,
          "memory: expected shape [2, S, 8], got [2, 5, 6]");
    fails(tgt, Tensor<float>(Shape{3, 5, 8}), none, none,
          "memory: expected shape [2, S, 8], got [3, 5, 8]");
    fails(tgt, Tensor<float>(Shape{5, 8}), none, none,
          "memory: expected shape [2, S, 8], got [5, 8]");
    fails(Tensor<float>(Shape{3, 8}), memory, none, none,
          "memory: expected shape [S, 8], got [2, 5, 8]");
    AttentionMasks<float> bad;
    bad.attn_mask = Tensor<bool>(Shape{3, 5});  // the memory's [L, S], not the target's [L, L]
    fails(tgt, memory, bad, none,
          "tgt_masks.attn_mask: expected shape [3, 3] or [2, 2, 3, 3], got [3, 5]");
    bad = {};
    bad.key_padding_mask = Tensor<bool>(Shape{2, 5});
    fails(tgt, memory, bad, none, "tgt_masks.key_padding_mask: expected shape [2, 3], got [2, 5]");
    bad = {};
    bad.attn_mask = Tensor<bool>(Shape{3, 3});
    fails(tgt, memory, none, bad,
          "memory_masks.attn_mask: expected shape [3, 5] or [2, 2, 3, 5], got [3, 3]");
    bad = {};
    bad.attn_bias = Tensor<float>(Shape{2, 3, 5});
    fails(tgt, memory, none, bad,
          "memory_masks.attn_bias: expected shape [3, 5] or [2, 2, 3, 5], got [2, 3, 5]");
    bad = {};
    bad.key_padding_mask = Tensor<bool>(Shape{2, 3});  // the target's padding, not the memory's
    fails(tgt, memory, none, bad,
          "memory_masks.key_padding_mask: expected shape [2, 5], got [2, 3]");

    // backward: another layer's record (a copy is another layer), a gradient of another shape.
    const auto f = layer.forward(tgt, memory);
    TransformerDecoderLayer<float> twin(o, 1);
    TransformerDecoderLayer<float> copy = layer;
    const std::string other =
        "headwise::TransformerDecoderLayer::backward: fwd: comes from another layer's forward (a "
        "copy of a layer is another layer); pass a result of this layer's forward";
    const StateDict<float> before = twin.grad_dict();
    CHECK_THROWS_MATCHES(twin.backward(f, f.output), std::invalid_argument, Message(other));
    CHECK_THROWS_MATCHES(copy.backward(f, f.output), std::invalid_argument, Message(other));
    CHECK(test::identical(twin.grad_dict().at("linear1.weight"), before.at("linear1.weight")));
    CHECK_THROWS_MATCHES(layer.backward(f, Tensor<float>(Shape{2, 3})), shape_error,
                         Message("headwise::TransformerDecoderLayer::backward: grad_output: "
                                 "expected shape [2, 3, 8], got [2, 3]"));
    CHECK_NOTHROW(layer.backward(f, f.output));
}

TEST_CASE("the decoder layer's options are checked, and with_projection reaches both attentions",
          "[decoder][errors]") {
    const std::string ctor = "headwise::TransformerDecoderLayer::TransformerDecoderLayer: ";
    TransformerDecoderLayerOptions o = tiny_options();
    o.d_model = 8;
    auto fails = [&](const TransformerDecoderLayerOptions& bad, const std::string& message) {
        CAPTURE(message);
        REQUIRE_THROWS_AS(TransformerDecoderLayer<float>(bad), std::invalid_argument);
        REQUIRE_THROWS_WITH(TransformerDecoderLayer<float>(bad), ctor + message);
    };
    TransformerDecoderLayerOptions bad = o;
    bad.nhead = 3;
    fails(bad, "options.nhead: must be positive and divide d_model = 8, got 3");
    bad = o;
    bad.d_model = 0;
    fails(bad, "options.d_model: must be positive, got 0");
    bad = o;
    bad.dim_feedforward = 0;
    fails(bad, "options.dim_feedforward: must be positive, got 0");
    bad = o;
    bad.dropout = 1.0;
    fails(bad, "options.dropout: must be in [0, 1), got 1");
    bad = o;
    bad.layer_norm_eps = -1e-5;
    fails(bad, "options.layer_norm_eps: must be finite and non-negative, got -1e-05");
    bad = o;
    bad.activation = static_cast<Activation>(42);
    fails(bad, "options.activation: must be relu or gelu, got Activation(42)");
    bad = o;
    bad.projection = static_cast<Projection>(42);
    fails(bad, "options.projection: must be fused, separate or per_head, got Projection(42)");

    TransformerDecoderLayer<float> layer(o, 1);
    const auto bogus = static_cast<Projection>(42);
    REQUIRE_THROWS_WITH(layer.with_projection(bogus),
                        "headwise::TransformerDecoderLayer::with_projection: projection: must be "
                        "fused, separate or per_head, got Projection(42)");
    CHECK(layer.options().projection == Projection::fused);  // unchanged
    layer.with_projection(Projection::per_head);
    CHECK(layer.options().projection == Projection::per_head);
    CHECK(layer.self_attn().projection() == Projection::per_head);
    CHECK(layer.multihead_attn().projection() == Projection::per_head);
}

}  // namespace test_transformer_decoder_layer
