// SPDX-License-Identifier: MIT
// quantize: a Llama model (a Hugging Face directory or a GGUF file) written as a GGUF file that
// llama.cpp loads, its attention and feed-forward matrices in one quantized type or in
// llama.cpp's Q4_K_M mix (docs/formats.md, "Quantizing a model").
//
//   quantize IN OUT.gguf --type q8_0|q4_0|q4_1|q5_0|q5_1|q4_k|q6_k|q4_k_m
//
// IN is a directory with config.json and model.safetensors (or the shards of
// model.safetensors.index.json), tokenizer.json and tokenizer_config.json when it has them; or a
// GGUF file of a Llama model (any types headwise reads, dequantized and quantized again). OUT is
// GGUF v3 with llama.cpp's tensor names and layout: from a directory, the rows of attn_q and
// attn_k permuted within each head as llama.cpp's converter does (rotary pairs adjacent), the
// llama.* metadata from config.json and the tokenizer's from tokenizer.json; from a GGUF file,
// every metadata key carried over (general.file_type and general.quantization_version set anew).
// Norms and biases are F32; which matrix gets which type is choose_type()'s rule, llama.cpp's
// (src/llama-quant.cpp). A bad command line: a message and exit status 2; a model that cannot be
// read or an output that cannot be written: a message on standard error, exit status 1.
#include <headwise/io/detail/json_file.hpp>
#include <headwise/io/gguf.hpp>
#include <headwise/io/safetensors.hpp>
#include <headwise/models/llama.hpp>
#include <headwise/quant/quantize.hpp>

#include <algorithm>     // std::sort
#include <cmath>         // std::log
#include <cstdint>       // std::uint8_t, std::uint32_t, std::int32_t, std::uint64_t
#include <cstdio>        // std::printf, std::fprintf
#include <cstring>       // std::strcmp
#include <exception>     // std::exception
#include <filesystem>    // std::filesystem::is_directory, std::filesystem::path
#include <functional>    // std::function
#include <map>           // std::map
#include <memory>        // std::make_shared, std::shared_ptr
#include <optional>      // std::optional
#include <stdexcept>     // std::runtime_error
#include <string>        // std::string, std::to_string
#include <system_error>  // std::error_code
#include <utility>       // std::pair, std::move
#include <vector>        // std::vector

