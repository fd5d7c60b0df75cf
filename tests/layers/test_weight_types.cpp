// SPDX-License-Identifier: MIT
// Weights stored in GGUF types through the module contract (Module::with_weight_type and the
// WeightMatrix holder): Linear's products equal ops::quant_matmul on the blocks quant::quantize_row
// writes, bit for bit, in both of its schemes; the bytes; the refusals (training, double, types
// and row lengths) before anything changes; the way back to float; loads quantizing again; and
// MultiheadAttention and SwiGLU switched by the one walk, their products through the same holder.
#include <headwise/layers/attention/multihead_attention.hpp>
#include <headwise/layers/linear.hpp>
#include <headwise/layers/swiglu.hpp>
#include <headwise/ops/quant_matmul.hpp>
#include <headwise/quant/dequantize.hpp>
#include <headwise/quant/quantize.hpp>

#include <cmath>      // std::fabs
#include <cstdint>    // std::uint8_t
#include <random>     // std::mt19937_64
#include <stdexcept>  // std::invalid_argument, std::logic_error
#include <string>     // std::string
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/released_weights.hpp"

namespace test_weight_types {

using headwise::FloatWeights;
using headwise::Index;
using headwise::Linear;
using headwise::MultiheadAttention;
using headwise::Precision;
using headwise::Shape;
using headwise::Tensor;
using headwise::quant::Type;
using headwise::test::same_bits;

namespace {

Tensor<float> random_tensor(const Shape& shape, std::mt19937_64& rng) {
    std::normal_distribution<float> normal;
    Tensor<float> t(shape);
    for (float& v : t) v = normal(rng);
    return t;
}

/// W [rows, cols] quantized row by row, as the holder should store it.
std::vector<std::uint8_t> blocks_of(Type type, const Tensor<float>& w) {
    const Index rows = w.shape()[0], cols = w.shape()[1];
    const std::uint64_t row_bytes = headwise::quant::row_bytes(type, cols);
    std::vector<std::uint8_t> out(static_cast<std::size_t>(row_bytes * rows));
    for (Index r = 0; r < rows; ++r)
        headwise::quant::quantize_row(type, w.data() + r * cols, out.data() + r * row_bytes, cols);
    return out;
}

/// Y = X W^T + b by ops::quant_matmul on `blocks`.
Tensor<float> reference(Type type, const std::vector<std::uint8_t>& blocks, Index out, Index in,
                        const Tensor<float>& x, const float* bias) {
    headwise::ops::QuantMatrix W;
    W.type = type;
    W.data = blocks.data();
    W.rows = out;
    W.cols = in;
    W.bytes = blocks.size();
    Tensor<float> y(Shape{x.shape()[0], out});
    headwise::ops::QuantMatmulWorkspace workspace;
    headwise::ops::quant_matmul(x.matrix(), W, bias, y.matrix(), workspace);
    return y;
}

/// Blocks dequantized into a [rows, cols] tensor.
Tensor<float> dequantized(Type type, const std::vector<std::uint8_t>& blocks, Index rows,
                          Index cols) {
    Tensor<float> w(Shape{rows, cols});
    const std::uint64_t row_bytes = headwise::quant::row_bytes(type, cols);
    for (Index r = 0; r < rows; ++r)
        headwise::quant::dequantize_row(type, blocks.data() + r * row_bytes, w.data() + r * cols,
                                        cols);
    return w;
}

}  // namespace

TEST_CASE("Linear stored in each GGUF type multiplies as quant_matmul on its blocks",
          "[weight_types][linear]") {
    const Type type =
        GENERATE(Type::q8_0, Type::q4_0, Type::q4_1, Type::q5_0, Type::q5_1, Type::f16, Type::bf16);
    const FloatWeights release = GENERATE(FloatWeights::keep, FloatWeights::release);
    CAPTURE(headwise::quant::describe_type(static_cast<std::uint32_t>(type)),
            release == FloatWeights::release);
    constexpr Index in = 64, out = 24;
    std::mt19937_64 rng(7);
    Linear<float> layer(in, out, /*bias=*/true, rng);
    layer.eval();
    const Tensor<float> w(layer.weight());
    const std::vector<std::uint8_t> blocks = blocks_of(type, w);
    const std::size_t float_bytes = layer.memory_bytes();
    layer.with_weight_type(type, release);
    CHECK(layer.weight_type() == type);
    CHECK(layer.float_weights_released() == (release == FloatWeights::release));
    // Both schemes: 8-bit activations (N < 32) and dequantized panels (N >= 32).
    for (Index n : {Index{1}, Index{3}, Index{40}}) {
        CAPTURE(n);
        const Tensor<float> x = random_tensor(Shape{n, in}, rng);
        CHECK(
            same_bits(layer.forward(x), reference(type, blocks, out, in, x, layer.bias().data())));
    }
    const std::size_t bias_bytes = out * sizeof(float);
    const std::size_t stored_bytes = blocks.size() + bias_bytes;
    CHECK(layer.memory_bytes() ==
          (release == FloatWeights::release ? stored_bytes : float_bytes + blocks.size()));
    if (type == Type::q4_1 && release == FloatWeights::release)  // <= 0.16x the float weight
        CHECK(static_cast<double>(blocks.size()) <= 0.16 * static_cast<double>(in * out * 4));

    // Training refused, naming the type, before anything changes.
    const Tensor<float> x = random_tensor(Shape{2, in}, rng);
    const Tensor<float> dy = random_tensor(Shape{2, out}, rng);
    const std::string name = headwise::quant::block_format(type).name;
    CHECK_THROWS_MATCHES(layer.backward(x, dy), std::logic_error,
                         Catch::Matchers::Message("headwise::Linear::backward: the weight is "
                                                  "stored as " +
                                                  name +
                                                  ", which is for inference only "
                                                  "(with_precision(Precision::float32) brings "
                                                  "float weights back, dequantized)"));
    // Back to float: released, the stored values dequantized exactly; kept, the float weight.
    layer.with_precision(Precision::float32);
    CHECK(layer.weight_type() == Type::f32);
    CHECK_FALSE(layer.float_weights_released());
    CHECK(same_bits(Tensor<float>(layer.weight()),
                    release == FloatWeights::release ? dequantized(type, blocks, out, in) : w));
    CHECK(layer.memory_bytes() == float_bytes);
    (void)layer.backward(x, dy);  // trainable again
}

TEST_CASE("with_weight_type refuses before anything changes", "[weight_types][errors]") {
    std::mt19937_64 rng(9);
    Linear<float> odd(48, 8, true, rng);  // 48: no multiple of Q4_K's 256, but of 32... and 16
    Linear<float> small(40, 8, true, rng);
    CHECK_THROWS_MATCHES(
        small.with_weight_type(Type::q8_0), std::invalid_argument,
        Catch::Matchers::Message("headwise::Linear::with_weight_type: weight: rows of a "
                                 "multiple of 32 values (Q8_0 blocks), got rows of 40"));
    CHECK(small.weight_type() == Type::f32);
    CHECK_THROWS_MATCHES(
        odd.with_weight_type(Type::q4_k), std::invalid_argument,
        Catch::Matchers::Message("headwise::Linear::with_weight_type: weight: rows of a "
                                 "multiple of 256 values (Q4_K blocks), got rows of 48"));
    CHECK_THROWS_WITH(
        odd.with_weight_type(Type::f32),
        Catch::Matchers::StartsWith("headwise::Linear::with_weight_type: type: F16, BF16, Q8_0, "
                                    "Q4_0, Q4_1, Q5_0, Q5_1, Q4_K or Q6_K, got F32 (0)"));
    CHECK_THROWS_WITH(odd.with_weight_type(static_cast<Type>(99)),
                      Catch::Matchers::EndsWith("got unknown (99)"));
    CHECK_THROWS_WITH(odd.with_weight_type(Type::q8_0, static_cast<FloatWeights>(7)),
                      Catch::Matchers::Contains("float_weights"));
    CHECK(odd.weight_type() == Type::f32);
    Linear<double> d(64, 8, true, rng);
    CHECK_THROWS_MATCHES(d.with_weight_type(Type::q8_0), std::invalid_argument,
                         Catch::Matchers::Message("headwise::Linear::with_weight_type: type: "
                                                  "a float module (Linear<float>), got "
                                                  "Linear<double>"));
}

TEST_CASE("A load into a stored module with kept float weights quantizes again",
          "[weight_types][load]") {
    std::mt19937_64 rng(11);
    Linear<float> a(64, 16, true, rng), b(64, 16, true, rng);
    a.with_weight_type(Type::q4_1);
    a.load_state_dict(b.state_dict());
    const Tensor<float> x = random_tensor(Shape{2, 64}, rng);
    const std::vector<std::uint8_t> blocks = blocks_of(Type::q4_1, Tensor<float>(b.weight()));
    CHECK(same_bits(a.forward(x), reference(Type::q4_1, blocks, 16, 64, x, b.bias().data())));
}

TEST_CASE("MultiheadAttention and SwiGLU are switched by the one walk",
          "[weight_types][attention][swiglu]") {
    std::mt19937_64 rng(13);
    headwise::MultiheadAttentionOptions o;
    o.embed_dim = 64;
    o.num_heads = 4;
    o.num_kv_heads = GENERATE(4, 2);
    // Every GEMM plan: blocks of the in-projection at offsets other than 0 too.
    o.projection = GENERATE(headwise::Projection::fused, headwise::Projection::separate,
                            headwise::Projection::per_head);
    CAPTURE(o.num_kv_heads, static_cast<int>(o.projection));
    MultiheadAttention<float> stored(o, 3), reference_mha(o, 3);
    stored.eval();
    reference_mha.eval();
    stored.with_weight_type(Type::q8_0, FloatWeights::release);
    CHECK(stored.weight_type() == Type::q8_0);
    // The reference: float weights equal to the stored ones dequantized.
    reference_mha.with_weight_type(Type::q8_0, FloatWeights::release);
    reference_mha.with_precision(Precision::float32);
    // Prefill (the dequantized-panel scheme: float activations) agrees with float to rounding.
    const Tensor<float> x = random_tensor(Shape{1, 40, 64}, rng);
    headwise::AttentionMasks<float> masks;
    masks.is_causal = true;
    const Tensor<float> y = stored.forward(x, x, x, masks).output;
    const Tensor<float> y_ref = reference_mha.forward(x, x, x, masks).output;
    double worst = 0;
    for (Index i = 0; i < y.numel(); ++i)
        worst = std::max(worst, static_cast<double>(std::fabs(y.data()[i] - y_ref.data()[i])));
    CHECK(worst < 1e-4);
    // Decode (8-bit activations) to the activation rounding.
    auto cache = stored.make_kv_cache(1, 8);
    auto cache_ref = reference_mha.make_kv_cache(1, 8);
    const Tensor<float> t = random_tensor(Shape{1, 1, 64}, rng);
    const Tensor<float> d = stored.decode(t, cache);
    const Tensor<float> d_ref = reference_mha.decode(t, cache_ref);
    double scale = 0, err = 0;
    for (Index i = 0; i < d.numel(); ++i) {
        scale = std::max(scale, static_cast<double>(std::fabs(d_ref.data()[i])));
        err = std::max(err, static_cast<double>(std::fabs(d.data()[i] - d_ref.data()[i])));
    }
    CHECK(err < 0.03 * scale);
    CHECK(err > 0);  // the activations were rounded: it did run the 8-bit scheme
    stored.train();
    const headwise::AttentionForward<float> fwd = stored.forward(x, x, x, masks);
    CHECK_THROWS_WITH(stored.backward(fwd, y),
                      Catch::Matchers::StartsWith("headwise::MultiheadAttention::backward: the "
                                                  "weight is stored as Q8_0"));

    headwise::SwiGLU<float> mlp(64, 96, /*bias=*/false, rng);
    mlp.with_weight_type(Type::q4_0);
    CHECK(mlp.gate_proj().weight_type() == Type::q4_0);
    CHECK(mlp.up_proj().weight_type() == Type::q4_0);
    CHECK(mlp.down_proj().weight_type() == Type::q4_0);
    mlp.train();
    const Tensor<float> xm = random_tensor(Shape{2, 64}, rng);
    const auto f = mlp.forward(xm);
    const Tensor<float> dym = random_tensor(Shape{2, 64}, rng);
    CHECK_THROWS_WITH(
        mlp.backward(f, dym),
        Catch::Matchers::StartsWith("headwise::SwiGLU::backward: the weight is stored as Q4_0"));
}

}  // namespace test_weight_types
