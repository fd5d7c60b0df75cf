// SPDX-License-Identifier: MIT
// models/llama.hpp, llama_gguf.hpp: the Llama configurations published today (rope_type llama3,
// dynamic and yarn, head_dim != hidden_size / num_attention_heads, Qwen2's q/k/v biases) against
// transformers' logits and greedy generations (tests/golden/make_llama_variants_golden.py),
// from config.json and from GGUF metadata, and what stays unsupported refused by name.

#include <headwise/io/gguf.hpp>
#include <headwise/io/npy.hpp>
#include <headwise/io/safetensors.hpp>
#include <headwise/models/generation.hpp>
#include <headwise/models/llama.hpp>

#include <algorithm>  // std::max, std::max_element, std::copy
#include <cmath>      // std::abs, std::isfinite, HUGE_VAL
#include <cstdint>    // std::int64_t, std::uint32_t
#include <fstream>    // std::ifstream, std::ofstream
#include <iterator>   // std::istreambuf_iterator
#include <sstream>    // std::istringstream
#include <string>     // std::string
#include <utility>    // std::pair
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/golden.hpp"
#include "support/instantiations.hpp"
#include "support/projections.hpp"

namespace test_llama_variants {

using headwise::Index;
using headwise::Projection;
using headwise::RopeScalingType;
using headwise::Shape;
using headwise::Tensor;
using headwise::io::GgufValue;
using headwise::models::GenerationOptions;
using headwise::models::GgufWeights;
using headwise::models::LlamaConfig;
using headwise::models::LlamaForCausalLM;
using headwise::test::kProjections;
using headwise::test::ScratchDir;

namespace {

std::string model_dir(const std::string& name) {
    return (headwise::test::golden_dir() / "llama_variants" / name).string();
}

// The prompt of tests/golden/make_llama_variants_golden.py.
std::vector<std::int64_t> prompt(const std::string&) {
    return {1, 17, 42, 9, 5, 63, 12, 33, 8, 50, 21, 3};
}

std::vector<std::int64_t> recorded_greedy(const std::string& name) {
    std::ifstream in(model_dir(name) + "/greedy.txt");
    std::vector<std::int64_t> ids;
    for (std::int64_t id; in >> id;) ids.push_back(id);
    return ids;
}

// Largest |a - b| / max(|b|, 1) of logits [L, V].
template <class T>
double logits_error(const Tensor<T>& got, const Tensor<double>& want) {
    REQUIRE(got.shape() == want.shape());
    double worst = 0;
    for (Index i = 0; i < got.numel(); ++i) {
        const double w = want.data()[i], g = static_cast<double>(got.data()[i]);
        if (!std::isfinite(w) || !std::isfinite(g)) return HUGE_VAL;  // NaN fails
        worst = std::max(worst, std::abs(g - w) / std::max(std::abs(w), 1.0));
    }
    return worst;
}

template <class T>
Tensor<T> logits_of(LlamaForCausalLM<T>& model, const std::vector<std::int64_t>& ids) {
    Tensor<std::int64_t> batch(Shape{static_cast<Index>(ids.size())});
    for (std::size_t i = 0; i < ids.size(); ++i) batch.data()[i] = ids[i];
    return model.forward(batch);  // [L, V]
}

std::string read_text(const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_text(const std::string& path, const std::string& text) {
    std::ofstream out(path);
    out << text;
}

/// The Hugging Face directory `name` as llama.cpp's converter would write it: F32 tensors under
/// llama.cpp's names (attn_q and attn_k rows permuted for "llama", as they are stored), the
/// architecture's keys; key_length and value_length when `head_dim` is set.
std::string as_gguf(const std::string& name, const ScratchDir& dir) {
    const LlamaConfig c = LlamaConfig::from_json_file(model_dir(name) + "/config.json");
    const auto sd = headwise::io::load_safetensors<float>(model_dir(name) + "/model.safetensors");
    const std::string a = c.model_type + ".";
    std::vector<std::pair<std::string, GgufValue>> meta = {
        {"general.architecture", GgufValue::string(c.model_type)},
        {a + "embedding_length", GgufValue::uint32(static_cast<std::uint32_t>(c.hidden_size))},
        {a + "block_count", GgufValue::uint32(static_cast<std::uint32_t>(c.num_hidden_layers))},
        {a + "feed_forward_length",
         GgufValue::uint32(static_cast<std::uint32_t>(c.intermediate_size))},
        {a + "context_length",
         GgufValue::uint32(static_cast<std::uint32_t>(c.max_position_embeddings))},
        {a + "attention.head_count",
         GgufValue::uint32(static_cast<std::uint32_t>(c.num_attention_heads))},
        {a + "attention.head_count_kv",
         GgufValue::uint32(static_cast<std::uint32_t>(c.num_key_value_heads))},
        {a + "attention.layer_norm_rms_epsilon",
         GgufValue::float32(static_cast<float>(c.rms_norm_eps))},
        {a + "rope.freq_base", GgufValue::float32(static_cast<float>(c.rope_theta))},
        {a + "vocab_size", GgufValue::uint32(static_cast<std::uint32_t>(c.vocab_size))},
    };
    if (c.head_dim > 0) {
        meta.push_back({a + "attention.key_length",
                        GgufValue::uint32(static_cast<std::uint32_t>(c.head_dim))});
        meta.push_back({a + "attention.value_length",
                        GgufValue::uint32(static_cast<std::uint32_t>(c.head_dim))});
    }
    const Index D = c.head_dim > 0 ? c.head_dim : c.hidden_size / c.num_attention_heads;
    std::vector<Tensor<float>> kept;  // the tensors' bytes, alive until the save
    kept.reserve(64);
    std::vector<headwise::io::GgufTensorData> tensors;
    const auto add = [&](const std::string& gguf, const std::string& hf, Index heads) {
        Tensor<float> t = sd.at(hf);
        if (heads > 0 && c.model_type == "llama") {  // the converter's permutation
            const Index rows = t.shape()[0], cols = t.rank() == 2 ? t.shape()[1] : 1;
            Tensor<float> p(t.shape());
            for (Index r = 0; r < rows; ++r) {
                const Index to = headwise::models::detail::llama_gguf_row(r, D);
                for (Index k = 0; k < cols; ++k) p.data()[to * cols + k] = t.data()[r * cols + k];
            }
            t = std::move(p);
        }
        kept.push_back(std::move(t));
        tensors.push_back(
            {gguf, headwise::quant::Type::f32, kept.back().shape(), kept.back().data()});
    };
    add("token_embd.weight", "model.embed_tokens.weight", 0);
    const std::string m = "model.layers.0.";
    add("blk.0.attn_norm.weight", m + "input_layernorm.weight", 0);
    add("blk.0.attn_q.weight", m + "self_attn.q_proj.weight", c.num_attention_heads);
    add("blk.0.attn_k.weight", m + "self_attn.k_proj.weight", c.num_key_value_heads);
    add("blk.0.attn_v.weight", m + "self_attn.v_proj.weight", 0);
    add("blk.0.attn_output.weight", m + "self_attn.o_proj.weight", 0);
    if (c.attention_bias) {
        add("blk.0.attn_q.bias", m + "self_attn.q_proj.bias", c.num_attention_heads);
        add("blk.0.attn_k.bias", m + "self_attn.k_proj.bias", c.num_key_value_heads);
        add("blk.0.attn_v.bias", m + "self_attn.v_proj.bias", 0);
    }
    add("blk.0.ffn_norm.weight", m + "post_attention_layernorm.weight", 0);
    add("blk.0.ffn_gate.weight", m + "mlp.gate_proj.weight", 0);
    add("blk.0.ffn_up.weight", m + "mlp.up_proj.weight", 0);
    add("blk.0.ffn_down.weight", m + "mlp.down_proj.weight", 0);
    add("output_norm.weight", "model.norm.weight", 0);
    const std::string path = dir.file(name + ".gguf");
    headwise::io::save_gguf(path, meta, tensors);
    return path;
}

}  // namespace

TEST_CASE("LlamaConfig reads the rope types, head_dim and Qwen2's biases from config.json",
          "[llama][variants]") {
    const LlamaConfig l3 = LlamaConfig::from_json_file(model_dir("llama3") + "/config.json");
    CHECK(l3.rope_scaling.type == RopeScalingType::llama3);
    CHECK(l3.rope_scaling.factor == 8.0);
    CHECK(l3.rope_scaling.low_freq_factor == 1.0);
    CHECK(l3.rope_scaling.high_freq_factor == 4.0);
    CHECK(l3.rope_scaling.original_max_position == 64);
    CHECK(l3.rope_scaling_factor == 1.0);
    const LlamaConfig dy = LlamaConfig::from_json_file(model_dir("dynamic") + "/config.json");
    CHECK(dy.rope_scaling.type == RopeScalingType::dynamic);
    CHECK(dy.rope_scaling.factor == 4.0);
    CHECK(dy.rope_scaling.original_max_position == 8);
    const LlamaConfig ya = LlamaConfig::from_json_file(model_dir("yarn") + "/config.json");
    CHECK(ya.rope_scaling.type == RopeScalingType::yarn);
    CHECK(ya.rope_scaling.factor == 4.0);
    CHECK(ya.rope_scaling.original_max_position == 16);
    CHECK(ya.rope_scaling.attention_factor == Approx(0.1 * std::log(4.0) + 1.0).epsilon(1e-15));
    CHECK(ya.rope_scaling.beta_fast == 32.0);
    CHECK(ya.rope_scaling.beta_slow == 1.0);
    CHECK(ya.rope_scaling.truncate);
    const LlamaConfig hd = LlamaConfig::from_json_file(model_dir("head_dim") + "/config.json");
    CHECK(hd.head_dim == 12);
    CHECK(hd.hidden_size == 32);
    const LlamaConfig qw = LlamaConfig::from_json_file(model_dir("qwen2") + "/config.json");
    CHECK(qw.model_type == "qwen2");
    CHECK(qw.attention_bias);
    CHECK_FALSE(qw.o_proj_bias);
    // Qwen2's state dict: q/k/v biases, no o_proj bias.
    auto model = LlamaForCausalLM<float>::from_pretrained(model_dir("qwen2"));
    const auto sd = model.state_dict();
    CHECK(sd.count("model.layers.0.self_attn.q_proj.bias") == 1);
    CHECK(sd.count("model.layers.0.self_attn.v_proj.bias") == 1);
    CHECK(sd.count("model.layers.0.self_attn.o_proj.bias") == 0);
    auto wide = LlamaForCausalLM<float>::from_pretrained(model_dir("head_dim"));
    CHECK(wide.state_dict().at("model.layers.0.self_attn.q_proj.weight").shape() == Shape{48, 32});
    CHECK(wide.state_dict().at("model.layers.0.self_attn.o_proj.weight").shape() == Shape{32, 48});
}

TEMPLATE_TEST_CASE("Llama variants give transformers' logits and greedy generations",
                   "[llama][variants]", float, double) {
    using T = TestType;
    const std::string name =
        GENERATE(as<std::string>{}, "llama3", "dynamic", "yarn", "head_dim", "qwen2");
    const Projection projection = GENERATE(from_range(kProjections));
    CAPTURE(name, projection);
    auto model = LlamaForCausalLM<T>::from_pretrained(model_dir(name), projection);
    const std::vector<std::int64_t> ids = prompt(name);
    // Against transformers in float32 (whose rotary tables are float32 in any dtype): double
    // meets the float tolerance.
    const auto want = headwise::load_npy<double>(model_dir(name) + "/logits.npy");
    const double err = logits_error(logits_of(model, ids), want);
    CAPTURE(err);
    CHECK(err <= 1e-5);
    GenerationOptions options;
    options.max_new_tokens = 20;
    options.stop_tokens = model.config().eos_token_ids;
    if (name != "dynamic") {
        CHECK(headwise::models::generate(model, {ids}, options).at(0) == recorded_greedy(name));
    } else {  // beyond max_position_embeddings, which generate() refuses: the steps by hand
        auto cache = model.make_cache(1, static_cast<Index>(ids.size()) + options.max_new_tokens);
        Tensor<std::int64_t> step(Shape{1, static_cast<Index>(ids.size())});
        std::copy(ids.begin(), ids.end(), step.data());
        std::vector<std::int64_t> got;
        while (static_cast<Index>(got.size()) < options.max_new_tokens) {
            const Tensor<T> last = model.decode_last(step, cache);  // [1, 1, V]
            const Index V = last.numel();
            const std::int64_t id = std::max_element(last.data(), last.data() + V) - last.data();
            got.push_back(id);
            if (id == 2) break;  // the end of sequence
            step = Tensor<std::int64_t>(Shape{1, 1});
            step.data()[0] = id;
        }
        CHECK(got == recorded_greedy(name));
    }
}

TEST_CASE("head_dim and Qwen2 from GGUF metadata give the directory's logits",
          "[llama][variants][gguf]") {
    ScratchDir dir("llama-variants-gguf");
    for (const std::string name : {"head_dim", "qwen2"}) {
        CAPTURE(name);
        const std::string path = as_gguf(name, dir);
        const LlamaConfig c = LlamaConfig::from_gguf(headwise::io::load_gguf(path));
        const LlamaConfig h = LlamaConfig::from_json_file(model_dir(name) + "/config.json");
        CHECK(c.model_type == h.model_type);
        CHECK(c.head_dim == h.head_dim);
        CHECK(c.attention_bias == h.attention_bias);
        CHECK(c.o_proj_bias == (h.attention_bias && h.o_proj_bias));
        for (const GgufWeights w : {GgufWeights::float32, GgufWeights::stored}) {
            auto model = LlamaForCausalLM<float>::from_gguf(path, w);
            const auto want = headwise::load_npy<double>(model_dir(name) + "/logits.npy");
            const double err = logits_error(logits_of(model, prompt(name)), want);
            CAPTURE(err);
            CHECK(err <= 1e-5);
        }
    }
}

TEST_CASE("Llama configurations that stay unsupported are refused by key and value",
          "[llama][variants]") {
    ScratchDir dir("llama-variants-refused");
    const std::string base = read_text(model_dir("llama3") + "/config.json");
    const std::string fn = "headwise::models::LlamaConfig::from_json_file: ";
    const auto refused = [&](const std::string& text, const std::string& message) {
        write_text(dir.file("config.json"), text);
        CHECK_THROWS_MATCHES(LlamaConfig::from_json_file(dir.file("config.json")),
                             std::runtime_error,
                             Message(fn + dir.file("config.json") + ": " + message));
    };
    const auto edited = [&](const std::string& from, const std::string& to) {
        std::string text = base;
        const auto at = text.find(from);
        REQUIRE(at != std::string::npos);
        return text.replace(at, from.size(), to);
    };
    refused(edited("\"rope_type\": \"llama3\"", "\"rope_type\": \"longrope\""),
            "rope_parameters: only the \"default\", \"linear\", \"llama3\", \"dynamic\" and "
            "\"yarn\" rope types are supported, got \"longrope\"");
    refused(edited("\"low_freq_factor\": 1.0,", ""),
            "rope_parameters: low_freq_factor missing (rope type llama3)");
    refused(edited("\"high_freq_factor\": 4.0", "\"high_freq_factor\": 0.5"),
            "high_freq_factor: expected a finite number above 1.0, got 0.5");
    refused(edited("\"model_type\": \"llama\"", "\"model_type\": \"qwen3\""),
            "model_type: expected \"llama\" or \"qwen2\", got \"qwen3\"");
    refused(edited("\"hidden_size\": 32,", "\"hidden_size\": 32, \"head_dim\": 7,"),
            "head_dim: must be even (RoPE rotates pairs of features), got 7");
    const std::string qwen = read_text(model_dir("qwen2") + "/config.json");
    std::string sliding = qwen;
    const auto at = sliding.find("\"use_sliding_window\": false");
    REQUIRE(at != std::string::npos);
    sliding.replace(at, 27, "\"use_sliding_window\": true");
    refused(sliding, "use_sliding_window: sliding-window attention is not supported, got true");
}

TEST_CASE("GGUF rope scalings other than none, linear and yarn are refused by name",
          "[llama][variants][gguf]") {
    ScratchDir dir("llama-variants-gguf-refused");
    const std::string path = as_gguf("head_dim", dir);
    const headwise::io::GgufFile file = headwise::io::load_gguf(path);
    auto meta = file.metadata();
    std::vector<headwise::io::GgufTensorData> tensors;
    for (const headwise::io::GgufTensorInfo& t : file.tensors())
        tensors.push_back({t.name, t.type, t.shape(), file.tensor_data(t)});
    const std::string fn = "headwise::models::LlamaConfig::from_gguf: ";
    {
        auto m = meta;
        m.push_back({"llama.rope.scaling.type", GgufValue::string("longrope")});
        const std::string p = dir.file("longrope.gguf");
        headwise::io::save_gguf(p, m, tensors);
        CHECK_THROWS_MATCHES(LlamaForCausalLM<float>::from_gguf(p), std::runtime_error,
                             Message(fn + p +
                                     ": llama.rope.scaling.type: only \"none\", \"linear\" and "
                                     "\"yarn\" rope scaling are read from GGUF files, got the "
                                     "STRING 'longrope'"));
    }
    {
        auto m = meta;
        for (auto& kv : m)
            if (kv.first == "llama.attention.value_length") kv.second = GgufValue::uint32(8);
        const std::string p = dir.file("value_length.gguf");
        headwise::io::save_gguf(p, m, tensors);
        CHECK_THROWS_MATCHES(
            LlamaForCausalLM<float>::from_gguf(p), std::runtime_error,
            Message(fn + p +
                    ": llama.attention.value_length: only the head dimension 12 "
                    "(attention.key_length, or embedding_length / head_count) is supported, got "
                    "8"));
    }
}

}  // namespace test_llama_variants