namespace {

using namespace headwise;
using io::GgufValue;
using Metadata = std::vector<std::pair<std::string, GgufValue>>;

constexpr const char* kUsage =
    "usage: quantize IN OUT.gguf --type q8_0|q4_0|q4_1|q5_0|q5_1|q4_k|q6_k|q4_k_m\n"
    "  IN      a Hugging Face Llama directory (config.json, model.safetensors or its shards,\n"
    "          tokenizer.json) or a Llama GGUF file\n"
    "  OUT     the GGUF file to write (llama.cpp's names and layout)\n"
    "  --type  the attention and feed-forward matrices' type; q4_k_m: llama.cpp's Q4_K_M mix\n"
    "          (Q6_K for some attn_v and ffn_down matrices and for the output)\n";

/// A --type: the matrices' type, llama.cpp's file type number (general.file_type, its
/// llama_ftype), and whether the Q4_K_M mix applies.
struct Request {
    const char* name;
    quant::Type type;
    std::uint32_t file_type;
    bool q4_k_m;
};

constexpr Request kRequests[] = {
    {"q8_0", quant::Type::q8_0, 7, false},  {"q4_0", quant::Type::q4_0, 2, false},
    {"q4_1", quant::Type::q4_1, 3, false},  {"q5_0", quant::Type::q5_0, 8, false},
    {"q5_1", quant::Type::q5_1, 9, false},  {"q4_k", quant::Type::q4_k, 14, false},
    {"q6_k", quant::Type::q6_k, 18, false}, {"q4_k_m", quant::Type::q4_k, 15, true},
};

/// One tensor of the output under llama.cpp's name: its row-major shape (last extent
/// contiguous, ggml's ne[0]) and its values, read when needed.
struct Source {
    std::string name;
    Shape shape;
    std::function<Tensor<float>()> values;
};

bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

/// The layer of "blk.N....", or -1: the key llama.cpp's loader orders tensors by (then the name).
int layer_of(const std::string& name) {
    if (name.compare(0, 4, "blk.") != 0) return -1;
    int n = 0;
    std::size_t i = 4;
    if (i >= name.size() || name[i] < '0' || name[i] > '9') return -1;
    while (i < name.size() && name[i] >= '0' && name[i] <= '9' && n < 100000000)
        n = 10 * n + (name[i++] - '0');
    return n;
}

// ---- which type each tensor gets -----------------------------------------------------------

/// llama.cpp's choice of layers that get more bits in the _M mixes: the first and last eighth
/// and every third layer between.
bool use_more_bits(int i_layer, int n_layers) {
    return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 ||
           (i_layer - n_layers / 8) % 3 == 2;
}

/// A type whose block does not divide the row length falls back as llama-quantize's does:
/// Q4_K to Q5_0, Q6_K to Q8_0, and to F16 when even blocks of 32 do not divide it.
quant::Type fall_back(quant::Type type, Index columns) {
    const auto fits = [columns](quant::Type t) {
        return columns % quant::block_format(t).block_size == 0;
    };
    if (fits(type)) return type;
    quant::Type r = type == quant::Type::q4_k   ? quant::Type::q5_0
                    : type == quant::Type::q6_k ? quant::Type::q8_0
                                                : type;
    return fits(r) ? r : quant::Type::f16;
}

/// What the rule counts while it walks the tensors in llama.cpp's order.
struct MixState {
    bool tied = true;  // no output.weight: the token embedding is also the output
    int n_layers = 0;
    int n_attn_v = 0, i_attn_v = 0, i_ffn_down = 0;
};

/// The type of tensor `s` in the output: llama-quantize's choice (llama_tensor_get_type,
/// without an importance matrix, for a Llama model without experts) for the llama_ftype of
/// `r`. Only matrices whose names end in "weight" (not norms) are quantized: the rest is F32.
/// output.weight (or the token embedding when tied) gets Q6_K, or Q8_0 when the requested
/// type is Q8_0 or its rows are no multiple of the requested block. With q4_k_m, attn_v and
/// ffn_down get Q6_K in the layers use_more_bits() picks. Then fall_back().
quant::Type choose_type(const Source& s, const Request& r, MixState& m) {
    const std::string& name = s.name;
    if (s.shape.rank() < 2 || !ends_with(name, "weight") || contains(name, "_norm.weight"))
        return quant::Type::f32;
    const Index columns = s.shape[s.shape.rank() - 1];
    quant::Type t = r.type;
    if (name == "output.weight" || (m.tied && name == "token_embd.weight")) {
        if (columns % quant::block_format(r.type).block_size != 0)
            t = quant::Type::q8_0;
        else if (r.type != quant::Type::q8_0)
            t = quant::Type::q6_k;
    } else if (contains(name, "attn_v.weight")) {
        if (r.q4_k_m && use_more_bits(m.i_attn_v, m.n_attn_v)) t = quant::Type::q6_k;
        ++m.i_attn_v;
    } else if (contains(name, "ffn_down.weight")) {
        if (r.q4_k_m && use_more_bits(m.i_ffn_down, m.n_layers)) t = quant::Type::q6_k;
        ++m.i_ffn_down;
    }
    return fall_back(t, columns);
}

// ---- a Hugging Face directory --------------------------------------------------------------

/// Rows of a q or k projection [heads * D, ...] as llama.cpp's converter stores them: within
/// each head, row 2 j + t of the output is row t D / 2 + j of the input (Hugging Face's
/// rotate-half halves interleaved into pairs; convert_hf_to_gguf's permute: reshape
/// [heads, 2, D / 2, ...], swap axes 1 and 2).
Tensor<float> permute_heads(const Tensor<float>& w, Index heads) {
    const Index rows = w.shape()[0];
    const Index row = w.numel() / rows;  // 1 for a bias
    const Index D = rows / heads;
    Tensor<float> out(w.shape());
    for (Index h = 0; h < heads; ++h)
        for (Index j = 0; j < D / 2; ++j)
            for (Index t = 0; t < 2; ++t) {
                const float* from = w.data() + (h * D + t * (D / 2) + j) * row;
                float* to = out.data() + (h * D + 2 * j + t) * row;
                std::copy(from, from + row, to);
            }
    return out;
}

/// j[key] when j is an object holding a boolean there, else `otherwise`.
bool flag(const nlohmann::json& j, const char* key, bool otherwise) {
    if (!j.is_object() || !j.contains(key) || !j[key].is_boolean()) return otherwise;
    return j[key].get<bool>();
}

/// j[key] when j is an object holding a string there, else "".
std::string text(const nlohmann::json& j, const char* key) {
    if (!j.is_object() || !j.contains(key) || !j[key].is_string()) return std::string();
    return j[key].get<std::string>();
}

/// The tokenizer of a Hugging Face directory as llama.cpp's converter writes a byte-level BPE
/// one ("gpt2"): tokens by id (ids the files do not name: "[PADn]", unused), token types
/// (normal; added special tokens control, other added tokens user-defined), merges, the
/// pre-tokenizer's name, special token ids (tokenizer_config.json's tokens, else config.json's
/// ids), add_bos_token and the chat template. Returns false, having said why on standard
/// error, when there is no tokenizer.json or it is not byte-level BPE.
bool add_tokenizer(const std::string& dir, const models::LlamaConfig& config, Metadata& meta) {
    constexpr const char* fn = "quantize";
    namespace fs = std::filesystem;
    const std::string path = (fs::path(dir) / "tokenizer.json").string();
    std::error_code ec;
    if (!fs::exists(path, ec)) {
        std::fprintf(stderr,
                     "quantize: %s has no tokenizer.json: the output has no tokenizer "
                     "(llama.cpp needs one to run the model)\n",
                     dir.c_str());
        return false;
    }
    const nlohmann::json tj = headwise::detail::read_json_file(fn, path);
    const auto fail = [&](const std::string& what) {
        throw std::runtime_error(path + ": " + what);
    };
    const nlohmann::json* model = tj.contains("model") ? &tj["model"] : nullptr;
    if (!model || !model->is_object() || text(*model, "type") != "BPE" ||
        flag(*model, "byte_fallback", false) || !model->contains("vocab") ||
        !(*model)["vocab"].is_object()) {
        std::fprintf(stderr,
                     "quantize: %s is no byte-level BPE tokenizer (llama.cpp's \"gpt2\"): the "
                     "output has no tokenizer\n",
                     path.c_str());
        return false;
    }
    const Index n = config.vocab_size;
    std::vector<std::string> tokens(static_cast<std::size_t>(n));
    std::vector<std::int32_t> types(static_cast<std::size_t>(n), 5);  // unused
    std::map<std::string, Index> ids;
    const auto put = [&](const std::string& token, const nlohmann::json& id, std::int32_t type) {
        if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() >= n)
            fail("token " + headwise::detail::quote_bounded(token) + " has id " +
                 headwise::detail::describe_json(id) + ", not one below vocab_size " +
                 std::to_string(n) + " of config.json");
        const auto i = static_cast<std::size_t>(id.get<std::int64_t>());
        tokens[i] = token;
        types[i] = type;
        ids[token] = static_cast<Index>(i);
    };
    for (auto it = (*model)["vocab"].begin(); it != (*model)["vocab"].end(); ++it)
        put(it.key(), it.value(), 1);
    if (tj.contains("added_tokens") && tj["added_tokens"].is_array())
        for (const nlohmann::json& a : tj["added_tokens"]) {
            if (!a.is_object() || !a.contains("content") || !a["content"].is_string())
                fail("added_tokens: an entry without a string content: " +
                     headwise::detail::describe_json(a));
            put(a["content"].get<std::string>(), a.contains("id") ? a["id"] : nlohmann::json(),
                flag(a, "special", false) ? 3 : 4);
        }
    for (Index i = 0; i < n; ++i)
        if (tokens[static_cast<std::size_t>(i)].empty() && types[static_cast<std::size_t>(i)] == 5)
            tokens[static_cast<std::size_t>(i)] = "[PAD" + std::to_string(i) + "]";
    std::vector<std::string> merges;
    if (model->contains("merges") && (*model)["merges"].is_array())
        for (const nlohmann::json& m : (*model)["merges"]) {
            if (m.is_string())
                merges.push_back(m.get<std::string>());
            else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
                merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
            else
                fail("model.merges: expected \"a b\" or [\"a\", \"b\"], got " +
                     headwise::detail::describe_json(m));
        }
    // The pre-tokenizer by its shape (llama.cpp's converter hashes a tokenization instead):
    // digits one by one then GPT-2's split is "smollm"; GPT-2's split alone "gpt-2"; a split
    // by a regex before a byte-level step without its own regex, Llama 3's "llama-bpe".
    std::string pre = "default";
    const nlohmann::json p = tj.contains("pre_tokenizer") ? tj["pre_tokenizer"] : nlohmann::json();
    const auto byte_level = [](const nlohmann::json& j, bool regex) {
        return text(j, "type") == "ByteLevel" && flag(j, "use_regex", true) == regex;
    };
    if (byte_level(p, true)) {
        pre = "gpt-2";
    } else if (text(p, "type") == "Sequence" && p.contains("pretokenizers") &&
               p["pretokenizers"].is_array() && p["pretokenizers"].size() == 2) {
        const nlohmann::json& a = p["pretokenizers"][0];
        const nlohmann::json& b = p["pretokenizers"][1];
        if (text(a, "type") == "Digits" && flag(a, "individual_digits", false) &&
            byte_level(b, true))
            pre = "smollm";
        else if (text(a, "type") == "Split" && byte_level(b, false))
            pre = "llama-bpe";
    }
    if (pre == "default")
        std::fprintf(stderr,
                     "quantize: %s: a pre-tokenizer quantize does not name; written as "
                     "\"default\"\n",
                     path.c_str());
    meta.emplace_back("tokenizer.ggml.model", GgufValue::string("gpt2"));
    meta.emplace_back("tokenizer.ggml.pre", GgufValue::string(pre));
    meta.emplace_back("tokenizer.ggml.tokens", GgufValue::array_of(tokens));
    meta.emplace_back("tokenizer.ggml.token_type", GgufValue::array_of(types));
    meta.emplace_back("tokenizer.ggml.merges", GgufValue::array_of(merges));

