// SPDX-License-Identifier: MIT
// check_quantize: the tests' side of the quantize program (check_quantize.cmake runs both).
//
//   check_quantize make DIR [sharded]      writes a small Hugging Face Llama directory: 2 layers,
//                                          width 256, 4 heads of 64 (2 key/value heads), SwiGLU
//                                          width 512, 300 tokens, untied output, random weights
//                                          (in two shards and model.safetensors.index.json with
//                                          `sharded`); a byte-level BPE tokenizer.json,
//                                          tokenizer_config.json
//   check_quantize hf DIR OUT.gguf TYPE    checks quantize's output from DIR: the metadata, the
//                                          tensors llama.cpp expects with the type the rule of
//                                          docs/formats.md gives each, and every block equal to
//                                          quant::quantize_row of the weights as llama.cpp lays
//                                          them out (attn_q and attn_k rows permuted per head)
//   check_quantize gguf IN.gguf OUT.gguf TYPE   the same for a GGUF input: every metadata key
//                                          carried over, the blocks those of the input's
//                                          tensors dequantized and quantized again
//   check_quantize rope OUT.gguf REF.gguf  the rope scaling of quantize's output against REF's
//                                          (llama.cpp's converter's): the same llama.rope.* keys
//                                          and values, rope_freqs.weight in both or neither,
//                                          F32, its values within 1e-6 relative (float32 rounding)
//   check_quantize same A.gguf B.gguf      the same tensors (names, order, types, shapes) with
//                                          the same bytes, e.g. quantize's output and
//                                          llama-quantize's from the same input; prints how
//                                          many blocks were compared and how many differ
//
// Prints what differs first and exits 1; exits 0 when everything matches.
#include <headwise/io/gguf.hpp>
#include <headwise/io/safetensors.hpp>
#include <headwise/quant/quantize.hpp>
#include <headwise/random.hpp>

#include <cmath>       // std::abs
#include <cstdint>     // std::uint8_t, std::uint32_t
#include <cstdio>      // std::printf, std::fprintf
#include <cstring>     // std::memcmp
#include <exception>   // std::exception
#include <filesystem>  // std::filesystem::create_directories, std::filesystem::path
#include <fstream>     // std::ofstream
#include <map>         // std::map
#include <stdexcept>   // std::runtime_error
#include <string>      // std::string, std::to_string
#include <vector>      // std::vector

