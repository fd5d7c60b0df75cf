// SPDX-License-Identifier: MIT
// models/llama_gguf.hpp: the rope scalings beyond linear read from GGUF files, on
// tests/golden/llama_gguf/llama3.gguf and yarn.gguf (the models of tests/golden/llama_variants
// written as llama.cpp's converter writes them, by make_llama_gguf_golden.py): yarn's keys and
// Llama 3.1's rope_freqs.weight give the RopeScaling that config.json gives, the same logits and
// greedy ids as the Hugging Face directories (whose logits are transformers'), and malformed keys
// and tensors are refused by name.

#include <headwise/io/gguf.hpp>
#include <headwise/io/npy.hpp>
#include <headwise/models/generation.hpp>
#include <headwise/models/llama.hpp>
#include <headwise/models/llama_gguf.hpp>
#include <headwise/ops/rope.hpp>

#include <cmath>        // std::abs, std::log, std::nan, HUGE_VALF
#include <cstdint>      // std::int64_t, std::uint32_t
#include <filesystem>   // std::filesystem::copy_file
#include <fstream>      // std::ifstream, std::ofstream
#include <functional>   // std::function
#include <iterator>     // std::istreambuf_iterator
#include <stdexcept>    // std::runtime_error
#include <string>       // std::string
#include <type_traits>  // std::is_same_v
#include <utility>      // std::pair
#include <vector>       // std::vector

#include "support/catch.hpp"
#include "support/golden.hpp"
#include "support/instantiations.hpp"
#include "support/match.hpp"

namespace test_llama_gguf_rope {

using headwise::Index;
using headwise::RopeScalingType;
using headwise::Shape;
using headwise::Tensor;
using headwise::io::GgufValue;
using headwise::models::GenerationOptions;
using headwise::models::GgufWeights;
using headwise::models::LlamaConfig;
using headwise::models::LlamaForCausalLM;
using headwise::quant::Type;
using headwise::test::ScratchDir;

namespace {

std::string gguf_file(const std::string& name) {
    return (headwise::test::golden_dir() / "llama_gguf" / (name + ".gguf")).string();
}
std::string model_dir(const std::string& name) {
    return (headwise::test::golden_dir() / "llama_variants" / name).string();
}

// The prompt of tests/golden/make_llama_variants_golden.py.
const std::vector<std::int64_t> kPrompt = {1, 17, 42, 9, 5, 63, 12, 33, 8, 50, 21, 3};

std::vector<std::int64_t> recorded_greedy(const std::string& name) {
    std::ifstream in(model_dir(name) + "/greedy.txt");
    std::vector<std::int64_t> ids;
    for (std::int64_t id; in >> id;) ids.push_back(id);
    return ids;
}

template <class T>
Tensor<T> logits_of(LlamaForCausalLM<T>& model) {
    Tensor<std::int64_t> batch(Shape{static_cast<Index>(kPrompt.size())});
    for (std::size_t i = 0; i < kPrompt.size(); ++i) batch.data()[i] = kPrompt[i];
    return model.forward(batch);  // [L, V]
}

template <class T>
std::vector<std::int64_t> greedy(LlamaForCausalLM<T>& model) {
    GenerationOptions options;
    options.max_new_tokens = 20;
    options.stop_tokens = model.config().eos_token_ids;
    return headwise::models::generate(model, {kPrompt}, options).at(0);
}

/// A fixture's metadata and tensors, to be edited and written again.
struct GgufParts {
    headwise::io::GgufFile file;  // keeps the bytes
    std::vector<std::pair<std::string, GgufValue>> metadata = file.metadata();
    std::vector<headwise::io::GgufTensorData> tensors;
    std::vector<float> values;  // a replaced rope_freqs.weight's