    // Special tokens: tokenizer_config.json's strings first, then config.json's ids.
    nlohmann::json tc = nlohmann::json::object();
    const std::string tc_path = (fs::path(dir) / "tokenizer_config.json").string();
    if (fs::exists(tc_path, ec)) tc = headwise::detail::read_json_file(fn, tc_path);
    const auto token_id = [&](const char* key) -> std::optional<Index> {
        if (!tc.is_object() || !tc.contains(key)) return std::nullopt;
        const nlohmann::json& v = tc[key];
        const std::string content = v.is_string() ? v.get<std::string>() : text(v, "content");
        if (content.empty()) return std::nullopt;
        const auto it = ids.find(content);
        return it == ids.end() ? std::nullopt : std::optional<Index>(it->second);
    };
    const auto put_id = [&](const char* key, std::optional<Index> id) {
        if (id) meta.emplace_back(key, GgufValue::uint32(static_cast<std::uint32_t>(*id)));
    };
    std::optional<Index> bos = token_id("bos_token"), eos = token_id("eos_token");
    if (!bos && config.bos_token_id) bos = *config.bos_token_id;
    if (!eos && !config.eos_token_ids.empty()) eos = config.eos_token_ids.front();
    put_id("tokenizer.ggml.bos_token_id", bos);
    put_id("tokenizer.ggml.eos_token_id", eos);
    put_id("tokenizer.ggml.unknown_token_id", token_id("unk_token"));
    put_id("tokenizer.ggml.padding_token_id", token_id("pad_token"));
    if (tc.is_object() && tc.contains("add_bos_token") && tc["add_bos_token"].is_boolean())
        meta.emplace_back("tokenizer.ggml.add_bos_token",
                          GgufValue::boolean(tc["add_bos_token"].get<bool>()));
    if (tc.is_object() && tc.contains("chat_template") && tc["chat_template"].is_string())
        meta.emplace_back("tokenizer.chat_template",
                          GgufValue::string(tc["chat_template"].get<std::string>()));
    return true;
}