namespace {

using namespace headwise;
using quant::Type;

constexpr Index kLayers = 2, kE = 256, kHeads = 4, kKvHeads = 2, kD = 64, kI = 512, kVocab = 300;

void write_text(const std::filesystem::path& path, const std::string& text) {
    std::ofstream f(path, std::ios::binary);
    f << text;
    if (!f) throw std::runtime_error("cannot write " + path.string());
}

void make(const std::string& dir, bool sharded) {
    std::filesystem::create_directories(dir);
    const std::filesystem::path d(dir);
    write_text(d / "config.json", R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
  "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300,
  "max_position_embeddings": 128, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
  "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2
})");
    // A byte-level BPE: ids 3.. the printable ASCII characters (as GPT-2's byte-to-unicode map
    // leaves them), a few merges, three added special tokens and one added plain token.
    std::string vocab, merges;
    Index id = 3;
    for (int c = '!'; c <= '~'; ++c, ++id) {
        std::string s(1, static_cast<char>(c));
        if (c == '"' || c == '\\') s = "\\" + s;
        vocab += (vocab.empty() ? "" : ", ") + std::string("\"") + s + "\": " + std::to_string(id);
    }
    vocab += ", \"th\": " + std::to_string(id) + ", \"the\": " + std::to_string(id + 1);
    merges = R"(["t h", ["th", "e"]])";
    write_text(d / "tokenizer.json",
               R"({"version": "1.0", "added_tokens": [
  {"id": 0, "content": "<|endoftext|>", "special": true},
  {"id": 1, "content": "<|im_start|>", "special": true},
  {"id": 2, "content": "<|im_end|>", "special": true},
  {"id": 299, "content": "<think>", "special": false}],
 "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
  {"type": "Digits", "individual_digits": true},
  {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}]},
 "model": {"type": "BPE", "vocab": {)" +
                   vocab + "}, \"merges\": " + merges + "}}");
    write_text(d / "tokenizer_config.json", R"({"add_bos_token": false,
 "bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "unk_token": "<|endoftext|>",
 "pad_token": "<|im_end|>", "chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}"})");
    Generator rng(5);
    std::map<std::string, Tensor<float>> w;
    const auto matrix = [&](Index rows, Index cols) {
        Tensor<float> t = Tensor<float>::randn(Shape{rows, cols}, rng);
        for (Index i = 0; i < t.numel(); ++i) t.data()[i] *= 0.02f;
        return t;
    };
    w["model.embed_tokens.weight"] = matrix(kVocab, kE);
    w["lm_head.weight"] = matrix(kVocab, kE);
    w["model.norm.weight"] = Tensor<float>::randn(Shape{kE}, rng);
    for (Index n = 0; n < kLayers; ++n) {
        const std::string p = "model.layers." + std::to_string(n) + ".";
        w[p + "input_layernorm.weight"] = Tensor<float>::randn(Shape{kE}, rng);
        w[p + "post_attention_layernorm.weight"] = Tensor<float>::randn(Shape{kE}, rng);
        w[p + "self_attn.q_proj.weight"] = matrix(kHeads * kD, kE);
        w[p + "self_attn.k_proj.weight"] = matrix(kKvHeads * kD, kE);
        w[p + "self_attn.v_proj.weight"] = matrix(kKvHeads * kD, kE);
        w[p + "self_attn.o_proj.weight"] = matrix(kE, kHeads * kD);
        w[p + "mlp.gate_proj.weight"] = matrix(kI, kE);
        w[p + "mlp.up_proj.weight"] = matrix(kI, kE);
        w[p + "mlp.down_proj.weight"] = matrix(kE, kI);
    }
    w["model.layers.0.self_attn.rotary_emb.inv_freq"] = Tensor<float>(Shape{kD / 2});
    if (!sharded) return io::save_safetensors(d / "model.safetensors", w);
    // Layer 1 in the second shard, everything else in the first.
    std::map<std::string, Tensor<float>> shard[2];
    std::string index = "{\"weight_map\": {";
    for (auto& [name, t] : w) {
        const int k = name.compare(0, 15, "model.layers.1.") == 0 ? 1 : 0;
        const std::string file = "model-0000" + std::to_string(k + 1) + "-of-00002.safetensors";
        index += (index.back() == '{' ? "\"" : ", \"") + name + "\": \"" + file + "\"";
        shard[k][name] = t;
    }
    write_text(d / "model.safetensors.index.json", index + "}}");
    io::save_safetensors(d / "model-00001-of-00002.safetensors", shard[0]);
    io::save_safetensors(d / "model-00002-of-00002.safetensors", shard[1]);
}

/// Collects mismatches; the first few are printed.
struct Report {
    int failures = 0;
    void fail(const std::string& what) {
        if (failures++ < 10) std::fprintf(stderr, "check_quantize: %s\n", what.c_str());
    }
};

/// The type each matrix should have (docs/formats.md's table, written out for this model).
Type expected_type(const std::string& name, const std::string& request, int layer) {
    const std::map<std::string, Type> base = {
        {"q8_0", Type::q8_0}, {"q4_0", Type::q4_0}, {"q4_1", Type::q4_1}, {"q5_0", Type::q5_0},
        {"q5_1", Type::q5_1}, {"q4_k", Type::q4_k}, {"q6_k", Type::q6_k}, {"q4_k_m", Type::q4_k}};
    if (name.find("norm") != std::string::npos) return Type::f32;
    if (name == "output.weight") return request == "q8_0" ? Type::q8_0 : Type::q6_k;
    // 2 layers: use_more_bits picks layer 1 (i >= 7 n / 8) only.
    if (request == "q4_k_m" && layer == 1 &&
        (name.find("attn_v") != std::string::npos || name.find("ffn_down") != std::string::npos))
        return Type::q6_k;
    return base.at(request);
}

/// Row o of a q/k matrix in llama.cpp's layout is row (o / D) D + (o % 2) D / 2 + (o % D) / 2
/// of Hugging Face's.
Tensor<float> llama_cpp_rows(const Tensor<float>& w) {
    Tensor<float> out(w.shape());
    const Index cols = w.shape()[1];
    for (Index o = 0; o < w.shape()[0]; ++o) {
        const Index r = o % kD;
        const Index from = (o / kD) * kD + (r % 2) * (kD / 2) + r / 2;
        for (Index c = 0; c < cols; ++c) out.data()[o * cols + c] = w.data()[from * cols + c];
    }
    return out;
}

