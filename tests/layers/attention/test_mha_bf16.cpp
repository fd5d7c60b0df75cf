// SPDX-License-Identifier: MIT
// MultiheadAttention<float> in Precision::bf16: outputs (and weights) within 1e-2 relative of
// the float module on every golden case (tests/golden/mha), every projection; decode in bf16
// against forward in bf16; the switch back to float; the errors. Training in bf16:
// test_mha_bf16_training.
#include <headwise/io/npy.hpp>
#include <headwise/layers/attention/multihead_attention.hpp>

#include <algorithm>  // std::max
#include <cmath>      // std::abs
#include <map>        // std::map
#include <random>     // std::mt19937_64
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string

#include "support/catch.hpp"
#include "support/golden.hpp"
#include "support/golden_attention.hpp"
#include "support/instantiations.hpp"
#include "support/projections.hpp"
#include "support/relative_error.hpp"

namespace test_mha_bf16 {

using headwise::Index;
using headwise::Precision;
using headwise::Projection;
using headwise::Shape;
using headwise::Tensor;
using headwise::test::golden_attention_options;
using headwise::test::GoldenCase;
using headwise::test::kProjections;

using headwise::test::relative_error;
namespace {

/// bf16 has 8 significant bits (unit roundoff 2^-8 = 3.9e-3); the accuracy target.
constexpr double kBf16Tolerance = 1e-2;

Tensor<float> cast(const Tensor<double>& t) {
    Tensor<float> out(t.shape());
    for (Index i = 0; i < t.numel(); ++i) out.data()[i] = static_cast<float>(t.data()[i]);
    return out;
}

}  // namespace

TEST_CASE("MultiheadAttention in bf16 is within 1e-2 of float on every golden case",
          "[mha][bf16]") {
    const std::string name = GENERATE(from_range(headwise::test::golden_case_names()));
    const Projection projection = GENERATE(from_range(kProjections));
    CAPTURE(name, headwise::to_string(projection));
    const GoldenCase c = headwise::test::load_golden_case(name);
    headwise::MultiheadAttention<float> mha(golden_attention_options(c, projection), 1);
    std::map<std::string, Tensor<float>> sd;
    for (const auto& [key, tensor] : c.state_dict()) sd.emplace(key, cast(tensor));
    mha.load_state_dict(sd);
    mha.eval();

    headwise::AttentionMasks<float> m;
    if (c.masks.count("attn_mask")) m.attn_mask = c.mask("attn_mask");
    if (c.tensors.count("attn_bias")) m.attn_bias = cast(c.tensor("attn_bias"));
    if (c.masks.count("key_padding_mask")) m.key_padding_mask = c.mask("key_padding_mask");
    m.is_causal = c.flag("is_causal");
    m.need_weights = c.flag("need_weights");
    m.average_attn_weights = c.flag("average_attn_weights");
    const Tensor<float> query = cast(c.tensor("query"));
    const Tensor<float> key = cast(c.tensor("key"));
    const Tensor<float> value = cast(c.tensor("value"));
    const Tensor<float>& k = c.flag("self_attention") ? query : key;
    const Tensor<float>& v = c.flag("self_attention") ? query : c.flag("kv_same") ? key : value;

    const auto f32 = mha.forward(query, k, v, m);
    mha.with_precision(Precision::bf16);
    const auto bf16 = mha.forward(query, k, v, m);
    const double err = relative_error(bf16.output, f32.output);
    CAPTURE(err);
    CHECK(err <= kBf16Tolerance);
    CHECK(err > 0.0);  // the bf16 path ran
    if (m.need_weights)
        CHECK(relative_error(bf16.attn_weights, f32.attn_weights) <= kBf16Tolerance);

    // Back to float: the float path again, bit for bit.
    mha.with_precision(Precision::float32);
    CHECK(relative_error(mha.forward(query, k, v, m).output, f32.output) == 0.0);
}

TEST_CASE("MultiheadAttention decode in bf16 agrees with its forward in bf16", "[mha][bf16]") {
    headwise::MultiheadAttentionOptions opt;
    opt.embed_dim = 32;
    opt.num_heads = 4;
    const Projection projection = GENERATE(from_range(kProjections));
    CAPTURE(headwise::to_string(projection));
    opt.projection = projection;
    headwise::MultiheadAttention<float> mha(opt, 9);
    mha.eval();
    std::mt19937_64 rng(11);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    Tensor<float> x(Shape{2, 6, 32});
    for (float& e : x) e = u(rng);
    headwise::AttentionMasks<float> causal;
    causal.is_causal = true;
    const Tensor<float> y_f32 = mha.forward(x, x, x, causal).output;
    mha.with_precision(Precision::bf16);
    const Tensor<float> y_fwd = mha.forward(x, x, x, causal).output;
    auto cache = mha.make_kv_cache(2, 6);
    const Tensor<float> y_dec = mha.decode(x, cache);
    // The same bf16 products in another order of accumulation.
    CHECK(relative_error(y_dec, y_fwd) <= 1e-5);
    CHECK(relative_error(y_fwd, y_f32) <= kBf16Tolerance);
}

TEST_CASE("MultiheadAttention<double> refuses bf16", "[mha][bf16]") {
    headwise::MultiheadAttentionOptions opt;
    opt.embed_dim = 8;
    opt.num_heads = 2;
    headwise::MultiheadAttention<double> d(opt, 1);
    CHECK_THROWS_AS(d.with_precision(Precision::bf16), std::invalid_argument);
    CHECK(d.precision() == Precision::float32);
}

TEST_CASE("a bf16 KV cache takes half the memory and decodes within 1e-2 of a float one",
          "[mha][bf16][kv_cache]") {
    headwise::MultiheadAttentionOptions opt;
    opt.embed_dim = 32;
    opt.num_heads = 4;
    opt.num_kv_heads = GENERATE(4, 2);
    opt.add_bias_kv = GENERATE(false, true);
    opt.add_zero_attn = opt.add_bias_kv;
    const bool bf16_module = GENERATE(false, true);
    CAPTURE(opt.num_kv_heads, opt.add_bias_kv, bf16_module);
    headwise::MultiheadAttention<float> mha(opt, 13);
    mha.eval();
    if (bf16_module) mha.with_precision(Precision::bf16);
    std::mt19937_64 rng(17);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    Tensor<float> prompt(Shape{2, 5, 32}), step(Shape{2, 1, 32});
    for (float& e : prompt) e = u(rng);
    auto f32 = mha.make_kv_cache(2, 9);
    auto half = mha.make_kv_cache(2, 9, Precision::bf16);
    CHECK(half.precision() == Precision::bf16);
    CHECK(half.memory_bytes() * 2 == f32.memory_bytes());
    // A prompt chunk, then one token at a time.
    CHECK(relative_error(mha.decode(prompt, half), mha.decode(prompt, f32)) <= kBf16Tolerance);
    for (int t = 0; t < 4; ++t) {
        for (float& e : step) e = u(rng);
        const Tensor<float> y_half = mha.decode(step, half), y_f32 = mha.decode(step, f32);
        const double err = relative_error(y_half, y_f32);
        CAPTURE(t, err);
        CHECK(err <= kBf16Tolerance);
        CHECK(err > 0.0);  // the bf16 cache was read
    }
    CHECK(half.size() == 9);
    CHECK(half.keys().numel() == 0);
}

TEST_CASE("a KVCache<double> refuses bf16", "[mha][bf16][kv_cache]") {
    try {
        headwise::KVCache<double> cache(1, 4, 8, 2, 4, Precision::bf16);
        FAIL("no exception");
    } catch (const std::invalid_argument& e) {
        CHECK(std::string(e.what()).find("headwise::KVCache::KVCache: precision") == 0);
    }
}

}  // namespace test_mha_bf16
