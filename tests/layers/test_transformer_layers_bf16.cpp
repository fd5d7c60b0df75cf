// SPDX-License-Identifier: MIT
// TransformerEncoderLayer, TransformerDecoderLayer and SwiGLU in Precision::bf16: outputs within
// 1e-2 relative of float on every golden case of tests/golden/encoder and tests/golden/decoder,
// every projection; every sub-module switched; the switch back to float; the errors.
#include <headwise/io/npy.hpp>
#include <headwise/layers/swiglu.hpp>
#include <headwise/layers/transformer_decoder_layer.hpp>
#include <headwise/layers/transformer_encoder_layer.hpp>
#include <headwise/precision.hpp>

#include <algorithm>  // std::max
#include <cstdio>     // std::printf
#include <random>     // std::mt19937_64
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/golden.hpp"
#include "support/golden_layers.hpp"
#include "support/instantiations.hpp"
#include "support/projections.hpp"
#include "support/relative_error.hpp"
#include "support/training_golden.hpp"

namespace test_transformer_layers_bf16 {

using namespace headwise;
using headwise::test::cast;
using headwise::test::kProjections;
using headwise::test::relative_error;

namespace {

/// bf16 has 8 significant bits (unit roundoff 2^-8 = 3.9e-3); the accuracy target.
constexpr double kBf16Tolerance = 1e-2;

StateDict<float> float_dict(const StateDict<double>& d) {
    StateDict<float> out;
    for (const auto& entry : d) out.emplace(entry.first, cast<float>(entry.second));
    return out;
}

/// A golden encoder case (tests/golden/encoder/<name>) in float: the layer's options and
/// parameters, its input and masks.
struct EncoderCase {
    TransformerEncoderLayerOptions options;
    StateDict<float> state;
    Tensor<float> x;
    AttentionMasks<float> masks;
};

EncoderCase load_encoder_case(const std::string& name) {
    const test::EncoderCase g = test::load_encoder_case(name);
    EncoderCase c;
    c.options = g.options;
    c.state = float_dict(g.state);
    c.x = cast<float>(g.x);
    c.masks.attn_mask = g.attn_mask;
    c.masks.key_padding_mask = g.key_padding_mask;
    return c;
}

/// A golden decoder case (tests/golden/decoder/<name>, parameters in decoder/params) in float.
struct DecoderCase {
    TransformerDecoderLayerOptions options;
    StateDict<float> state;
    Tensor<float> tgt, memory;
    AttentionMasks<float> tgt_masks, memory_masks;
};

DecoderCase load_decoder_case(const std::string& name) {
    const test::DecoderCase g = test::load_decoder_case(name);
    DecoderCase c;
    c.options = g.options;
    c.state = float_dict(g.state);
    c.tgt = cast<float>(g.tgt);
    c.memory = cast<float>(g.memory);
    c.tgt_masks.key_padding_mask = g.tgt_key_padding_mask;
    c.tgt_masks.attn_mask = g.tgt_mask;
    if (g.tgt_mask_float.numel() > 0) c.tgt_masks.attn_bias = cast<float>(g.tgt_mask_float);
    c.memory_masks.key_padding_mask = g.memory_key_padding_mask;
    c.memory_masks.attn_mask = g.memory_mask;
    return c;
}

void print_summary(const char* what, const std::vector<double>& errors) {
    std::printf("%s bf16 vs float: median %.3g, max %.3g relative over %zu (case, projection)\n",
                what, test::median(errors), *std::max_element(errors.begin(), errors.end()),
                errors.size());
}

}  // namespace

TEST_CASE("the encoder layer in bf16 is within 1e-2 of float on every golden case",
          "[encoder][bf16]") {
    std::vector<double> errors;
    for (const char* name : {"post_norm_relu", "pre_norm_relu", "post_norm_gelu_masks",
                             "pre_norm_gelu_masks", "pre_norm_gelu_unbatched"}) {
        const EncoderCase c = load_encoder_case(name);
        for (Projection projection : kProjections) {
            CAPTURE(name, to_string(projection));
            TransformerEncoderLayerOptions o = c.options;
            o.projection = projection;
            TransformerEncoderLayer<float> layer(o, 99);
            layer.load_state_dict(c.state);
            layer.eval();
            const Tensor<float> f32 = layer.forward(c.x, c.masks).output;

            CHECK(&layer.with_precision(Precision::bf16) == &layer);
            CHECK(layer.precision() == Precision::bf16);
            CHECK(layer.self_attn().precision() == Precision::bf16);
            CHECK(layer.linear1().precision() == Precision::bf16);
            CHECK(layer.linear2().precision() == Precision::bf16);
            const Tensor<float> bf16 = layer.forward(c.x, c.masks).output;
            const double err = relative_error(bf16, f32);
            CHECK(err > 0);  // the products did run in bf16
            CHECK(err <= kBf16Tolerance);
            errors.push_back(err);

            layer.with_precision(Precision::float32);
            CHECK(layer.self_attn().precision() == Precision::float32);
            CHECK(layer.linear1().precision() == Precision::float32);
            CHECK(layer.linear2().precision() == Precision::float32);
            CHECK(relative_error(layer.forward(c.x, c.masks).output, f32) == 0.0);
        }
    }
    print_summary("TransformerEncoderLayer", errors);
}

TEST_CASE("the decoder layer in bf16 is within 1e-2 of float on every golden case",
          "[decoder][bf16]") {
    std::vector<double> errors;
    for (const char* name : {"post_norm_relu", "pre_norm_gelu"}) {
        const DecoderCase c = load_decoder_case(name);
        for (Projection projection : kProjections) {
            CAPTURE(name, to_string(projection));
            TransformerDecoderLayerOptions o = c.options;
            o.projection = projection;
            TransformerDecoderLayer<float> layer(o, 99);
            layer.load_state_dict(c.state);
            layer.eval();
            const Tensor<float> f32 =
                layer.forward(c.tgt, c.memory, c.tgt_masks, c.memory_masks).output;

            layer.with_precision(Precision::bf16);
            CHECK(layer.precision() == Precision::bf16);
            CHECK(layer.self_attn().precision() == Precision::bf16);
            CHECK(layer.multihead_attn().precision() == Precision::bf16);
            CHECK(layer.linear1().precision() == Precision::bf16);
            CHECK(layer.linear2().precision() == Precision::bf16);
            const Tensor<float> bf16 =
                layer.forward(c.tgt, c.memory, c.tgt_masks, c.memory_masks).output;
            const double err = relative_error(bf16, f32);
            CHECK(err > 0);
            CHECK(err <= kBf16Tolerance);
            errors.push_back(err);

            layer.with_precision(Precision::float32);
            CHECK(layer.multihead_attn().precision() == Precision::float32);
            CHECK(relative_error(layer.forward(c.tgt, c.memory, c.tgt_masks, c.memory_masks).output,
                                 f32) == 0.0);
        }
    }
    print_summary("TransformerDecoderLayer", errors);
}

TEST_CASE("SwiGLU in bf16 is within 1e-2 of float and switches its three Linears",
          "[swiglu][bf16]") {
    std::mt19937_64 rng(5);
    SwiGLU<float> mlp(48, 128, rng);
    mlp.eval();
    const auto x = Tensor<float>::randn({3, 7, 48}, rng);
    const Tensor<float> f32 = mlp.forward(x).output;
    mlp.with_precision(Precision::bf16);
    CHECK(mlp.precision() == Precision::bf16);
    CHECK(mlp.gate_proj().precision() == Precision::bf16);
    CHECK(mlp.up_proj().precision() == Precision::bf16);
    CHECK(mlp.down_proj().precision() == Precision::bf16);
    const double err = relative_error(mlp.forward(x).output, f32);
    CHECK(err > 0);
    CHECK(err <= kBf16Tolerance);
    mlp.with_precision(Precision::float32);
    CHECK(relative_error(mlp.forward(x).output, f32) == 0.0);
}

TEST_CASE("the layers' with_precision refuses double and unknown values, changing nothing",
          "[encoder][decoder][swiglu][bf16]") {
    TransformerEncoderLayerOptions eo;
    eo.d_model = 8;
    eo.nhead = 2;
    eo.dim_feedforward = 16;
    eo.dropout = 0.0;
    TransformerDecoderLayerOptions dopt;
    dopt.d_model = 8;
    dopt.nhead = 2;
    dopt.dim_feedforward = 16;
    dopt.dropout = 0.0;
    const auto bad = static_cast<Precision>(7);

    TransformerEncoderLayer<double> enc_d(eo, 1);
    CHECK_THROWS_WITH(
        enc_d.with_precision(Precision::bf16),
        ContainsSubstring("headwise::TransformerEncoderLayer::with_precision: precision") &&
            ContainsSubstring("double"));
    CHECK(enc_d.precision() == Precision::float32);
    CHECK_NOTHROW(enc_d.with_precision(Precision::float32));

    TransformerEncoderLayer<float> enc(eo, 1);
    enc.with_precision(Precision::bf16);
    CHECK_THROWS_WITH(
        enc.with_precision(bad),
        ContainsSubstring("headwise::TransformerEncoderLayer::with_precision: precision") &&
            ContainsSubstring("got 7"));
    CHECK(enc.precision() == Precision::bf16);  // nothing changed
    CHECK(enc.self_attn().precision() == Precision::bf16);
    CHECK(enc.linear1().precision() == Precision::bf16);
    CHECK(enc.linear2().precision() == Precision::bf16);
    // Training mode in bf16 is mixed-precision training (Linear and MultiheadAttention in
    // training mode): forward and backward within bf16's tolerance of the float layer's.
    std::mt19937_64 rng(3);
    const auto x = Tensor<float>::randn({2, 3, 8}, rng);
    const auto dy = Tensor<float>::randn({2, 3, 8}, rng);
    enc.train();
    TransformerEncoderLayer<float> enc_f = enc;
    enc_f.with_precision(Precision::float32);
    const auto f = enc.forward(x);
    const auto f_f = enc_f.forward(x);
    CHECK(relative_error(f.output, f_f.output) <= kBf16Tolerance);
    CHECK(relative_error(enc.backward(f, dy), enc_f.backward(f_f, dy)) <= 2e-2);

    TransformerDecoderLayer<double> dec_d(dopt, 1);
    CHECK_THROWS_WITH(
        dec_d.with_precision(Precision::bf16),
        ContainsSubstring("headwise::TransformerDecoderLayer::with_precision: precision"));
    CHECK(dec_d.precision() == Precision::float32);
    TransformerDecoderLayer<float> dec(dopt, 1);
    CHECK_THROWS_AS(dec.with_precision(bad), std::invalid_argument);
    CHECK(dec.precision() == Precision::float32);
    CHECK(dec.self_attn().precision() == Precision::float32);
    CHECK(dec.multihead_attn().precision() == Precision::float32);
    dec.with_precision(Precision::bf16);
    TransformerDecoderLayer<float> dec_f = dec;
    dec_f.with_precision(Precision::float32);
    CHECK(relative_error(dec.forward(x, x).output, dec_f.forward(x, x).output) <=
          kBf16Tolerance);  // training mode

    SwiGLU<double> mlp_d(8, 16, rng);
    CHECK_THROWS_WITH(mlp_d.with_precision(Precision::bf16),
                      ContainsSubstring("headwise::SwiGLU::with_precision: precision"));
    CHECK(mlp_d.gate_proj().precision() == Precision::float32);
    SwiGLU<float> mlp(8, 16, rng);
    CHECK_THROWS_AS(mlp.with_precision(bad), std::invalid_argument);
    CHECK(mlp.precision() == Precision::float32);
}

}  // namespace test_transformer_layers_bf16