void compare_blocks(Report& report, const io::GgufFile& out, const std::string& name,
                    Type want_type, const Tensor<float>& source) {
    const io::GgufTensorInfo* info = out.find_tensor(name);
    if (!info) return report.fail("no tensor " + name);
    if (info->type != want_type)
        return report.fail(name + ": type " + quant::block_format(info->type).name + ", expected " +
                           quant::block_format(want_type).name);
    if (info->shape() != source.shape())
        return report.fail(name + ": shape " + info->shape().str() + ", expected " +
                           source.shape().str());
    std::vector<std::uint8_t> want(info->bytes);
    quant::quantize_row(want_type, source.data(), want.data(), source.numel());
    if (std::memcmp(want.data(), out.tensor_data(*info), want.size()) != 0)
        report.fail(name + ": blocks differ from quantize_row's");
}

void expect_uint(Report& report, const io::GgufFile& f, const char* key, std::uint64_t v) {
    const io::GgufValue* got = f.find(key);
    if (!got || got->type() != io::GgufValueType::uint32 || got->as_uint() != v)
        report.fail(std::string(key) + ": expected UINT32 " + std::to_string(v));
}

std::uint32_t file_type(const std::string& request) {
    const std::map<std::string, std::uint32_t> t = {{"q8_0", 7},  {"q4_0", 2},   {"q4_1", 3},
                                                    {"q5_0", 8},  {"q5_1", 9},   {"q4_k", 14},
                                                    {"q6_k", 18}, {"q4_k_m", 15}};
    return t.at(request);
}

int check_hf(const std::string& dir, const std::string& path, const std::string& request) {
    Report report;
    // model.safetensors, or the shards make() wrote.
    std::map<std::string, Tensor<float>> w;
    for (const auto& entry : std::filesystem::directory_iterator(dir))
        if (entry.path().extension() == ".safetensors")
            for (auto& [name, t] : io::load_safetensors<float>(entry.path().string())) w[name] = t;
    const io::GgufFile out = io::load_gguf(path);
    if (out.value("general.architecture").as_string() != "llama")
        report.fail("general.architecture is not llama");
    expect_uint(report, out, "llama.block_count", kLayers);
    expect_uint(report, out, "llama.embedding_length", kE);
    expect_uint(report, out, "llama.feed_forward_length", kI);
    expect_uint(report, out, "llama.attention.head_count", kHeads);
    expect_uint(report, out, "llama.attention.head_count_kv", kKvHeads);
    expect_uint(report, out, "llama.rope.dimension_count", kD);
    expect_uint(report, out, "llama.context_length", 128);
    expect_uint(report, out, "llama.vocab_size", kVocab);
    expect_uint(report, out, "general.file_type", file_type(request));
    expect_uint(report, out, "general.quantization_version", 2);
    expect_uint(report, out, "tokenizer.ggml.bos_token_id", 1);
    expect_uint(report, out, "tokenizer.ggml.eos_token_id", 2);
    expect_uint(report, out, "tokenizer.ggml.unknown_token_id", 0);
    expect_uint(report, out, "tokenizer.ggml.padding_token_id", 2);
    if (out.value("tokenizer.ggml.model").as_string() != "gpt2" ||
        out.value("tokenizer.ggml.pre").as_string() != "smollm")
        report.fail("tokenizer.ggml.model / pre are not gpt2 / smollm");
    const auto tokens = out.value("tokenizer.ggml.tokens").to_vector<std::string>();
    const auto types = out.value("tokenizer.ggml.token_type").to_vector<std::int32_t>();
    const auto merges = out.value("tokenizer.ggml.merges").to_vector<std::string>();
    if (tokens.size() != kVocab || types.size() != kVocab || tokens[1] != "<|im_start|>" ||
        tokens[3] != "!" || tokens[3 + '"' - '!'] != "\"" || tokens[97] != "th" ||
        tokens[200] != "[PAD200]" || tokens[299] != "<think>" || types[1] != 3 || types[3] != 1 ||
        types[200] != 5 || types[299] != 4)
        report.fail("tokenizer.ggml.tokens / token_type are not the tokenizer's");
    if (merges != std::vector<std::string>{"t h", "th e"})
        report.fail("tokenizer.ggml.merges are not the tokenizer's");
    if (out.value("tokenizer.ggml.add_bos_token").as_bool())
        report.fail("tokenizer.ggml.add_bos_token is not false");
    if (out.find("tokenizer.chat_template") == nullptr) report.fail("no tokenizer.chat_template");

    // llama.cpp's names, and the order its loader walks them in.
    std::vector<std::string> names = {"output.weight", "output_norm.weight", "token_embd.weight"};
    for (Index n = 0; n < kLayers; ++n)
        for (const char* t : {"attn_k.weight", "attn_norm.weight", "attn_output.weight",
                              "attn_q.weight", "attn_v.weight", "ffn_down.weight",
                              "ffn_gate.weight", "ffn_norm.weight", "ffn_up.weight"})
            names.push_back("blk." + std::to_string(n) + "." + t);
    if (out.tensors().size() != names.size()) report.fail("not 21 tensors");
    for (std::size_t i = 0; i < names.size() && i < out.tensors().size(); ++i)
        if (out.tensors()[i].name != names[i])
            report.fail("tensor " + std::to_string(i) + " is " + out.tensors()[i].name +
                        ", expected " + names[i]);
    const std::map<std::string, std::string> hf = {
        {"output.weight", "lm_head.weight"},
        {"output_norm.weight", "model.norm.weight"},
        {"token_embd.weight", "model.embed_tokens.weight"},
        {"attn_k.weight", "self_attn.k_proj.weight"},
        {"attn_norm.weight", "input_layernorm.weight"},
        {"attn_output.weight", "self_attn.o_proj.weight"},
        {"attn_q.weight", "self_attn.q_proj.weight"},
        {"attn_v.weight", "self_attn.v_proj.weight"},
        {"ffn_down.weight", "mlp.down_proj.weight"},
        {"ffn_gate.weight", "mlp.gate_proj.weight"},
        {"ffn_norm.weight", "post_attention_layernorm.weight"},
        {"ffn_up.weight", "mlp.up_proj.weight"}};
    for (const std::string& name : names) {
        int layer = -1;
        std::string base = name, source;
        if (name.compare(0, 4, "blk.") == 0) {
            layer = name[4] - '0';
            base = name.substr(6);
            source = "model.layers." + std::to_string(layer) + "." + hf.at(base);
        } else {
            source = hf.at(name);
        }
        const Tensor<float>& s = w.at(source);
        const bool permuted = base == "attn_q.weight" || base == "attn_k.weight";
        compare_blocks(report, out, name, expected_type(name, request, layer),
                       permuted ? llama_cpp_rows(s) : s);
    }
    if (report.failures) return 1;
    std::printf("check_quantize: %s (%s): metadata, tokenizer and %zu tensors as expected\n",
                path.c_str(), request.c_str(), names.size());
    return 0;
}

