// SPDX-License-Identifier: MIT
// The models in Precision::bf16: the tiny Llamas of tests/golden/llama (logits within 1e-2
// relative of float, every projection; decode token by token in bf16, with a float and a bf16
// KV cache, against forward in bf16) and the tiny BERT of tests/golden/minilm; every sub-module
// switched; load_pretrained in bf16; the errors.
#include <headwise/io/npy.hpp>
#include <headwise/models/bert.hpp>
#include <headwise/models/generation.hpp>
#include <headwise/models/llama.hpp>
#include <headwise/precision.hpp>

#include <algorithm>  // std::max_element
#include <cstdint>    // std::int64_t
#include <cstdio>     // std::printf
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/decode_by_token.hpp"
#include "support/golden.hpp"
#include "support/golden_models.hpp"
#include "support/instantiations.hpp"
#include "support/projections.hpp"
#include "support/relative_error.hpp"

namespace test_models_bf16 {

using headwise::Index;
using headwise::Precision;
using headwise::Projection;
using headwise::Shape;
using headwise::Tensor;
using headwise::models::BertModel;
using headwise::models::LlamaForCausalLM;
using headwise::test::kLlamaPrompts;
using headwise::test::kProjections;
using headwise::test::llama_dir;
using headwise::test::load_ids;
using headwise::test::relative_error;

namespace {

/// bf16 has 8 significant bits (unit roundoff 2^-8 = 3.9e-3); the accuracy target.
constexpr double kBf16Tolerance = 1e-2;
/// Logits of a Llama pass through 2 L + 1 bf16 products in a row (each layer's attention
/// projections, then its MLP; lm_head), each rounding its inputs to 8 bits: on the tiny
/// Llamas (2 layers, weights drawn with std 0.2) they reach 1.2e-2, so twice the one-module bound.
constexpr double kLlamaLogitsTolerance = 2e-2;

const std::string kTinyBert = headwise::test::tiny_bert_dir();

/// The rows [B, V] of logits [B, L, V] at position t, padding rows zeroed (their values are not
/// meaningful).
Tensor<float> position(const Tensor<float>& logits, Index t, const Tensor<bool>& padding) {
    const Index B = logits.size(0), L = logits.size(1), V = logits.size(2);
    Tensor<float> out(Shape{B, V});
    for (Index b = 0; b < B; ++b)
        for (Index v = 0; v < V; ++v)
            out.data()[b * V + v] =
                padding.data()[b * L + t] ? 0.0f : logits.data()[(b * L + t) * V + v];
    return out;
}

}  // namespace

TEST_CASE("Llama logits in bf16 are within 2e-2 of float, every layer switched",
          "[models][llama][bf16]") {
    const auto [ids, padding] = headwise::models::left_pad(kLlamaPrompts);  // [3, 7] each
    std::vector<double> errors;
    for (const char* name : {"tied", "untied"})
        for (Projection projection : kProjections) {
            CAPTURE(name, headwise::to_string(projection));
            auto model = LlamaForCausalLM<float>::from_pretrained(llama_dir(name), projection);
            const Tensor<float> f32 = model.forward(ids, padding);  // [3, 7, V]
            CHECK(&model.with_precision(Precision::bf16) == &model);
            CHECK(model.precision() == Precision::bf16);
            CHECK(model.model().precision() == Precision::bf16);
            for (auto& layer : model.model().layers()) {
                CHECK(layer.precision() == Precision::bf16);
                CHECK(layer.self_attn().precision() == Precision::bf16);
                CHECK(layer.mlp().precision() == Precision::bf16);
                CHECK(layer.mlp().down_proj().precision() == Precision::bf16);
            }
            const Tensor<float> bf16 = model.forward(ids, padding);
            for (Index t = 0; t < ids.size(1); ++t) {
                CAPTURE(t);
                const double err =
                    relative_error(position(bf16, t, padding), position(f32, t, padding));
                CHECK(err <= kLlamaLogitsTolerance);
                errors.push_back(err);
            }
            CHECK(relative_error(bf16, f32) > 0);  // the products did run in bf16
            model.with_precision(Precision::float32);
            CHECK(model.model().layers().front().mlp().up_proj().precision() == Precision::float32);
            CHECK(relative_error(model.forward(ids, padding), f32) == 0.0);
        }
    std::printf("Llama logits bf16 vs float: median %.3g, max %.3g relative over %zu positions\n",
                headwise::test::median(errors), *std::max_element(errors.begin(), errors.end()),
                errors.size());
}

TEST_CASE("Llama decode in bf16 gives bf16's forward, and with a bf16 KV cache is within 1e-2",
          "[models][llama][bf16]") {
    const auto [ids, padding] = headwise::models::left_pad(kLlamaPrompts);  // [3, 7] each
    auto model = LlamaForCausalLM<float>::from_pretrained(llama_dir("untied"));
    model.with_precision(Precision::bf16);
    const Tensor<float> whole = model.forward(ids, padding);  // [3, 7, V]
    const Index B = ids.size(0), L = ids.size(1);

    auto cache = model.make_cache(B, L);
    const Tensor<float> steps = headwise::test::decode_by_token<float>(model, ids, padding, cache);
    auto half = model.make_cache(B, L, Precision::bf16);
    for (const auto& c : half.layers) CHECK(c.precision() == Precision::bf16);
    CHECK(half.layers.front().memory_bytes() * 2 == cache.layers.front().memory_bytes());
    const Tensor<float> steps_half =
        headwise::test::decode_by_token<float>(model, ids, padding, half);
    for (Index t = 0; t < L; ++t) {
        CAPTURE(t);
        const Tensor<float> want = position(whole, t, padding);
        CHECK(relative_error(position(steps, t, padding), want) <= 1e-5);
        CHECK(relative_error(position(steps_half, t, padding), want) <= kBf16Tolerance);
    }
    CHECK(cache.size() == L);
    CHECK(half.size() == L);
}

TEST_CASE("Llama's load_pretrained in bf16 takes bf16 copies of the new weights",
          "[models][llama][bf16]") {
    const auto [ids, padding] = headwise::models::left_pad(kLlamaPrompts);  // [3, 7] each
    const auto state =
        headwise::io::load_safetensors<float>(llama_dir("untied") + "/model.safetensors");
    auto loaded = LlamaForCausalLM<float>::from_pretrained(llama_dir("untied"));
    loaded.with_precision(Precision::bf16);
    const Tensor<float> want = loaded.forward(ids, padding);
    // Switched before loading: the copies are of whatever the weights held; loading renews them.
    LlamaForCausalLM<float> model(loaded.config(), Projection::fused, headwise::uninitialized);
    model.with_precision(Precision::bf16);
    model.load_pretrained(state);
    CHECK(relative_error(model.forward(ids, padding), want) == 0.0);
}

TEST_CASE("BertModel in bf16 is within 1e-2 of float, every layer switched",
          "[models][bert][bf16]") {
    const Tensor<std::int64_t> ids = load_ids(kTinyBert + "/input_ids.npy");  // [3, 6]
    const Tensor<bool> padding = headwise::load_npy<bool>(kTinyBert + "/padding_mask.npy");
    const Tensor<std::int64_t> types = load_ids(kTinyBert + "/token_type_ids.npy");
    for (Projection projection : kProjections) {
        CAPTURE(headwise::to_string(projection));
        auto model = BertModel<float>::from_pretrained(kTinyBert, projection);
        const Tensor<float> f32 = model.forward(ids, padding, types);
        model.with_precision(Precision::bf16);
        CHECK(model.precision() == Precision::bf16);
        for (auto& layer : model.layers()) {
            CHECK(layer.precision() == Precision::bf16);
            CHECK(layer.attention().precision() == Precision::bf16);
        }
        const Tensor<float> bf16 = model.forward(ids, padding, types);
        const double err = relative_error(bf16, f32);
        std::printf("BertModel (tiny) bf16 vs float, %s: %.3g relative\n",
                    headwise::to_string(projection), err);
        CHECK(err > 0);
        CHECK(err <= kBf16Tolerance);
        model.with_precision(Precision::float32);
        CHECK(relative_error(model.forward(ids, padding, types), f32) == 0.0);
    }
}

TEST_CASE("the models' with_precision refuses double and unknown values, changing nothing",
          "[models][bf16][errors]") {
    const auto bad = static_cast<Precision>(7);
    auto llama_d = LlamaForCausalLM<double>::from_pretrained(llama_dir("untied"));
    CHECK_THROWS_WITH(
        llama_d.with_precision(Precision::bf16),
        ContainsSubstring("headwise::models::LlamaForCausalLM::with_precision: precision"));
    CHECK_THROWS_WITH(llama_d.model().with_precision(Precision::bf16),
                      ContainsSubstring("headwise::models::LlamaModel::with_precision: precision"));
    CHECK(llama_d.precision() == Precision::float32);
    CHECK(llama_d.model().layers().front().self_attn().precision() == Precision::float32);

    auto llama = LlamaForCausalLM<float>::from_pretrained(llama_dir("untied"));
    llama.with_precision(Precision::bf16);
    CHECK_THROWS_AS(llama.with_precision(bad), std::invalid_argument);
    CHECK_THROWS_WITH(llama.model().layers().front().with_precision(bad),
                      ContainsSubstring("LlamaDecoderLayer::with_precision: precision") &&
                          ContainsSubstring("got 7"));
    CHECK(llama.precision() == Precision::bf16);
    for (auto& layer : llama.model().layers()) {
        CHECK(layer.self_attn().precision() == Precision::bf16);
        CHECK(layer.mlp().precision() == Precision::bf16);
    }
    CHECK_THROWS_AS(llama_d.make_cache(1, 4, Precision::bf16), std::invalid_argument);

    auto bert_d = BertModel<double>::from_pretrained(kTinyBert);
    CHECK_THROWS_WITH(bert_d.with_precision(Precision::bf16),
                      ContainsSubstring("headwise::models::BertModel::with_precision: precision"));
    CHECK(bert_d.precision() == Precision::float32);
    CHECK(bert_d.layers().front().attention().precision() == Precision::float32);
    auto bert = BertModel<float>::from_pretrained(kTinyBert);
    CHECK_THROWS_AS(bert.with_precision(bad), std::invalid_argument);
    CHECK_THROWS_WITH(bert.layers().front().with_precision(bad),
                      ContainsSubstring("BertLayer::with_precision: precision"));
    CHECK(bert.precision() == Precision::float32);
    CHECK(bert.layers().front().attention().precision() == Precision::float32);
}

}  // namespace test_models_bf16
