// SPDX-License-Identifier: MIT
// TransformerEncoderLayer, TransformerDecoderLayer and SwiGLU released in bf16
// (with_precision(Precision::bf16, FloatWeights::release)): every sub-module released, forward
// (training and evaluation) as keep bit for bit, the refused calls (std::logic_error, nothing
// changed), a partly released layer refusing keep before switching anything, the way back to
// float32, and double refused.
#include <headwise/bf16.hpp>
#include <headwise/layers/swiglu.hpp>
#include <headwise/layers/transformer_decoder_layer.hpp>
#include <headwise/layers/transformer_encoder_layer.hpp>
#include <headwise/precision.hpp>

#include <cstddef>    // std::size_t
#include <random>     // std::mt19937_64
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string

#include "support/catch.hpp"
#include "support/projections.hpp"
#include "support/released_weights.hpp"

namespace test_transformer_layers_bf16_release {

using namespace headwise;
using headwise::test::check_refused;
using headwise::test::kProjections;
using headwise::test::same_bits;

namespace {

TransformerEncoderLayerOptions encoder_options(Projection projection) {
    TransformerEncoderLayerOptions o;
    o.d_model = 16;
    o.nhead = 4;
    o.dim_feedforward = 32;
    o.dropout = 0.2;  // a training forward draws the same masks in both copies
    o.projection = projection;
    return o;
}

/// The float state dict with every projection weight (a key ending in "weight" of a Linear or
/// attention projection; norms excluded) rounded to bf16: what a released layer widens back to.
StateDict<float> rounded_projections(StateDict<float> sd) {
    for (auto& [name, value] : sd)
        if (name.find("norm") == std::string::npos && name.find("weight") != std::string::npos)
            for (float& v : value) v = round_to_bf16(v);
    return sd;
}

}  // namespace

TEST_CASE(
    "TransformerEncoderLayer released forwards as keep bit for bit, refuses what needs "
    "float weights, and returns to float32",
    "[encoder][bf16][release]") {
    const Projection projection = GENERATE(from_range(kProjections));
    CAPTURE(to_string(projection));
    TransformerEncoderLayer<float> keep(encoder_options(projection), 41);
    const StateDict<float> float_state = keep.state_dict();
    TransformerEncoderLayer<float> released = keep;
    keep.with_precision(Precision::bf16);
    released.with_precision(Precision::bf16, FloatWeights::release);
    CHECK(released.precision() == Precision::bf16);
    CHECK(released.float_weights_released());
    CHECK(released.self_attn().float_weights_released());
    CHECK(released.linear1().float_weights_released());
    CHECK(released.linear2().float_weights_released());
    const std::size_t bytes = released.self_attn().memory_bytes() +
                              released.linear1().memory_bytes() + released.linear2().memory_bytes();
    const std::size_t W = 4 * 16 * 16 + 2 * 16 * 32, b = 4 * 16 + 32 + 16;
    CHECK(bytes == 2 * W + 4 * b);

    std::mt19937_64 rng(42);
    const auto x = Tensor<float>::randn({2, 5, 16}, rng);
    AttentionMasks<float> masks;
    masks.is_causal = true;
    CHECK(same_bits(released.forward(x, masks).output, keep.forward(x, masks).output));  // training
    keep.eval();
    released.eval();
    const Tensor<float> y = keep.forward(x, masks).output;
    CHECK(same_bits(released.forward(x, masks).output, y));

    // Refused, before anything changes.
    released.train();
    const auto fwd = released.forward(x);
    released.eval();
    check_refused("headwise::TransformerEncoderLayer::backward",
                  [&] { released.backward(fwd, fwd.output); });
    CHECK(released.norm2().grad_dict().at("weight").data()[0] == 0.0f);  // backward wrote nothing
    check_refused("headwise::MultiheadAttention::visit_parameters",
                  [&] { (void)released.state_dict(); });
    check_refused("headwise::MultiheadAttention::visit_parameters",
                  [&] { released.load_state_dict(float_state); });
    check_refused("headwise::TransformerEncoderLayer::with_precision",
                  [&] { released.with_precision(Precision::bf16, FloatWeights::keep); });
    CHECK(released.float_weights_released());
    CHECK(same_bits(released.forward(x, masks).output, y));

    // A layer with one Linear released refuses keep before switching anything.
    TransformerEncoderLayer<float> partly(encoder_options(projection), 41);
    partly.linear2().with_precision(Precision::bf16, FloatWeights::release);
    CHECK(partly.float_weights_released());
    check_refused("headwise::TransformerEncoderLayer::with_precision",
                  [&] { partly.with_precision(Precision::bf16); });
    CHECK(partly.self_attn().precision() == Precision::float32);
    CHECK(partly.linear1().precision() == Precision::float32);
    partly.with_precision(Precision::bf16, FloatWeights::release);
    partly.eval();
    CHECK(same_bits(partly.forward(x, masks).output, y));

    // The way back: the float layer of the rounded weights, which trains.
    released.with_precision(Precision::float32);
    CHECK_FALSE(released.float_weights_released());
    TransformerEncoderLayer<float> rounded(encoder_options(projection), 41);
    rounded.load_state_dict(rounded_projections(float_state));
    rounded.load_random_state(released.random_state());  // the dropout masks drawn next
    const StateDict<float> back = released.state_dict();
    for (const auto& [name, value] : rounded.state_dict()) {
        CAPTURE(name);
        CHECK(same_bits(back.at(name), value));
    }
    released.train();
    rounded.train();
    const auto a = released.forward(x), r = rounded.forward(x);
    CHECK(same_bits(a.output, r.output));
    const auto dy = Tensor<float>::randn({2, 5, 16}, rng);
    CHECK(same_bits(released.backward(a, dy), rounded.backward(r, dy)));
    const StateDict<float> grads = released.grad_dict();
    for (const auto& [name, grad] : rounded.grad_dict()) {
        CAPTURE(name);
        CHECK(same_bits(grads.at(name), grad));
    }
}

TEST_CASE("TransformerDecoderLayer released forwards as keep bit for bit and refuses backward",
          "[decoder][bf16][release]") {
    const Projection projection = GENERATE(from_range(kProjections));
    CAPTURE(to_string(projection));
    TransformerDecoderLayerOptions o;
    o.d_model = 16;
    o.nhead = 2;
    o.dim_feedforward = 24;
    o.dropout = 0.1;
    o.projection = projection;
    TransformerDecoderLayer<float> keep(o, 43);
    TransformerDecoderLayer<float> released = keep;
    keep.with_precision(Precision::bf16);
    released.with_precision(Precision::bf16, FloatWeights::release);
    CHECK(released.self_attn().float_weights_released());
    CHECK(released.multihead_attn().float_weights_released());
    CHECK(released.linear1().float_weights_released());
    CHECK(released.linear2().float_weights_released());
    std::mt19937_64 rng(44);
    const auto tgt = Tensor<float>::randn({2, 4, 16}, rng);
    const auto memory = Tensor<float>::randn({2, 6, 16}, rng);
    const auto fwd = released.forward(tgt, memory);  // training mode
    CHECK(same_bits(fwd.output, keep.forward(tgt, memory).output));
    keep.eval();
    released.eval();
    CHECK(same_bits(released.forward(tgt, memory).output, keep.forward(tgt, memory).output));
    check_refused("headwise::TransformerDecoderLayer::backward",
                  [&] { released.backward(fwd, fwd.output); });
    check_refused("headwise::TransformerDecoderLayer::with_precision",
                  [&] { released.with_precision(Precision::bf16); });
    CHECK(same_bits(released.forward(tgt, memory).output, keep.forward(tgt, memory).output));
    released.with_precision(Precision::float32);
    CHECK_FALSE(released.float_weights_released());
    released.train();
    const auto f = released.forward(tgt, memory);
    CHECK_NOTHROW(released.backward(f, f.output));
}

TEST_CASE("SwiGLU released forwards as keep bit for bit and refuses backward",
          "[swiglu][bf16][release]") {
    std::mt19937_64 rng(45);
    SwiGLU<float> keep(24, 40, rng);
    SwiGLU<float> released = keep;
    keep.with_precision(Precision::bf16);
    released.with_precision(Precision::bf16, FloatWeights::release);
    CHECK(released.gate_proj().float_weights_released());
    CHECK(released.up_proj().float_weights_released());
    CHECK(released.down_proj().float_weights_released());
    CHECK(released.gate_proj().memory_bytes() + released.up_proj().memory_bytes() +
              released.down_proj().memory_bytes() ==
          3 * 24 * 40 * sizeof(BFloat16));  // no biases: half of float's 3 * 24 * 40 * 4
    const auto x = Tensor<float>::randn({3, 24}, rng);
    const auto fwd = released.forward(x);
    CHECK(same_bits(fwd.output, keep.forward(x).output));
    check_refused("headwise::SwiGLU::backward", [&] { released.backward(fwd, fwd.output); });
    check_refused("headwise::SwiGLU::backward_into", [&] {
        Tensor<float> dx(x.shape());
        released.backward_into(fwd, fwd.output, dx);
    });
    check_refused("headwise::Linear::visit_parameters", [&] { (void)released.parameters(); });
    check_refused("headwise::SwiGLU::with_precision",
                  [&] { released.with_precision(Precision::bf16); });
    released.eval();
    keep.eval();
    CHECK(same_bits(released.forward(x).output, keep.forward(x).output));
    released.with_precision(Precision::float32);
    CHECK_FALSE(released.float_weights_released());
    CHECK(released.parameters().size() == 3);
}

TEST_CASE("the layers refuse bf16 release in double and unknown FloatWeights values",
          "[encoder][decoder][swiglu][bf16][release]") {
    TransformerEncoderLayer<double> enc(encoder_options(Projection::fused), 1);
    CHECK_THROWS_AS(enc.with_precision(Precision::bf16, FloatWeights::release),
                    std::invalid_argument);
    CHECK_FALSE(enc.float_weights_released());
    CHECK(enc.precision() == Precision::float32);
    std::mt19937_64 rng(46);
    SwiGLU<double> mlp(8, 16, rng);
    CHECK_THROWS_AS(mlp.with_precision(Precision::bf16, FloatWeights::release),
                    std::invalid_argument);
    CHECK_FALSE(mlp.float_weights_released());
    TransformerEncoderLayer<float> f(encoder_options(Projection::fused), 1);
    CHECK_THROWS_WITH(
        f.with_precision(Precision::bf16, static_cast<FloatWeights>(5)),
        ContainsSubstring("headwise::TransformerEncoderLayer::with_precision: float_weights: "
                          "FloatWeights::keep or FloatWeights::release, got 5"));
    CHECK(f.precision() == Precision::float32);
    CHECK(f.self_attn().precision() == Precision::float32);
}

}  // namespace test_transformer_layers_bf16_release