/// llama.cpp's name of a Hugging Face Llama tensor and the heads whose rows it permutes (0:
/// none); an empty name for a tensor the output leaves out (the rotary inverse frequencies, a
/// tied lm_head); throws for anything else.
std::pair<std::string, Index> gguf_name(const std::string& hf, const models::LlamaConfig& c,
                                        const std::string& source) {
    if (hf == "model.embed_tokens.weight") return {"token_embd.weight", 0};
    if (hf == "model.norm.weight") return {"output_norm.weight", 0};
    if (hf == "lm_head.weight") return {c.tie_word_embeddings ? "" : "output.weight", 0};
    if (ends_with(hf, "rotary_emb.inv_freq")) return {"", 0};
    const std::string prefix = "model.layers.";
    if (hf.compare(0, prefix.size(), prefix) == 0) {
        const std::size_t dot = hf.find('.', prefix.size());
        const std::string layer = hf.substr(prefix.size(), dot - prefix.size());
        const int n = layer_of("blk." + layer + ".");
        if (dot != std::string::npos && n >= 0 && n < c.num_hidden_layers &&
            std::to_string(n) == layer) {
            const std::string rest = hf.substr(dot + 1);
            struct Entry {
                const char* hf;
                const char* gguf;
                int permute;  // 1: attention heads, 2: key/value heads
            };
            static const Entry kTable[] = {
                {"input_layernorm.weight", "attn_norm.weight", 0},
                {"self_attn.q_proj.weight", "attn_q.weight", 1},
                {"self_attn.q_proj.bias", "attn_q.bias", 1},
                {"self_attn.k_proj.weight", "attn_k.weight", 2},
                {"self_attn.k_proj.bias", "attn_k.bias", 2},
                {"self_attn.v_proj.weight", "attn_v.weight", 0},
                {"self_attn.v_proj.bias", "attn_v.bias", 0},
                {"self_attn.o_proj.weight", "attn_output.weight", 0},
                {"self_attn.o_proj.bias", "attn_output.bias", 0},
                {"post_attention_layernorm.weight", "ffn_norm.weight", 0},
                {"mlp.gate_proj.weight", "ffn_gate.weight", 0},
                {"mlp.gate_proj.bias", "ffn_gate.bias", 0},
                {"mlp.up_proj.weight", "ffn_up.weight", 0},
                {"mlp.up_proj.bias", "ffn_up.bias", 0},
                {"mlp.down_proj.weight", "ffn_down.weight", 0},
                {"mlp.down_proj.bias", "ffn_down.bias", 0},
            };
            for (const Entry& e : kTable)
                if (rest == e.hf)
                    return {"blk." + layer + "." + e.gguf, e.permute == 1   ? c.num_attention_heads
                                                           : e.permute == 2 ? c.num_key_value_heads
                                                                            : 0};
        }
    }
    throw std::runtime_error(source + ": tensor " + headwise::detail::quote_bounded(hf) +
                             " is none of a Llama model's");
}

