// SPDX-License-Identifier: MIT
// The models released in bf16 (with_precision(Precision::bf16, FloatWeights::release)): the tiny
// Llamas of tests/golden/llama (tied and untied; forward, decode with a float and a bf16 cache,
// generate) and the tiny BERT of tests/golden/minilm (forward, SentenceEmbedder::encode) as
// keep-mode bf16 models bit for bit; every layer released; the refused calls (std::logic_error,
// nothing changed); the way back to float32.
#include <headwise/bf16.hpp>
#include <headwise/io/npy.hpp>
#include <headwise/io/safetensors.hpp>
#include <headwise/models/bert.hpp>
#include <headwise/models/generation.hpp>
#include <headwise/models/llama.hpp>
#include <headwise/models/sentence_embedding.hpp>
#include <headwise/precision.hpp>

#include <cstdint>    // std::int64_t
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string
#include <utility>    // std::move
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/decode_by_token.hpp"
#include "support/golden.hpp"
#include "support/golden_models.hpp"
#include "support/instantiations.hpp"
#include "support/projections.hpp"
#include "support/released_weights.hpp"

namespace test_models_bf16_release {

using headwise::FloatWeights;
using headwise::Index;
using headwise::Precision;
using headwise::Projection;
using headwise::Shape;
using headwise::StateDict;
using headwise::Tensor;
using headwise::models::BertModel;
using headwise::models::LlamaForCausalLM;
using headwise::test::check_refused;
using headwise::test::kLlamaPrompts;
using headwise::test::kProjections;
using headwise::test::llama_dir;
using headwise::test::load_ids;
using headwise::test::same_bits;

namespace {

const std::string kTinyBert = headwise::test::tiny_bert_dir();

/// `sd` with the weights that bf16 products multiply by (the attention and MLP projections,
/// lm_head) rounded to bf16; embeddings and norms as they are.
StateDict<float> rounded_projections(StateDict<float> sd) {
    for (auto& [name, value] : sd) {
        const bool projection =
            name.find("proj.weight") != std::string::npos || name == "lm_head.weight";
        if (projection)
            for (float& v : value) v = headwise::round_to_bf16(v);
    }
    return sd;
}

}  // namespace

TEST_CASE("Llama released forwards, decodes and generates as keep bit for bit",
          "[models][llama][bf16][release]") {
    const auto [ids, padding] = headwise::models::left_pad(kLlamaPrompts);  // [3, 7] each
    const Index B = ids.size(0), L = ids.size(1);
    for (const char* name : {"tied", "untied"})
        for (Projection projection : kProjections) {
            CAPTURE(name, headwise::to_string(projection));
            auto keep = LlamaForCausalLM<float>::from_pretrained(llama_dir(name), projection);
            auto released = keep;
            keep.with_precision(Precision::bf16);
            released.with_precision(Precision::bf16, FloatWeights::release);
            CHECK(released.precision() == Precision::bf16);
            CHECK(released.float_weights_released());
            for (auto& layer : released.model().layers()) {
                CHECK(layer.self_attn().float_weights_released());
                CHECK(layer.mlp().gate_proj().float_weights_released());
                CHECK(layer.mlp().up_proj().float_weights_released());
                CHECK(layer.mlp().down_proj().float_weights_released());
            }
            CHECK(same_bits(released.forward(ids, padding), keep.forward(ids, padding)));
            for (Precision cache_precision : {Precision::float32, Precision::bf16}) {
                auto cache_keep = keep.make_cache(B, L, cache_precision);
                auto cache_released = released.make_cache(B, L, cache_precision);
                CHECK(same_bits(
                    headwise::test::decode_by_token<float>(released, ids, padding, cache_released),
                    headwise::test::decode_by_token<float>(keep, ids, padding, cache_keep)));
            }
            headwise::models::GenerationOptions options;
            options.max_new_tokens = 6;
            CHECK(headwise::models::generate(released, kLlamaPrompts, options) ==
                  headwise::models::generate(keep, kLlamaPrompts, options));
        }
}

TEST_CASE("Llama released refuses what needs float weights, then returns to float32",
          "[models][llama][bf16][release]") {
    const auto [ids, padding] = headwise::models::left_pad(kLlamaPrompts);
    const auto state =
        headwise::io::load_safetensors<float>(llama_dir("untied") + "/model.safetensors");
    auto model = LlamaForCausalLM<float>::from_pretrained(llama_dir("untied"));
    const StateDict<float> float_state = model.state_dict();
    model.with_precision(Precision::bf16, FloatWeights::release);
    const Tensor<float> logits = model.forward(ids, padding);

    check_refused("headwise::models::LlamaForCausalLM::load_pretrained",
                  [&] { model.load_pretrained(state); });
    check_refused("headwise::models::LlamaModel::load_pretrained",
                  [&] { model.model().load_pretrained(state, "model."); });
    check_refused("headwise::MultiheadAttention::visit_parameters",
                  [&] { (void)model.state_dict(); });
    check_refused("headwise::MultiheadAttention::visit_parameters",
                  [&] { model.load_state_dict(float_state); });
    check_refused("headwise::models::LlamaForCausalLM::with_precision",
                  [&] { model.with_precision(Precision::bf16); });
    check_refused("headwise::models::LlamaModel::with_precision",
                  [&] { model.model().with_precision(Precision::bf16, FloatWeights::keep); });
    check_refused("headwise::models::LlamaDecoderLayer::with_precision",
                  [&] { model.model().layers().front().with_precision(Precision::bf16); });
    CHECK(model.float_weights_released());
    CHECK(same_bits(model.forward(ids, padding), logits));  // nothing changed

    // The way back: the float model of the rounded projection weights.
    model.with_precision(Precision::float32);
    CHECK_FALSE(model.float_weights_released());
    CHECK(model.precision() == Precision::float32);
    auto rounded = LlamaForCausalLM<float>::from_pretrained(llama_dir("untied"));
    rounded.load_state_dict(rounded_projections(float_state));
    const StateDict<float> back = model.state_dict();
    for (const auto& [name, value] : rounded.state_dict()) {
        CAPTURE(name);
        CHECK(same_bits(back.at(name), value));
    }
    CHECK(same_bits(model.forward(ids, padding), rounded.forward(ids, padding)));
    CHECK_NOTHROW(model.load_pretrained(state));  // loading works again
}

TEST_CASE("BertModel and SentenceEmbedder released embed as keep bit for bit",
          "[models][bert][bf16][release]") {
    const Tensor<std::int64_t> ids = load_ids(kTinyBert + "/input_ids.npy");  // [3, 6]
    const Tensor<bool> padding = headwise::load_npy<bool>(kTinyBert + "/padding_mask.npy");
    const Tensor<std::int64_t> types = load_ids(kTinyBert + "/token_type_ids.npy");
    for (Projection projection : kProjections) {
        CAPTURE(headwise::to_string(projection));
        auto keep = BertModel<float>::from_pretrained(kTinyBert, projection);
        const StateDict<float> float_state = keep.state_dict();
        auto released = keep;
        keep.with_precision(Precision::bf16);
        released.with_precision(Precision::bf16, FloatWeights::release);
        for (auto& layer : released.layers()) CHECK(layer.float_weights_released());
        CHECK(same_bits(released.forward(ids, padding, types), keep.forward(ids, padding, types)));
        check_refused("headwise::models::BertModel::load_pretrained",
                      [&] { released.load_pretrained(float_state); });
        check_refused("headwise::MultiheadAttention::visit_parameters",
                      [&] { (void)released.state_dict(); });
        check_refused("headwise::models::BertModel::with_precision",
                      [&] { released.with_precision(Precision::bf16); });
        CHECK(same_bits(released.forward(ids, padding, types), keep.forward(ids, padding, types)));
        released.with_precision(Precision::float32);
        CHECK_NOTHROW(released.load_pretrained(float_state));
        keep.with_precision(Precision::float32);
        CHECK(same_bits(released.forward(ids, padding, types), keep.forward(ids, padding, types)));
    }

    // The embedder over the tiny BERT (40 ids; a vocabulary of its own).
    std::vector<std::string> vocab = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    for (const char* w : {"the",   "cat", "sat",   "on",   "mat", "a",  "dog", "ran", "##s", "big",
                          "small", "red", "house", "tree", "and", "to", "in",  "it",  "is",  "."})
        vocab.emplace_back(w);
    headwise::text::BertTokenizerOptions topt;
    topt.max_length = 16;
    const headwise::text::BertTokenizer tokenizer(vocab, topt);
    const std::vector<std::string> texts = {"The cat sat on the mat.", "A big red dog ran",
                                            "trees and houses", "it is"};
    headwise::models::SentenceEmbedder<float> keep(
        tokenizer, BertModel<float>::from_pretrained(kTinyBert), {});
    headwise::models::SentenceEmbedder<float> released = keep;
    keep.with_precision(Precision::bf16);
    released.with_precision(Precision::bf16, FloatWeights::release);
    CHECK(released.float_weights_released());
    CHECK(same_bits(released.encode(texts, 2), keep.encode(texts, 2)));
}

TEST_CASE("the models refuse bf16 release in double", "[models][bf16][release][errors]") {
    auto llama_d = LlamaForCausalLM<double>::from_pretrained(llama_dir("untied"));
    CHECK_THROWS_AS(llama_d.with_precision(Precision::bf16, FloatWeights::release),
                    std::invalid_argument);
    CHECK_FALSE(llama_d.float_weights_released());
    auto bert_d = BertModel<double>::from_pretrained(kTinyBert);
    CHECK_THROWS_AS(bert_d.with_precision(Precision::bf16, FloatWeights::release),
                    std::invalid_argument);
    CHECK_FALSE(bert_d.float_weights_released());
    CHECK(bert_d.precision() == Precision::float32);
}

}  // namespace test_models_bf16_release