int check_gguf(const std::string& in_path, const std::string& path, const std::string& request) {
    Report report;
    const io::GgufFile in = io::load_gguf(in_path);
    const io::GgufFile out = io::load_gguf(path);
    for (const auto& [key, value] : in.metadata()) {
        if (key == "general.file_type" || key == "general.quantization_version") continue;
        const io::GgufValue* got = out.find(key);
        if (!got || *got != value) report.fail("metadata " + key + " not carried over");
    }
    expect_uint(report, out, "general.file_type", file_type(request));
    if (in.tensors().size() != out.tensors().size()) report.fail("not as many tensors as IN");
    for (const io::GgufTensorInfo& t : out.tensors()) {
        int layer = -1;
        if (t.name.compare(0, 4, "blk.") == 0) layer = t.name[4] - '0';
        compare_blocks(report, out, t.name, expected_type(t.name, request, layer),
                       in.to_float(t.name));
    }
    if (report.failures) return 1;
    std::printf("check_quantize: %s (%s): metadata and %zu tensors as expected\n", path.c_str(),
                request.c_str(), out.tensors().size());
    return 0;
}

int check_rope(const std::string& path, const std::string& ref_path) {
    Report report;
    const io::GgufFile out = io::load_gguf(path);
    const io::GgufFile ref = io::load_gguf(ref_path);
    const auto rope_keys = [](const io::GgufFile& f) {
        std::map<std::string, io::GgufValue> keys;
        for (const auto& [key, value] : f.metadata())
            if (key.compare(0, 11, "llama.rope.") == 0) keys.emplace(key, value);
        return keys;
    };
    const auto got = rope_keys(out), want = rope_keys(ref);
    for (const auto& [key, value] : want) {
        const auto it = got.find(key);
        if (it == got.end() || it->second != value) report.fail("metadata " + key + " differs");
    }
    for (const auto& [key, value] : got)
        if (want.count(key) == 0) report.fail("metadata " + key + " is not REF's");
    const io::GgufTensorInfo* a = out.find_tensor("rope_freqs.weight");
    const io::GgufTensorInfo* b = ref.find_tensor("rope_freqs.weight");
    if ((a == nullptr) != (b == nullptr)) report.fail("rope_freqs.weight in one file only");
    std::size_t factors = 0;
    if (a && b) {
        if (a->type != Type::f32 || a->dims != b->dims) report.fail("rope_freqs.weight's type");
        const Tensor<float> x = out.to_float(a->name), y = ref.to_float(b->name);
        for (Index i = 0; i < x.numel() && i < y.numel(); ++i, ++factors)
            if (std::abs(x.data()[i] - y.data()[i]) > 1e-6f * std::abs(y.data()[i]))
                report.fail("rope_freqs.weight[" + std::to_string(i) +
                            "] = " + std::to_string(x.data()[i]) + ", REF has " +
                            std::to_string(y.data()[i]));
    }
    if (report.failures) return 1;
    std::printf("check_quantize: %s: %zu llama.rope keys and %zu rope_freqs factors as %s's\n",
                path.c_str(), want.size(), factors, ref_path.c_str());
    return 0;
}