/// The float tensors of a Hugging Face directory: model.safetensors when it exists, else the
/// shards model.safetensors.index.json names (its "weight_map": tensor -> file in the
/// directory), each tensor from the shard the map gives it; `source` names the file for
/// messages.
std::map<std::string, Tensor<float>> read_checkpoint(const std::string& dir, std::string& source) {
    namespace fs = std::filesystem;
    std::error_code ec;
    source = (fs::path(dir) / "model.safetensors").string();
    const std::string index = (fs::path(dir) / "model.safetensors.index.json").string();
    if (fs::exists(source, ec) || !fs::exists(index, ec))
        return io::load_safetensors<float>(source);
    source = index;
    const nlohmann::json j = headwise::detail::read_json_file("quantize", index);
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
        throw std::runtime_error(index + ": no \"weight_map\" object");
    std::map<std::string, std::map<std::string, Tensor<float>>> shards;
    std::map<std::string, Tensor<float>> out;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
        const std::string file = it->is_string() ? it->get<std::string>() : std::string();
        if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos)
            throw std::runtime_error(index + ": weight_map[" +
                                     headwise::detail::quote_bounded(it.key()) +
                                     "] is no file name in the directory");
        if (!shards.count(file))
            shards[file] = io::load_safetensors<float>((fs::path(dir) / file).string());
        const auto found = shards[file].find(it.key());
        if (found == shards[file].end())
            throw std::runtime_error(index + ": " + file + " holds no tensor " +
                                     headwise::detail::quote_bounded(it.key()));
        out[it.key()] = std::move(found->second);
    }
    return out;
}

