// SPDX-License-Identifier: MIT
// models/llama_gguf.hpp: LlamaForCausalLM::from_gguf on tests/golden/llama_gguf (a tiny Llama
// as llama.cpp's converter stores it: Q8_0, Q4_1, F16 and F32 tensors, Q and K rows permuted,
// and the same weights dequantized as a Hugging Face directory, by make_llama_gguf_golden.py):
// float32 against from_pretrained, stored against float32, decode against forward, tied
// embeddings, and the files it refuses.

#include <headwise/io/gguf.hpp>
#include <headwise/layers/detail/module_walks.hpp>
#include <headwise/models/llama.hpp>
#include <headwise/models/llama_gguf.hpp>

#include <cstdint>     // std::int64_t, std::uint8_t, std::uint32_t
#include <cstring>     // std::memcpy
#include <fstream>     // std::ifstream, std::ofstream
#include <functional>  // std::function
#include <iterator>    // std::istreambuf_iterator
#include <stdexcept>   // std::invalid_argument, std::runtime_error
#include <string>      // std::string
#include <utility>     // std::pair
#include <vector>      // std::vector

#include "support/catch.hpp"
#include "support/golden.hpp"
#include "support/instantiations.hpp"
#include "support/match.hpp"
#include "support/projections.hpp"

namespace test_llama_gguf {

using headwise::Index;
using headwise::Projection;
using headwise::Shape;
using headwise::Tensor;
using headwise::io::GgufValue;
using headwise::models::GgufWeights;
using headwise::models::LlamaConfig;
using headwise::models::LlamaForCausalLM;
using headwise::quant::Type;
using headwise::test::ScratchDir;

namespace {

std::string fixture_dir() { return (headwise::test::golden_dir() / "llama_gguf").string(); }
std::string fixture() { return fixture_dir() + "/model.gguf"; }

/// Token ids [B, L] of the tiny model's vocabulary (64), a fixed pattern.
Tensor<std::int64_t> prompt(Index B, Index L) {
    Tensor<std::int64_t> ids(Shape{B, L});
    for (Index i = 0; i < ids.numel(); ++i) ids.data()[i] = (i * 37 + 5) % 64;
    return ids;
}

double scaled(const Tensor<float>& got, const Tensor<float>& want) {
    const headwise::test::ScaledDifference d = headwise::test::scaled_difference(got, want);
    INFO(d.str());
    return d.rel;
}

/// The weight matrices of a model in declaration order (layer 0's in- and out-projection, gate,
/// up, down, then layer 1's, then lm_head).
std::vector<headwise::WeightMatrix<float>*> holders(LlamaForCausalLM<float>& model) {
    headwise::detail::WeightsWalk<float> walk;
    model.walk_module(walk, "", true);
    return walk.found;
}

/// The fixture's metadata and tensors, to be edited and written again (variants of the file).
struct GgufParts {
    headwise::io::GgufFile file = headwise::io::load_gguf(fixture());  // keeps the bytes
    std::vector<std::pair<std::string, GgufValue>> metadata = file.metadata();
    std::vector<headwise::io::GgufTensorData> tensors;