    explicit GgufParts(const std::string& name) : file(headwise::io::load_gguf(gguf_file(name))) {
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
    /// rope_freqs.weight replaced by F32 `v`.
    void set_freqs(std::vector<float> v) {
        values = std::move(v);
        for (headwise::io::GgufTensorData& t : tensors)
            if (t.name == "rope_freqs.weight") {
                t.type = Type::f32;
                t.shape = Shape{static_cast<Index>(values.size())};
                t.bytes = values.data();
                return;
            }
        FAIL("no tensor rope_freqs.weight");
    }
    std::string save(const ScratchDir& dir, const std::string& name) const {
        const std::string path = dir.file(name);
        headwise::io::save_gguf(path, metadata, tensors);
        return path;
    }
};

std::string read_text(const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

constexpr const char* kConfigFn = "headwise::models::LlamaConfig::from_gguf";

}  // namespace

TEST_CASE("from_gguf maps yarn's keys onto the RopeScaling config.json gives") {
    const LlamaConfig c = LlamaConfig::from_gguf(headwise::io::load_gguf(gguf_file("yarn")));
    const LlamaConfig hf = LlamaConfig::from_json_file(model_dir("yarn") + "/config.json");
    CHECK(c.rope_scaling.type == RopeScalingType::yarn);
    CHECK(c.rope_scaling.factor == 4.0);
    CHECK(c.rope_scaling.original_max_position == 16);
    CHECK(c.rope_scaling.beta_fast == 32.0);
    CHECK(c.rope_scaling.beta_slow == 1.0);
    CHECK(c.rope_scaling.truncate);
    CHECK(c.rope_scaling.attention_factor == 0.1 * std::log(4.0) + 1.0);
    CHECK(c.rope_scaling.frequency_factors.empty());
    CHECK(c.rope_scaling == hf.rope_scaling);
    CHECK(c.rope_scaling_factor == 1.0);
    CHECK(c.max_position_embeddings == hf.max_position_embeddings);
    CHECK(c.head_dim == 0);  // key_length 16 = embedding_length / head_count
}

TEST_CASE("from_gguf reads yarn's beta, attention and context keys as transformers' parameters") {
    // Every key away from its default, in the GGUF file and in config.json alike: the same
    // RopeScaling, the same logits.
    ScratchDir dir("llama-gguf-rope-yarn-keys");
    GgufParts parts("yarn");
    parts.set("llama.rope.scaling.original_context_length", GgufValue::uint32(32));
    parts.set("llama.rope.scaling.yarn_beta_fast", GgufValue::float32(16.0f));
    parts.set("llama.rope.scaling.yarn_beta_slow", GgufValue::float32(2.0f));
    parts.set("llama.rope.scaling.yarn_attn_factor", GgufValue::float32(1.5f));
    parts.set("llama.rope.scaling.attn_factor", GgufValue::float32(0.5f));  // times yarn's
    parts.set("llama.rope.scaling.yarn_ext_factor", GgufValue::float32(1.0f));
    parts.set("llama.rope.scaling.yarn_log_multiplier", GgufValue::float32(0.0f));
    const std::string path = parts.save(dir, "keys.gguf");
    const LlamaConfig c = LlamaConfig::from_gguf(headwise::io::load_gguf(path));
    CHECK(c.rope_scaling.original_max_position == 32);
    CHECK(c.rope_scaling.beta_fast == 16.0);
    CHECK(c.rope_scaling.beta_slow == 2.0);
    CHECK(c.rope_scaling.attention_factor == 0.75);

    std::string config = read_text(model_dir("yarn") + "/config.json");
    const std::string from = "\"original_max_position_embeddings\": 16,";
    const auto at = config.find(from);
    REQUIRE(at != std::string::npos);
    config.replace(at, from.size(),
                   "\"original_max_position_embeddings\": 32, \"beta_fast\": 16.0, "
                   "\"beta_slow\": 2.0, \"attention_factor\": 0.75,");
    std::filesystem::copy_file(model_dir("yarn") + "/model.safetensors",
                               dir.file("model.safetensors"));
    std::ofstream(dir.file("config.json")) << config;
    const LlamaConfig hf = LlamaConfig::from_json_file(dir.file("config.json"));
    CHECK(c.rope_scaling == hf.rope_scaling);

    auto gguf = LlamaForCausalLM<float>::from_gguf(path, GgufWeights::float32);
    auto pretrained = LlamaForCausalLM<float>::from_pretrained(dir.path().string());
    const headwise::test::ScaledDifference d =
        headwise::test::scaled_difference(logits_of(gguf), logits_of(pretrained));
    INFO(d.str());
    CHECK(d.rel <= 1e-6);
}

TEST_CASE("from_gguf reads rope_freqs.weight as the frequency divisors of rope type llama3") {
    const LlamaConfig c = LlamaConfig::from_gguf(headwise::io::load_gguf(gguf_file("llama3")));
    const LlamaConfig hf = LlamaConfig::from_json_file(model_dir("llama3") + "/config.json");
    CHECK(c.rope_scaling.type == RopeScalingType::none);
    REQUIRE(c.rope_scaling.frequency_factors.size() == 4);
    // Wavelengths 6.3, 63, 628, 6283 against the original context 64: kept, smoothed, slowed
    // down twice (factor 8).
    CHECK(c.rope_scaling.frequency_factors[0] == 1.0);
    CHECK(c.rope_scaling.frequency_factors[2] == 8.0);
    CHECK(c.rope_scaling.frequency_factors[3] == 8.0);
    // Each frequency that of llama3 config.json's, within the float32 rounding of the file's
    // factors (and of the converter's frequencies in float32).
    for (Index i = 0; i < 4; ++i) {
        const double got = headwise::ops::rope_frequency(c.rope_theta, 8, c.rope_scaling, 0, i);
        const double want = headwise::ops::rope_frequency(hf.rope_theta, 8, hf.rope_scaling, 0, i);
        CAPTURE(i, got, want);
        CHECK(std::abs(got - want) <= 1e-7 * want);
    }
    CHECK(c.rope_scaling.frequency_factors[1] != 1.0);  // the smoothed band is not a no-op
    // The model holds them: its rotary options carry the factors, the file's tensor is read.
    auto model = LlamaForCausalLM<float>::from_gguf(gguf_file("llama3"));
    CHECK(model.config().rope_scaling.frequency_factors == c.rope_scaling.frequency_factors);
    // A configuration whose factors do not count the pairs builds no model.
    LlamaConfig miscounted = c;
    miscounted.rope_scaling.frequency_factors.pop_back();
    const auto build = [&] {
        LlamaForCausalLM<float>(miscounted, headwise::Projection::fused, headwise::uninitialized);
    };
    CHECK_THROWS_AS(build(), std::invalid_argument);
    CHECK_THROWS_WITH(
        build(), ContainsSubstring(": options.rotary.scaling.frequency_factors: must be empty or "
                                   "hold one factor per rotated pair (D / 2 = 4), got 3 factors"));
}

TEMPLATE_TEST_CASE("GGUF rope scalings give the config.json model's logits and greedy ids", "",
                   float, double) {
    using T = TestType;
    const std::string name = GENERATE(as<std::string>{}, "llama3", "yarn");
    const GgufWeights weights = GENERATE(GgufWeights::stored, GgufWeights::float32);
    if (!std::is_same_v<T, float> && weights == GgufWeights::stored) return;  // float only
    CAPTURE(name, static_cast<int>(weights));
    auto gguf = LlamaForCausalLM<T>::from_gguf(gguf_file(name), weights);
    auto pretrained = LlamaForCausalLM<T>::from_pretrained(model_dir(name));
    const Tensor<T> got = logits_of(gguf);
    {
        // Against the directory's model: the same F16 weights, the frequencies within float32
        // rounding (llama3's factors and the epsilon are FLOAT32 in the file): 1.3e-10 in
        // double; in float 0 dequantized, 6.2e-7 multiplied as F16 blocks.
        const double tol = std::is_same_v<T, double> ? 1e-9 : 1e-6;
        const headwise::test::ScaledDifference d =
            headwise::test::scaled_difference(got, logits_of(pretrained));
        INFO("against from_pretrained: " << d.str());
        CHECK(d.rel <= tol);
    }
    {
        // Against transformers' float32 logits, as test_llama_variants holds the directory.
        const auto want = headwise::load_npy<double>(model_dir(name) + "/logits.npy");
        const headwise::test::ScaledDifference d = headwise::test::scaled_difference(got, want);
        INFO("against transformers: " << d.str());
        CHECK(d.rel <= 1e-5);
    }
    const std::vector<std::int64_t> ids = greedy(gguf);
    CHECK(ids == recorded_greedy(name));
    CHECK(ids == greedy(pretrained));
}

TEST_CASE("from_gguf refuses malformed rope scaling keys, naming the key and the value") {
    ScratchDir dir("llama-gguf-rope-keys");
    struct Case {
        const char* name;
        const char* fixture;
        std::function<void(GgufParts&)> edit;
        std::string message;  // after "<function>: <path>: "
    };
    const std::string s = "llama.rope.scaling.";
    const std::vector<Case> cases = {
        {"type", "yarn", [&](GgufParts& p) { p.set(s + "type", GgufValue::string("longrope")); },
         s + "type: only \"none\", \"linear\" and \"yarn\" rope scaling are read from GGUF files, "
             "got the STRING 'longrope'"},
        {"type_int", "yarn", [&](GgufParts& p) { p.set(s + "type", GgufValue::int32(2)); },
         s + "type: only \"none\", \"linear\" and \"yarn\" rope scaling are read from GGUF files, "
             "got the INT32 2"},
        {"factor_missing", "yarn", [&](GgufParts& p) { p.erase(s + "factor"); },
         s + "factor: missing (rope.scaling.type \"yarn\" needs it)"},
        {"factor_low", "yarn", [&](GgufParts& p) { p.set(s + "factor", GgufValue::float32(0.5f)); },
         s + "factor: expected a finite FLOAT32 or FLOAT64 of at least 1, got the FLOAT32 0.5"},
        {"beta_fast", "yarn",
         [&](GgufParts& p) { p.set(s + "yarn_beta_fast", GgufValue::float32(0.0f)); },
         s + "yarn_beta_fast: expected a finite FLOAT32 or FLOAT64 above 0, got the FLOAT32 0"},
        {"beta_slow", "yarn",
         [&](GgufParts& p) { p.set(s + "yarn_beta_slow", GgufValue::string("1")); },
         s + "yarn_beta_slow: expected a finite FLOAT32 or FLOAT64 above 0, got the STRING '1'"},
        {"yarn_attn_factor", "yarn",
         [&](GgufParts& p) { p.set(s + "yarn_attn_factor", GgufValue::float32(-1.0f)); },
         s + "yarn_attn_factor: expected a finite FLOAT32 or FLOAT64 above 0, got the FLOAT32 -1"},
        {"context", "yarn",
         [&](GgufParts& p) { p.set(s + "original_context_length", GgufValue::uint32(0)); },
         s + "original_context_length: expected a positive integer (one for all layers), got "
             "the UINT32 0"},
        {"ext_factor", "yarn",
         [&](GgufParts& p) { p.set(s + "yarn_ext_factor", GgufValue::float32(0.5f)); },
         s + "yarn_ext_factor: only 1 (the full YaRN ramp, as transformers computes it; "
             "negative: unset) is read, got the FLOAT32 0.5"},
        {"log_multiplier", "yarn",
         [&](GgufParts& p) { p.set(s + "yarn_log_multiplier", GgufValue::float32(0.1f)); },
         s + "yarn_log_multiplier: only 0 is read (llama.cpp reads it for DeepSeek models only), "
             "got the FLOAT32 0.1"},
        {"attn_factor_none", "llama3",
         [&](GgufParts& p) { p.set(s + "attn_factor", GgufValue::float32(2.0f)); },
         s + "attn_factor: only 1 is read for rope scaling \"none\" (a factor on cos and sin "
             "needs \"yarn\"), got the FLOAT32 2"},
    };
    for (const Case& c : cases) {
        CAPTURE(c.name);
        GgufParts parts(c.fixture);
        c.edit(parts);
        const std::string path = parts.save(dir, std::string(c.name) + ".gguf");
        CHECK_THROWS_MATCHES(LlamaForCausalLM<float>::from_gguf(path), std::runtime_error,
                             Message(std::string(kConfigFn) + ": " + path + ": " + c.message));
    }
    // Values llama.cpp writes for "unset" and the defaults are read.
    GgufParts parts("yarn");
    parts.set(s + "yarn_ext_factor", GgufValue::float32(-1.0f));
    parts.set(s + "attn_factor", GgufValue::float32(1.0f));
    const LlamaConfig c =
        LlamaConfig::from_gguf(headwise::io::load_gguf(parts.save(dir, "ok.gguf")));
    CHECK(c.rope_scaling ==
          LlamaConfig::from_json_file(model_dir("yarn") + "/config.json").rope_scaling);
}

TEST_CASE("from_gguf reads a rope.scaling.factor without a type as linear, as llama.cpp does") {
    ScratchDir dir("llama-gguf-rope-untyped");
    GgufParts parts("model");  // linear, factor 2
    parts.erase("llama.rope.scaling.type");
    const std::string path = parts.save(dir, "untyped.gguf");
    const LlamaConfig c = LlamaConfig::from_gguf(headwise::io::load_gguf(path));
    CHECK(c.rope_scaling_factor == 2.0);
    CHECK(c.rope_scaling.type == RopeScalingType::none);
}

TEST_CASE("from_gguf reads a rope_freqs.weight stored as F16") {
    ScratchDir dir("llama-gguf-rope-f16");
    GgufParts parts("llama3");
    static const std::uint16_t kHalves[4] = {0x3C00, 0x4000, 0x4800, 0x4800};  // 1, 2, 8, 8
    for (headwise::io::GgufTensorData& t : parts.tensors)
        if (t.name == "rope_freqs.weight") {
            t.type = Type::f16;
            t.bytes = kHalves;
        }
    const std::string path = parts.save(dir, "f16.gguf");
    const LlamaConfig c = LlamaConfig::from_gguf(headwise::io::load_gguf(path));
    CHECK(c.rope_scaling.frequency_factors == std::vector<double>{1.0, 2.0, 8.0, 8.0});
}

TEST_CASE("from_gguf refuses a rope_freqs.weight of the wrong shape, values or architecture") {
    ScratchDir dir("llama-gguf-rope-freqs");
    struct Case {
        const char* name;
        std::function<void(GgufParts&)> edit;
        std::string message;  // after "<function>: <path>: tensor 'rope_freqs.weight': "
    };
    const std::vector<Case> cases = {
        {"shape",
         [](GgufParts& p) {
             p.set_freqs({1, 2, 8, 8, 8});
         },
         "has shape [5], expected [4] (one factor per rotated pair: the head dimension / 2)"},
        {"zero",
         [](GgufParts& p) {
             p.set_freqs({1, 0, 8, 8});
         },
         "value 1 must be finite and positive (it divides the frequency), got 0"},
        {"negative",
         [](GgufParts& p) {
             p.set_freqs({1, 2, -8, 8});
         },
         "value 2 must be finite and positive (it divides the frequency), got -8"},
        {"nan",
         [](GgufParts& p) {
             p.set_freqs({std::nanf(""), 2, 8, 8});
         },
         "value 0 must be finite and positive (it divides the frequency), got nan"},
        {"inf",
         [](GgufParts& p) {
             p.set_freqs({1, 2, 8, HUGE_VALF});
         },
         "value 3 must be finite and positive (it divides the frequency), got inf"},
        {"qwen2",
         [](GgufParts& p) {
             // The same file as architecture "qwen2": every llama.* key renamed.
             for (auto& kv : p.metadata)
                 if (kv.first.rfind("llama.", 0) == 0) kv.first = "qwen2." + kv.first.substr(6);
             p.set("general.architecture", GgufValue::string("qwen2"));
         },
         "is read for general.architecture \"llama\" only (llama.cpp's converter writes it for "
         "Llama 3.1's rope type llama3), got \"qwen2\""},
    };
    for (const Case& c : cases) {
        CAPTURE(c.name);
        GgufParts parts("llama3");
        c.edit(parts);
        const std::string path = parts.save(dir, std::string(c.name) + ".gguf");
        CHECK_THROWS_MATCHES(LlamaForCausalLM<float>::from_gguf(path), std::runtime_error,
                             Message(std::string(kConfigFn) + ": " + path +
                                     ": tensor 'rope_freqs.weight': " + c.message));
    }
}

}  // namespace test_llama_gguf_rope