/// A Hugging Face directory's metadata (as llama.cpp's converter writes a Llama model's) and
/// tensors under llama.cpp's names; every tensor a Llama model of `config` has must be there,
/// of its shape.
void read_directory(const std::string& dir, const Request& r, Metadata& meta,
                    std::vector<Source>& sources) {
    namespace fs = std::filesystem;
    const std::string config_json = (fs::path(dir) / "config.json").string();
    const models::LlamaConfig c = models::LlamaConfig::from_json_file(config_json);
    // Rope scalings beyond linear as llama.cpp's converter writes them: yarn as rope.scaling.*
    // keys, llama3 as the tensor rope_freqs.weight. It writes nothing for dynamic (llama.cpp
    // would run the model unscaled), and ggml always truncates yarn's ramp.
    const RopeScaling& rope = c.rope_scaling;
    if (rope.type == RopeScalingType::dynamic)
        throw std::runtime_error(config_json +
                                 ": rope type dynamic has no GGUF form llama.cpp reads (its "
                                 "converter writes none: the model would run unscaled)");
    if (rope.type == RopeScalingType::yarn && !rope.truncate)
        throw std::runtime_error(config_json +
                                 ": rope type yarn with truncate false has no GGUF form (llama.cpp "
                                 "floors and ceils the ends of the ramp)");
    struct Checkpoint {
        std::map<std::string, Tensor<float>> tensors;
        std::string source;
    };
    auto checkpoint = std::make_shared<Checkpoint>();
    checkpoint->tensors = read_checkpoint(dir, checkpoint->source);
    const Index E = c.hidden_size, D = E / c.num_attention_heads;
    const Index kv = c.num_key_value_heads * D;
    // Every tensor the model must have, with its shape.
    std::map<std::string, Shape> wanted = {{"token_embd.weight", Shape{c.vocab_size, E}},
                                           {"output_norm.weight", Shape{E}}};
    if (!c.tie_word_embeddings) wanted["output.weight"] = Shape{c.vocab_size, E};
    for (Index n = 0; n < c.num_hidden_layers; ++n) {
        const std::string b = "blk." + std::to_string(n) + ".";
        wanted[b + "attn_norm.weight"] = Shape{E};
        wanted[b + "attn_q.weight"] = Shape{E, E};
        wanted[b + "attn_k.weight"] = Shape{kv, E};
        wanted[b + "attn_v.weight"] = Shape{kv, E};
        wanted[b + "attn_output.weight"] = Shape{E, E};
        wanted[b + "ffn_norm.weight"] = Shape{E};
        wanted[b + "ffn_gate.weight"] = Shape{c.intermediate_size, E};
        wanted[b + "ffn_up.weight"] = Shape{c.intermediate_size, E};
        wanted[b + "ffn_down.weight"] = Shape{E, c.intermediate_size};
        if (c.attention_bias) {
            wanted[b + "attn_q.bias"] = Shape{E};
            wanted[b + "attn_k.bias"] = Shape{kv};
            wanted[b + "attn_v.bias"] = Shape{kv};
            wanted[b + "attn_output.bias"] = Shape{E};
        }
        if (c.mlp_bias) {
            wanted[b + "ffn_gate.bias"] = Shape{c.intermediate_size};
            wanted[b + "ffn_up.bias"] = Shape{c.intermediate_size};
            wanted[b + "ffn_down.bias"] = Shape{E};
        }
    }
    for (auto& [hf, tensor] : checkpoint->tensors) {
        const auto [name, heads] = gguf_name(hf, c, checkpoint->source);
        if (name.empty()) continue;
        const auto it = wanted.find(name);
        if (it == wanted.end())
            throw std::runtime_error(checkpoint->source + ": tensor " +
                                     headwise::detail::quote_bounded(hf) +
                                     " is none of this configuration's (config.json)");
        if (tensor.shape() != it->second)
            throw std::runtime_error(
                checkpoint->source + ": tensor " + headwise::detail::quote_bounded(hf) +
                " has shape " + tensor.shape().str() + ", config.json gives " + it->second.str());
        wanted.erase(it);
        const Tensor<float>* t = &tensor;
        const Index h = heads;
        sources.push_back({name, tensor.shape(), [checkpoint, t, h]() {
                               return h > 0 ? permute_heads(*t, h) : Tensor<float>(*t);
                           }});
    }
    if (!wanted.empty())
        throw std::runtime_error(checkpoint->source + ": no tensor for llama.cpp's " +
                                 headwise::detail::quote_bounded(wanted.begin()->first) +
                                 " (config.json asks for it)");
    if (rope.type == RopeScalingType::llama3) {
        // convert_hf_to_gguf.py's LlamaModel.generate_extra_tensors, written first: each pair's
        // frequency divisor theta_i / theta_i(llama3), which LlamaConfig::from_gguf reads back as
        // RopeScaling::frequency_factors.
        const double theta = c.rope_theta;
        sources.insert(sources.begin(),
                       {"rope_freqs.weight", Shape{D / 2}, [theta, D, rope]() {
                            Tensor<float> f(Shape{D / 2});  // [D/2]
                            for (Index i = 0; i < D / 2; ++i)
                                f.data()[i] = static_cast<float>(
                                    ops::rope_frequency(theta, D, RopeScaling{}, 0, i) /
                                    ops::rope_frequency(theta, D, rope, 0, i));
                            return f;
                        }});
    }
    const auto u32 = [](Index v) { return GgufValue::uint32(static_cast<std::uint32_t>(v)); };
    meta.emplace_back("general.architecture", GgufValue::string("llama"));
    fs::path named(dir);  // "models/llama/" names the model "llama"
    if (named.filename().empty()) named = named.parent_path();
    meta.emplace_back("general.name", GgufValue::string(named.filename().string()));
    meta.emplace_back("llama.block_count", u32(c.num_hidden_layers));
    meta.emplace_back("llama.context_length", u32(c.max_position_embeddings));
    meta.emplace_back("llama.embedding_length", u32(E));
    meta.emplace_back("llama.feed_forward_length", u32(c.intermediate_size));
    meta.emplace_back("llama.attention.head_count", u32(c.num_attention_heads));
    meta.emplace_back("llama.attention.head_count_kv", u32(c.num_key_value_heads));
    meta.emplace_back("llama.rope.freq_base", GgufValue::float32(static_cast<float>(c.rope_theta)));
    meta.emplace_back("llama.attention.layer_norm_rms_epsilon",
                      GgufValue::float32(static_cast<float>(c.rms_norm_eps)));
    meta.emplace_back("general.file_type", GgufValue::uint32(r.file_type));
    meta.emplace_back("llama.vocab_size", u32(c.vocab_size));
    meta.emplace_back("llama.rope.dimension_count", u32(D));
    if (c.rope_scaling_factor != 1.0) {
        meta.emplace_back("llama.rope.scaling.type", GgufValue::string("linear"));
        meta.emplace_back("llama.rope.scaling.factor",
                          GgufValue::float32(static_cast<float>(c.rope_scaling_factor)));
    }
    if (rope.type == RopeScalingType::yarn) {
        // conversion/base.py's keys; attention_factor, beta_fast and beta_slow only when they
        // differ from what LlamaConfig::from_gguf (and transformers) take without them.
        const auto f32 = [](double v) { return GgufValue::float32(static_cast<float>(v)); };
        meta.emplace_back("llama.rope.scaling.type", GgufValue::string("yarn"));
        meta.emplace_back("llama.rope.scaling.factor", f32(rope.factor));
        meta.emplace_back("llama.rope.scaling.original_context_length",
                          u32(rope.original_max_position));
        const double mscale = rope.factor <= 1.0 ? 1.0 : 0.1 * std::log(rope.factor) + 1.0;
        if (rope.attention_factor != mscale)
            meta.emplace_back("llama.rope.scaling.yarn_attn_factor", f32(rope.attention_factor));
        if (rope.beta_fast != 32.0)
            meta.emplace_back("llama.rope.scaling.yarn_beta_fast", f32(rope.beta_fast));
        if (rope.beta_slow != 1.0)
            meta.emplace_back("llama.rope.scaling.yarn_beta_slow", f32(rope.beta_slow));
    }
    add_tokenizer(dir, c, meta);
    meta.emplace_back("general.quantization_version", GgufValue::uint32(2));
}