    GgufParts() {
        for (const headwise::io::GgufTensorInfo& t : file.tensors())
            tensors.push_back({t.name, t.type, t.shape(), file.tensor_data(t)});
    }
    void set(const std::string& key, GgufValue value) {
        for (auto& kv : metadata)
            if (kv.first == key) {
                kv.second = std::move(value);
                return;
            }
        metadata.emplace_back(key, std::move(value));
    }
    void erase(const std::string& key) {
        for (auto it = metadata.begin(); it != metadata.end(); ++it)
            if (it->first == key) {
                metadata.erase(it);
                return;
            }
        FAIL("no key " << key);
    }
    headwise::io::GgufTensorData& tensor(const std::string& name) {
        for (headwise::io::GgufTensorData& t : tensors)
            if (t.name == name) return t;
        FAIL("no tensor " << name);
        return tensors.front();
    }
    void erase_tensor(const std::string& name) {
        for (auto it = tensors.begin(); it != tensors.end(); ++it)
            if (it->name == name) {
                tensors.erase(it);
                return;
            }
        FAIL("no tensor " << name);
    }
    std::string save(const ScratchDir& dir, const std::string& name) const {
        const std::string path = (dir.path() / name).string();
        headwise::io::save_gguf(path, metadata, tensors);
        return path;
    }
};

constexpr const char* kConfigFn = "headwise::models::LlamaConfig::from_gguf";
constexpr const char* kLoadFn = "headwise::models::LlamaForCausalLM::from_gguf";

}  // namespace

TEST_CASE("from_gguf reads the configuration of the llama.* keys") {
    const LlamaConfig c = LlamaConfig::from_gguf(headwise::io::load_gguf(fixture()));
    const LlamaConfig hf = LlamaConfig::from_json_file(fixture_dir() + "/config.json");
    CHECK(c.vocab_size == 64);
    CHECK(c.hidden_size == 32);
    CHECK(c.intermediate_size == 64);
    CHECK(c.num_hidden_layers == 2);
    CHECK(c.num_attention_heads == 4);
    CHECK(c.num_key_value_heads == 2);
    CHECK(c.max_position_embeddings == 128);
    CHECK(c.rms_norm_eps == static_cast<double>(1e-5f));  // a FLOAT32 in the file
    CHECK(c.rope_theta == hf.rope_theta);
    CHECK(c.rope_scaling_factor == 2.0);
    CHECK_FALSE(c.tie_word_embeddings);
    CHECK_FALSE(c.attention_bias);
    CHECK_FALSE(c.mlp_bias);
    CHECK(c.bos_token_id == std::optional<std::int64_t>(1));
    CHECK(c.eos_token_ids == std::vector<std::int64_t>{2});
}

TEST_CASE("from_gguf float32 gives from_pretrained's model of the same weights") {
    // The directory holds make_llama_gguf_golden.py's dequantized weights in Hugging Face's
    // layout: the loaded parameters agree bit for bit (the Q and K rows put back), and so do
    // the logits, under every projection.
    const Projection p = GENERATE(from_range(headwise::test::kProjections));
    CAPTURE(static_cast<int>(p));
    LlamaForCausalLM<float> gguf =
        LlamaForCausalLM<float>::from_gguf(fixture(), GgufWeights::float32, p);
    LlamaForCausalLM<float> hf = LlamaForCausalLM<float>::from_pretrained(fixture_dir(), p);
    const auto a = gguf.state_dict();
    const auto b = hf.state_dict();
    REQUIRE(a.size() == b.size());
    for (const auto& [name, value] : b) {
        CAPTURE(name);
        REQUIRE(a.count(name) == 1);
        CHECK(scaled(a.at(name), value) == 0.0);
    }
    const Tensor<std::int64_t> ids = prompt(2, 9);
    CHECK(scaled(gguf.forward(ids), hf.forward(ids)) < 1e-6);
}

TEST_CASE("from_gguf stored keeps each matrix in its file type, dequantized exactly to float32's") {
    LlamaForCausalLM<float> stored = LlamaForCausalLM<float>::from_gguf(fixture());
    LlamaForCausalLM<float> f32 =
        LlamaForCausalLM<float>::from_gguf(fixture(), GgufWeights::float32);
    const std::vector<headwise::WeightMatrix<float>*> w = holders(stored);
    REQUIRE(w.size() == 12);
    // The embedding table (token_embd) Q8_0; layer 0: q, k, v of one type (stored); layer 1: v
    // Q4_1 beside Q8_0 q and k (float), an F32 ffn_up (float); lm_head (output.weight) Q4_1.
    const std::vector<Type> expected = {Type::q8_0, Type::q4_1, Type::q8_0, Type::q4_1,
                                        Type::q8_0, Type::f16,  Type::f32,  Type::q4_1,
                                        Type::q8_0, Type::f32,  Type::q4_1, Type::q4_1};
    for (std::size_t i = 0; i < w.size(); ++i) {
        CAPTURE(i);
        CHECK(w[i]->stored_type() == expected[i]);
        CHECK(w[i]->released() == (expected[i] != Type::f32));
    }
    CHECK(stored.memory_bytes() < f32.memory_bytes() / 2);
    // Back to float: every stored block dequantized, the rows where float32 mode put them.
    stored.with_precision(headwise::Precision::float32);
    const auto a = stored.state_dict();
    const auto b = f32.state_dict();
    REQUIRE(a.size() == b.size());
    for (const auto& [name, value] : b) {
        CAPTURE(name);
        CHECK(scaled(a.at(name), value) == 0.0);
    }
}

TEST_CASE("from_gguf stored borrows the file's blocks and keeps the file alive") {
    std::vector<std::uint8_t> bytes;
    {
        std::ifstream in(fixture(), std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    const std::uint8_t* o_proj = nullptr;
    LlamaForCausalLM<float> model = [&] {
        const headwise::io::GgufFile file = headwise::io::parse_gguf(bytes.data(), bytes.size());
        o_proj = file.tensor_data(file.tensor("blk.0.attn_output.weight"));
        return LlamaForCausalLM<float>::from_gguf(file);
    }();  // the GgufFile is gone; the model holds its bytes
    bytes.assign(bytes.size(), 0);
    CHECK(holders(model)[2]->stored_rows(0, 32).data == o_proj);   // not copied
    CHECK(holders(model)[1]->stored_rows(0, 64).data != nullptr);  // q, k, v: copied
    LlamaForCausalLM<float> fresh = LlamaForCausalLM<float>::from_gguf(fixture());
    const Tensor<std::int64_t> ids = prompt(1, 6);
    CHECK(scaled(model.forward(ids), fresh.forward(ids)) == 0.0);
}

TEST_CASE("from_gguf stored logits agree with float32 logits within the quantized product's") {
    const Projection p = GENERATE(from_range(headwise::test::kProjections));
    CAPTURE(static_cast<int>(p));
    LlamaForCausalLM<float> stored =
        LlamaForCausalLM<float>::from_gguf(fixture(), GgufWeights::stored, p);
    LlamaForCausalLM<float> f32 =
        LlamaForCausalLM<float>::from_gguf(fixture(), GgufWeights::float32, p);
    // 40 tokens: ops::quant_matmul multiplies by dequantized panels (float activations), so
    // only the summation order differs (test_weight_types: an attention within 1e-4).
    const Tensor<std::int64_t> long_ids = prompt(1, 40);
    CHECK(scaled(stored.forward(long_ids), f32.forward(long_ids)) < 1e-5);
    // 6 tokens: activations rounded to 8-bit blocks, about 0.5% per product (test_weight_types:
    // an attention's decode within 3%); here through 2 layers of 4 products each and lm_head.
    const Tensor<std::int64_t> ids = prompt(1, 6);
    const double err = scaled(stored.forward(ids), f32.forward(ids));
    CHECK(err < 0.05);  // reached: 2.8e-2
    CHECK(err > 0);     // the 8-bit scheme did run
}

TEST_CASE("from_gguf models decode token by token as they forward") {
    const GgufWeights weights = GENERATE(GgufWeights::stored, GgufWeights::float32);
    CAPTURE(static_cast<int>(weights));
    LlamaForCausalLM<float> model = LlamaForCausalLM<float>::from_gguf(fixture(), weights);
    const Index L = 7, V = 64;
    const Tensor<std::int64_t> ids = prompt(1, L);
    const Tensor<float> whole = model.forward(ids);  // [1, L, V]
    auto cache = model.make_cache(1, L);
    Tensor<float> steps(Shape{1, L, V});
    for (Index t = 0; t < L; ++t) {
        Tensor<std::int64_t> one(Shape{1, 1});
        one.data()[0] = ids.data()[t];
        const Tensor<float> y = model.decode(one, cache);  // [1, 1, V]
        std::memcpy(steps.data() + t * V, y.data(), sizeof(float) * V);
    }
    CHECK(scaled(steps, whole) < 1e-5);
}

TEST_CASE("from_gguf ties lm_head to token_embd when the file has no output.weight") {
    ScratchDir dir("llama-gguf-tied");
    GgufParts tied;
    tied.erase_tensor("output.weight");
    GgufParts copied;  // output.weight = token_embd.weight's blocks
    const headwise::io::GgufTensorData embd = copied.tensor("token_embd.weight");
    headwise::io::GgufTensorData& out = copied.tensor("output.weight");
    out.type = embd.type;
    out.shape = embd.shape;
    out.bytes = embd.bytes;
    const std::string tied_path = tied.save(dir, "tied.gguf");
    const std::string copied_path = copied.save(dir, "copied.gguf");
    for (const GgufWeights weights : {GgufWeights::stored, GgufWeights::float32}) {
        CAPTURE(static_cast<int>(weights));
        LlamaForCausalLM<float> a = LlamaForCausalLM<float>::from_gguf(tied_path, weights);
        LlamaForCausalLM<float> b =
            LlamaForCausalLM<float>::from_gguf(copied_path, GgufWeights::float32);
        CHECK(a.config().tie_word_embeddings);
        if (weights == GgufWeights::float32) CHECK(a.state_dict().count("lm_head.weight") == 0);
        const Tensor<std::int64_t> ids = prompt(2, 5);
        CHECK(scaled(a.forward(ids), b.forward(ids)) <
              (weights == GgufWeights::stored ? 5e-2 : 1e-6));
    }
}

TEST_CASE(
    "from_gguf reads the vocabulary size from the token list when llama.vocab_size is absent") {
    ScratchDir dir("llama-gguf-tokens");
    GgufParts parts;
    parts.erase("llama.vocab_size");
    std::vector<GgufValue> tokens;
    for (int i = 0; i < 64; ++i) tokens.push_back(GgufValue::string("t" + std::to_string(i)));
    parts.set("tokenizer.ggml.tokens",
              GgufValue::array(headwise::io::GgufValueType::string, tokens));
    CHECK(LlamaForCausalLM<float>::from_gguf(parts.save(dir, "tokens.gguf")).config().vocab_size ==
          64);
    parts.erase("tokenizer.ggml.tokens");
    const std::string path = parts.save(dir, "none.gguf");
    CHECK_THROWS_MATCHES(LlamaForCausalLM<float>::from_gguf(path), std::runtime_error,
                         Message(std::string(kConfigFn) + ": " + path +
                                 ": llama.vocab_size: missing, and so is tokenizer.ggml.tokens"));
}

TEST_CASE("from_gguf refuses metadata it does not support, naming the key and the value") {
    ScratchDir dir("llama-gguf-keys");
    struct Case {
        const char* name;
        std::function<void(GgufParts&)> edit;
        std::string message;  // after "<function>: <path>: "
    };
    const std::vector<Case> cases = {
        {"architecture",
         [](GgufParts& p) { p.set("general.architecture", GgufValue::string("gpt2")); },
         "general.architecture: only \"llama\" and \"qwen2\" are read by LlamaForCausalLM, got "
         "the STRING 'gpt2'"},
        {"rope_scaling",
         [](GgufParts& p) { p.set("llama.rope.scaling.type", GgufValue::string("longrope")); },
         "llama.rope.scaling.type: only \"none\", \"linear\" and \"yarn\" rope scaling are read "
         "from GGUF files, got the STRING 'longrope'"},
        {"missing_key", [](GgufParts& p) { p.erase("llama.embedding_length"); },
         "llama.embedding_length: missing (a Llama GGUF file has it)"},
        {"per_layer_heads",
         [](GgufParts& p) {
             p.set("llama.attention.head_count",
                   GgufValue::array(headwise::io::GgufValueType::uint32,
                                    {GgufValue::uint32(4), GgufValue::uint32(4)}));
         },
         "llama.attention.head_count: expected a positive integer (one for all layers), got an "
         "ARRAY of 2"},
        {"rope_dims",
         [](GgufParts& p) { p.set("llama.rope.dimension_count", GgufValue::uint32(4)); },
         "llama.rope.dimension_count: only the head dimension 8 (attention.key_length, or "
         "embedding_length / head_count) is supported, got 4"},
        {"experts", [](GgufParts& p) { p.set("llama.expert_count", GgufValue::uint32(8)); },
         "llama.expert_count: mixture-of-experts models are not supported, got the UINT32 8"},
        {"eps",
         [](GgufParts& p) { p.set("llama.attention.layer_norm_rms_epsilon", GgufValue::int32(1)); },
         "llama.attention.layer_norm_rms_epsilon: expected a finite FLOAT32 or FLOAT64 above "
         "0, got the INT32 1"},
    };
    for (const Case& c : cases) {
        CAPTURE(c.name);
        GgufParts parts;
        c.edit(parts);
        const std::string path = parts.save(dir, std::string(c.name) + ".gguf");
        CHECK_THROWS_MATCHES(LlamaForCausalLM<float>::from_gguf(path), std::runtime_error,
                             Message(std::string(kConfigFn) + ": " + path + ": " + c.message));
    }
}

TEST_CASE("from_gguf refuses tensors missing, of the wrong shape or not a Llama's, naming them") {
    ScratchDir dir("llama-gguf-tensors");
    struct Case {
        const char* name;
        std::function<void(GgufParts&)> edit;
        std::string message;  // after "<function>: <path>: "
    };
    static const float kFreqs[4] = {1, 1, 1, 1};  // a tensor of 4 floats
    const std::vector<Case> cases = {
        {"missing", [](GgufParts& p) { p.erase_tensor("blk.1.ffn_up.weight"); },
         "tensor 'blk.1.ffn_up.weight' is missing; a Llama model of this configuration has it, "
         "of shape [64, 32]"},
        {"shape",
         [](GgufParts& p) {
             const headwise::io::GgufTensorData q = p.tensor("blk.0.attn_q.weight");
             p.tensor("blk.0.attn_k.weight").shape = q.shape;
             p.tensor("blk.0.attn_k.weight").bytes = q.bytes;
         },
         "tensor 'blk.0.attn_k.weight' has shape [32, 32], expected [16, 32] (from the file's "
         "llama.* keys)"},
        {"vocab", [](GgufParts& p) { p.set("llama.vocab_size", GgufValue::uint32(65)); },
         "tensor 'token_embd.weight' has shape [64, 32], expected [65, 32] (from the file's "
         "llama.* keys)"},
        {"layers", [](GgufParts& p) { p.set("llama.block_count", GgufValue::uint32(1)); },
         "tensor 'blk.1.attn_norm.weight' is not one of a Llama model's (of llama.block_count = "
         "1 layers); headwise reads token_embd, blk.N.attn_norm, attn_q, attn_k, attn_v, "
         "attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down, output_norm, output and "
         "rope_freqs"},
        {"unknown",
         [](GgufParts& p) {
             p.tensors.push_back({"blk.0.attn_q_norm.weight", Type::f32, Shape{4}, kFreqs});
         },
         "tensor 'blk.0.attn_q_norm.weight' is not one of a Llama model's (of llama.block_count "
         "= 2 layers); headwise reads token_embd, blk.N.attn_norm, attn_q, attn_k, attn_v, "
         "attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down, output_norm, output and rope_freqs"},
    };
    for (const Case& c : cases) {
        CAPTURE(c.name);
        GgufParts parts;
        c.edit(parts);
        const std::string path = parts.save(dir, std::string(c.name) + ".gguf");
        for (const GgufWeights weights : {GgufWeights::stored, GgufWeights::float32})
            CHECK_THROWS_MATCHES(LlamaForCausalLM<float>::from_gguf(path, weights),
                                 std::invalid_argument,
                                 Message(std::string(kLoadFn) + ": " + path + ": " + c.message));
    }
}

TEST_CASE("from_gguf refuses a tensor type headwise does not read, through load_gguf") {
    ScratchDir dir("llama-gguf-type");
    const std::string path = GgufParts().save(dir, "type.gguf");
    // The type id of blk.0.ffn_norm.weight's tensor info (name, dims count, 1 dim, type) set
    // to IQ2_XS (17).
    std::string bytes;
    {
        std::ifstream in(path, std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    const std::string name = "blk.0.ffn_norm.weight";
    const std::size_t at = bytes.find(name);
    REQUIRE(at != std::string::npos);
    const std::size_t type_at = at + name.size() + 4 + 8;
    std::uint32_t type = 0;
    std::memcpy(&type, bytes.data() + type_at, 4);
    REQUIRE(type == 0);  // F32
    type = 17;
    std::memcpy(&bytes[type_at], &type, 4);
    std::ofstream(path, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    CHECK_THROWS_MATCHES(LlamaForCausalLM<float>::from_gguf(path), std::runtime_error,
                         Message("headwise::io::load_gguf: " + path + ": tensor '" + name +
                                 "' has type IQ2_XS (17), which headwise does not read; it reads " +
                                 headwise::quant::readable_types()));
}

TEST_CASE("from_gguf refuses stored weights for a double model and a GgufWeights of no name") {
    CHECK_THROWS_MATCHES(LlamaForCausalLM<double>::from_gguf(fixture()), std::invalid_argument,
                         Message(std::string(kLoadFn) +
                                 ": weights: GgufWeights::float32 for a LlamaForCausalLM<double> "
                                 "(stored blocks are multiplied by float models), got "
                                 "GgufWeights::stored"));
    CHECK_THROWS_MATCHES(LlamaForCausalLM<float>::from_gguf(fixture(), static_cast<GgufWeights>(7)),
                         std::invalid_argument,
                         Message(std::string(kLoadFn) +
                                 ": weights: GgufWeights::stored or GgufWeights::float32, got 7"));
    // float32 works in double, as from_pretrained's model.
    LlamaForCausalLM<double> d =
        LlamaForCausalLM<double>::from_gguf(fixture(), GgufWeights::float32);
    LlamaForCausalLM<double> hf = LlamaForCausalLM<double>::from_pretrained(fixture_dir());
    const Tensor<std::int64_t> ids = prompt(1, 5);
    const headwise::test::ScaledDifference diff =
        headwise::test::scaled_difference(d.forward(ids), hf.forward(ids));
    INFO(diff.str());
    CHECK(diff.rel < 1e-10);
}

}  // namespace test_llama_gguf
