// SPDX-License-Identifier: MIT
// Tests of MultiheadAttention's with_precision(Precision::bf16, FloatWeights::release)
// (layers/attention/multihead_attention.hpp): forward (training and evaluation) and decode (float
// and bf16 caches) as a keep-mode bf16 module bit for bit, every projection and projection
// layout; memory_bytes(); every call that needs the float weights refused with std::logic_error
// leaving the module usable; the way back to a trainable float module.
#include <headwise/bf16.hpp>
#include <headwise/layers/attention/multihead_attention.hpp>

#include <cstddef>    // std::size_t
#include <random>     // std::mt19937_64
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/projections.hpp"
#include "support/released_weights.hpp"

namespace test_mha_bf16_release {

using headwise::AttentionMasks;
using headwise::BFloat16;
using headwise::FloatWeights;
using headwise::Index;
using headwise::MultiheadAttention;
using headwise::MultiheadAttentionOptions;
using headwise::Precision;
using headwise::Projection;
using headwise::Shape;
using headwise::Tensor;
using headwise::test::check_refused;
using headwise::test::kProjections;
using headwise::test::same_bits;

namespace {

/// The projection weights' element count W and the other parameters' b of a module.
struct ParameterCounts {
    std::size_t weights = 0, others = 0;
};
ParameterCounts counts(const MultiheadAttention<float>& m) {
    ParameterCounts c;
    for (const auto& p : m.parameters()) {
        const bool weight =
            p.name.find("_weight") != std::string::npos || p.name == "out_proj.weight";
        (weight ? c.weights : c.others) += static_cast<std::size_t>(p.value.numel());
    }
    return c;
}

struct Config {
    const char* name;
    Index num_kv_heads;
    bool bias, bias_kv;
};
const std::vector<Config> kConfigs = {
    {"multi-head", 0, true, false},
    {"grouped-query, bias_k and zero attention", 2, true, true},
    {"no bias", 0, false, false},
};

}  // namespace

TEST_CASE("MultiheadAttention released forwards and decodes as keep bit for bit",
          "[mha][bf16][release]") {
    const Projection projection = GENERATE(from_range(kProjections));
    const Config config = GENERATE(from_range(kConfigs));
    CAPTURE(headwise::to_string(projection), config.name);
    MultiheadAttentionOptions opt;
    opt.embed_dim = 32;
    opt.num_heads = 4;
    opt.num_kv_heads = config.num_kv_heads;
    opt.bias = config.bias;
    opt.add_bias_kv = config.bias_kv;
    opt.add_zero_attn = config.bias_kv;
    opt.dropout = 0.25;  // training forwards draw the same masks from the same seed
    opt.projection = projection;
    MultiheadAttention<float> keep(opt, 21), released(opt, 21);
    const ParameterCounts n = counts(keep);
    const std::size_t float_bytes = keep.memory_bytes();
    CHECK(float_bytes == 4 * (n.weights + n.others));
    keep.with_precision(Precision::bf16);
    released.with_precision(Precision::bf16, FloatWeights::release);
    CHECK(released.float_weights_released());
    CHECK_FALSE(keep.float_weights_released());
    CHECK(keep.memory_bytes() == 6 * n.weights + 4 * n.others);
    CHECK(released.memory_bytes() == 2 * n.weights + 4 * n.others);
    if (!config.bias && !config.bias_kv) CHECK(2 * released.memory_bytes() == float_bytes);

    std::mt19937_64 rng(22);
    const Tensor<float> x = Tensor<float>::uniform(Shape{2, 6, 32}, -1.0, 1.0, rng);
    const Tensor<float> kv = Tensor<float>::uniform(Shape{2, 5, 32}, -1.0, 1.0, rng);
    AttentionMasks<float> masks;
    masks.need_weights = true;
    // Training mode (a new module's): keep rounds its unchanged float weights anew.
    {
        const auto a = keep.forward(x, kv, kv, masks), b = released.forward(x, kv, kv, masks);
        CHECK(same_bits(b.output, a.output));
        CHECK(same_bits(b.attn_weights, a.attn_weights));
        CHECK(b.differentiable());
    }
    keep.eval();
    released.eval();
    {
        const auto a = keep.forward(x, kv, kv, masks), b = released.forward(x, kv, kv, masks);
        CHECK(same_bits(b.output, a.output));
        CHECK(same_bits(b.attn_weights, a.attn_weights));
        AttentionMasks<float> causal;
        causal.is_causal = true;
        CHECK(same_bits(released.forward(x, x, x, causal).output,
                        keep.forward(x, x, x, causal).output));
    }
    // Decode: a prompt chunk, then one token at a time, into a float and a bf16 cache.
    for (Precision cache_precision : {Precision::float32, Precision::bf16}) {
        CAPTURE(headwise::to_string(cache_precision));
        auto cache_keep = keep.make_kv_cache(2, 9, cache_precision);
        auto cache_released = released.make_kv_cache(2, 9, cache_precision);
        CHECK(same_bits(released.decode(x, cache_released), keep.decode(x, cache_keep)));
        for (int t = 0; t < 3; ++t) {
            const Tensor<float> step = Tensor<float>::uniform(Shape{2, 1, 32}, -1.0, 1.0, rng);
            Tensor<float> out(step.shape());
            released.decode_into(step, cache_released, out);
            CHECK(same_bits(out, keep.decode(step, cache_keep)));
        }
    }
    // Released a second time: nothing more happens.
    released.with_precision(Precision::bf16, FloatWeights::release);
    CHECK(released.memory_bytes() == 2 * n.weights + 4 * n.others);
    CHECK(same_bits(released.forward(x, kv, kv).output, keep.forward(x, kv, kv).output));
}

TEST_CASE("MultiheadAttention with kdim and vdim (q, k, v_proj_weight) released as keep",
          "[mha][bf16][release]") {
    const Projection projection = GENERATE(from_range(kProjections));
    CAPTURE(headwise::to_string(projection));
    MultiheadAttentionOptions opt;
    opt.embed_dim = 16;
    opt.num_heads = 2;
    opt.kdim = 12;
    opt.vdim = 20;
    opt.projection = projection;
    MultiheadAttention<float> keep(opt, 23), released(opt, 23);
    const ParameterCounts n = counts(keep);
    CHECK(n.weights == 16 * 16 + 16 * 12 + 16 * 20 + 16 * 16);
    keep.with_precision(Precision::bf16);
    released.with_precision(Precision::bf16, FloatWeights::release);
    CHECK(released.memory_bytes() == 2 * n.weights + 4 * n.others);
    keep.eval();
    released.eval();
    std::mt19937_64 rng(24);
    const Tensor<float> q = Tensor<float>::uniform(Shape{3, 4, 16}, -1.0, 1.0, rng);
    const Tensor<float> k = Tensor<float>::uniform(Shape{3, 7, 12}, -1.0, 1.0, rng);
    const Tensor<float> v = Tensor<float>::uniform(Shape{3, 7, 20}, -1.0, 1.0, rng);
    CHECK(same_bits(released.forward(q, k, v).output, keep.forward(q, k, v).output));
    check_refused("headwise::MultiheadAttention::visit_parameters",
                  [&] { (void)released.state_dict(); });
}

TEST_CASE("MultiheadAttention released refuses every call that needs the float weights",
          "[mha][bf16][release]") {
    MultiheadAttentionOptions opt;
    opt.embed_dim = 16;
    opt.num_heads = 4;
    MultiheadAttention<float> mha(opt, 25);
    const MultiheadAttention<float> other(opt, 26);
    const auto other_sd = other.state_dict();
    mha.with_precision(Precision::bf16, FloatWeights::release);
    std::mt19937_64 rng(27);
    const Tensor<float> x = Tensor<float>::uniform(Shape{2, 3, 16}, -1.0, 1.0, rng);
    // A training forward works (it multiplies by the copies); its backward is refused.
    const auto fwd = mha.forward(x, x, x);
    REQUIRE(fwd.differentiable());
    mha.eval();
    const Tensor<float> y = mha.forward(x, x, x).output;
    CHECK(same_bits(y, fwd.output));  // no dropout: training and evaluation agree
    const std::size_t bytes = mha.memory_bytes();
    const MultiheadAttention<float>& c = mha;
    const auto still_usable = [&] {
        CHECK(mha.float_weights_released());
        CHECK(mha.precision() == Precision::bf16);
        CHECK(mha.memory_bytes() == bytes);
        CHECK(same_bits(mha.forward(x, x, x).output, y));
    };

    check_refused("headwise::MultiheadAttention::backward", [&] { mha.backward(fwd, fwd.output); });
    still_usable();
    check_refused("headwise::MultiheadAttention::head", [&] { (void)mha.head(0); });
    check_refused("headwise::MultiheadAttention::head", [&] { (void)c.head(1); });
    const std::string visit = "headwise::MultiheadAttention::visit_parameters";
    check_refused(visit, [&] { (void)mha.parameters(); });
    check_refused(visit, [&] { (void)c.parameters(); });
    check_refused(visit, [&] { (void)mha.state_dict(); });
    check_refused(visit, [&] { (void)mha.grad_dict(); });
    check_refused(visit, [&] { (void)mha.parameter_count(); });
    check_refused(visit, [&] { mha.zero_grad(); });
    check_refused(visit, [&] { mha.load_state_dict(other_sd); });
    still_usable();
    check_refused("headwise::MultiheadAttention::with_precision",
                  [&] { mha.with_precision(Precision::bf16); });
    still_usable();

    // What works besides: the mode, the projection, caches.
    mha.train();
    mha.eval();
    mha.with_projection(Projection::per_head);
    still_usable();
    auto cache = mha.make_kv_cache(2, 3);
    AttentionMasks<float> causal;
    causal.is_causal = true;
    CHECK(mha.decode(x, cache).shape() == x.shape());
}

TEST_CASE(
    "MultiheadAttention released returns to float32 with the bf16 weights widened, and "
    "trains",
    "[mha][bf16][release]") {
    MultiheadAttentionOptions opt;
    opt.embed_dim = 16;
    opt.num_heads = 4;
    opt.num_kv_heads = GENERATE(0, 2);
    opt.kdim = opt.num_kv_heads ? 0 : 12;  // the packed layout, and q/k/v_proj_weight
    opt.vdim = opt.kdim;
    CAPTURE(opt.num_kv_heads, opt.kdim);
    MultiheadAttention<float> mha(opt, 31), rounded(opt, 31);
    const std::size_t float_bytes = mha.memory_bytes();
    // The float module with its projection weights rounded to bf16.
    for (auto& p : rounded.parameters())
        if (p.name.find("weight") != std::string::npos)
            for (Index i = 0; i < p.value.numel(); ++i)
                p.value.data()[i] = headwise::round_to_bf16(p.value.data()[i]);
    mha.with_precision(Precision::bf16, FloatWeights::release);
    mha.with_precision(Precision::float32);
    CHECK_FALSE(mha.float_weights_released());
    CHECK(mha.precision() == Precision::float32);
    CHECK(mha.memory_bytes() == float_bytes);
    const auto sd = mha.state_dict(), expected = rounded.state_dict();
    REQUIRE(sd.size() == expected.size());
    for (const auto& [name, value] : expected) {
        CAPTURE(name);
        CHECK(same_bits(sd.at(name), value));  // exact widening
    }
    for (const auto& [name, grad] : mha.grad_dict())
        for (Index i = 0; i < grad.numel(); ++i) REQUIRE(grad.data()[i] == 0.0f);
    CHECK(mha.head(0).q_weight().numel() == 4 * 16);

    // Training: forward, backward and the gradients of the float module of rounded weights.
    std::mt19937_64 rng(32);
    const Index kdim = opt.kdim ? opt.kdim : 16;
    const Tensor<float> q = Tensor<float>::uniform(Shape{2, 3, 16}, -1.0, 1.0, rng);
    const Tensor<float> k = Tensor<float>::uniform(Shape{2, 4, kdim}, -1.0, 1.0, rng);
    const Tensor<float> dy = Tensor<float>::uniform(Shape{2, 3, 16}, -1.0, 1.0, rng);
    const auto a = mha.forward(q, k, k), b = rounded.forward(q, k, k);
    CHECK(same_bits(a.output, b.output));
    const auto ga = mha.backward(a, dy), gb = rounded.backward(b, dy);
    CHECK(same_bits(ga.query, gb.query));
    CHECK(same_bits(ga.key, gb.key));
    const auto grads = mha.grad_dict(), grads_expected = rounded.grad_dict();
    for (const auto& [name, grad] : grads_expected) {
        CAPTURE(name);
        CHECK(same_bits(grads.at(name), grad));
    }
    // Back to bf16 with either choice.
    mha.with_precision(Precision::bf16);
    CHECK(mha.memory_bytes() > float_bytes);
    mha.with_precision(Precision::bf16, FloatWeights::release);
    CHECK(mha.memory_bytes() < float_bytes);
}

TEST_CASE("MultiheadAttention<double> refuses bf16 release", "[mha][bf16][release]") {
    MultiheadAttentionOptions opt;
    opt.embed_dim = 8;
    opt.num_heads = 2;
    MultiheadAttention<double> d(opt, 1);
    const auto sd = d.state_dict();
    REQUIRE_THROWS_MATCHES(
        d.with_precision(Precision::bf16, FloatWeights::release), std::invalid_argument,
        Message("headwise::MultiheadAttention::with_precision: precision: Precision::float32 for a "
                "MultiheadAttention<double>, got Precision::bf16 (bf16 is for float modules)"));
    CHECK(d.precision() == Precision::float32);
    CHECK_FALSE(d.float_weights_released());
    for (const auto& [name, value] : d.state_dict())
        CHECK(same_bits<double>(value.view(), sd.at(name).view()));
    MultiheadAttention<float> f(opt, 1);
    CHECK_THROWS_AS(f.with_precision(Precision::bf16, static_cast<FloatWeights>(2)),
                    std::invalid_argument);
    CHECK_FALSE(f.float_weights_released());
}

}  // namespace test_mha_bf16_release