// ---- a GGUF file ---------------------------------------------------------------------------

/// A Llama GGUF file's metadata, every key kept in its place (general.file_type and
/// general.quantization_version set anew, appended when missing), and its tensors.
void read_gguf(const std::string& path, const Request& r, Metadata& meta,
               std::vector<Source>& sources, std::uint32_t& alignment) {
    auto file = std::make_shared<io::GgufFile>(io::load_gguf(path));
    const GgufValue* arch = file->find("general.architecture");
    if (!arch || arch->type() != io::GgufValueType::string || arch->as_string() != "llama")
        throw std::runtime_error(
            path + ": general.architecture must be \"llama\", got " +
            (!arch ? std::string("none")
             : arch->type() == io::GgufValueType::string
                 ? headwise::detail::quote_bounded(arch->as_string())
                 : std::string("a ") + io::gguf_value_type_name(arch->type())));
    bool file_type = false, version = false;
    for (const auto& [key, value] : file->metadata()) {
        if (key == "general.file_type") {
            meta.emplace_back(key, GgufValue::uint32(r.file_type));
            file_type = true;
        } else if (key == "general.quantization_version") {
            meta.emplace_back(key, GgufValue::uint32(2));
            version = true;
        } else {
            meta.emplace_back(key, value);
        }
    }
    if (!file_type) meta.emplace_back("general.file_type", GgufValue::uint32(r.file_type));
    if (!version) meta.emplace_back("general.quantization_version", GgufValue::uint32(2));
    alignment = static_cast<std::uint32_t>(file->alignment());
    for (const io::GgufTensorInfo& info : file->tensors()) {
        const std::string name = info.name;
        sources.push_back({name, info.shape(), [file, name]() { return file->to_float(name); }});
    }
}