int check_same(const std::string& a_path, const std::string& b_path) {
    Report report;
    const io::GgufFile a = io::load_gguf(a_path);
    const io::GgufFile b = io::load_gguf(b_path);
    if (a.tensors().size() != b.tensors().size())
        report.fail(std::to_string(a.tensors().size()) + " tensors against " +
                    std::to_string(b.tensors().size()));
    std::uint64_t blocks = 0, differing = 0;
    std::map<std::string, std::uint64_t> by_type;
    for (std::size_t i = 0; i < a.tensors().size() && i < b.tensors().size(); ++i) {
        const io::GgufTensorInfo& x = a.tensors()[i];
        const io::GgufTensorInfo& y = b.tensors()[i];
        if (x.name != y.name || x.type != y.type || x.dims != y.dims) {
            report.fail("tensor " + std::to_string(i) + ": " + x.name + " " +
                        quant::block_format(x.type).name + " against " + y.name + " " +
                        quant::block_format(y.type).name);
            continue;
        }
        const auto size = static_cast<std::uint64_t>(quant::block_format(x.type).block_bytes);
        const std::uint64_t n = x.bytes / size;
        std::uint64_t here = 0;
        for (std::uint64_t k = 0; k < n; ++k)
            here +=
                std::memcmp(a.tensor_data(x) + k * size, b.tensor_data(y) + k * size, size) != 0;
        blocks += n;
        by_type[quant::block_format(x.type).name] += n;
        differing += here;
        if (here)
            report.fail(x.name + ": " + std::to_string(here) + " of " + std::to_string(n) +
                        " blocks differ");
    }
    std::string types;
    for (const auto& [t, n] : by_type)
        types += (types.empty() ? "" : ", ") + std::to_string(n) + " " + t;
    std::printf("check_quantize: %zu tensors, %llu blocks (%s) compared, %llu differ\n",
                a.tensors().size(), static_cast<unsigned long long>(blocks), types.c_str(),
                static_cast<unsigned long long>(differing));
    return report.failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        const std::string mode = argc > 1 ? argv[1] : "";
        if (mode == "make" && (argc == 3 || (argc == 4 && std::strcmp(argv[3], "sharded") == 0))) {
            make(argv[2], argc == 4);
            return 0;
        }
        if (mode == "hf" && argc == 5) return check_hf(argv[2], argv[3], argv[4]);
        if (mode == "gguf" && argc == 5) return check_gguf(argv[2], argv[3], argv[4]);
        if (mode == "same" && argc == 4) return check_same(argv[2], argv[3]);
        if (mode == "rope" && argc == 4) return check_rope(argv[2], argv[3]);
        std::fprintf(
            stderr,
            "usage: check_quantize make DIR [sharded] | hf DIR OUT.gguf TYPE | gguf IN.gguf "
            "OUT.gguf TYPE | same A.gguf B.gguf | rope OUT.gguf REF.gguf\n");
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "check_quantize: %s\n", e.what());
        return 1;
    }
}