// ---- the output ----------------------------------------------------------------------------

int run(const std::string& in, const std::string& out, const Request& r) {
    Metadata meta;
    std::vector<Source> sources;
    std::uint32_t alignment = 32;
    std::error_code ec;
    if (std::filesystem::is_directory(in, ec))
        read_directory(in, r, meta, sources);
    else
        read_gguf(in, r, meta, sources, alignment);
    // llama.cpp's order: tensors outside the layers, then layer by layer, each by name; the
    // Q4_K_M rule counts attn_v and ffn_down in this order.
    std::stable_sort(sources.begin(), sources.end(), [](const Source& a, const Source& b) {
        const int la = layer_of(a.name), lb = layer_of(b.name);
        return la != lb ? la < lb : a.name < b.name;
    });
    MixState mix;
    for (const Source& s : sources) {
        if (s.name == "output.weight") mix.tied = false;
        if (contains(s.name, "attn_v.weight")) ++mix.n_attn_v;
    }
    for (const auto& [key, value] : meta)
        if (key == "llama.block_count") mix.n_layers = static_cast<int>(value.as_uint());

    std::vector<std::vector<std::uint8_t>> bytes(sources.size());
    std::vector<io::GgufTensorData> tensors;
    std::map<std::string, int> counts;
    for (std::size_t i = 0; i < sources.size(); ++i) {
        const Source& s = sources[i];
        const quant::Type type = choose_type(s, r, mix);
        const Tensor<float> values = s.values();
        const Index row = s.shape.rank() == 0 ? 1 : s.shape[s.shape.rank() - 1];
        const Index rows = row == 0 ? 0 : values.numel() / row;
        bytes[i].resize(static_cast<std::size_t>(quant::row_bytes(type, row) *
                                                 static_cast<std::uint64_t>(rows)));
        quant::quantize_row(type, values.data(), bytes[i].data(), values.numel());
        tensors.push_back({s.name, type, s.shape, bytes[i].data()});
        ++counts[quant::block_format(type).name];
    }
    io::save_gguf(out, meta, tensors, alignment);
    std::string summary;
    std::uint64_t total = 0;
    for (const auto& b : bytes) total += b.size();
    for (const auto& [type, n] : counts)
        summary += (summary.empty() ? "" : ", ") + std::to_string(n) + " " + type;
    std::printf("quantize: wrote %s: %zu tensors (%s), %.1f MB of weights\n", out.c_str(),
                tensors.size(), summary.c_str(), static_cast<double>(total) / 1e6);
    return 0;
}

int usage_error(const std::string& message) {
    std::fprintf(stderr, "quantize: %s\n%s", message.c_str(), kUsage);
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> positional;
    const Request* request = nullptr;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--help" || arg == "-h") {
            std::fputs(kUsage, stdout);
            return std::fflush(stdout) == 0 ? 0 : 1;
        }
        if (arg == "--type") {
            if (i + 1 >= argc) return usage_error("--type needs a value");
            const std::string value = argv[++i];
            request = nullptr;
            for (const Request& r : kRequests)
                if (value == r.name) request = &r;
            if (!request) {
                const std::string shown = value.size() > 40 ? value.substr(0, 40) + "..." : value;
                return usage_error(
                    "--type needs one of q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q6_k, q4_k_m, got \"" +
                    shown + "\"");
            }
        } else if (arg.size() > 1 && arg[0] == '-') {
            const std::string shown = arg.size() > 40 ? arg.substr(0, 40) + "..." : arg;
            return usage_error("unknown option \"" + shown + "\"");
        } else {
            positional.push_back(arg);
        }
    }
    if (positional.size() != 2)
        return usage_error("needs IN and OUT, got " + std::to_string(positional.size()) +
                           " file name" + (positional.size() == 1 ? "" : "s"));
    if (!request) return usage_error("--type is required");
    try {
        return run(positional[0], positional[1], *request);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "quantize: %s\n", e.what());
        return 1;
    }
}
