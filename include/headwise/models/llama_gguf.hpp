// SPDX-License-Identifier: MIT
// A Llama model from a llama.cpp GGUF file: LlamaConfig::from_gguf (the metadata) and
// LlamaForCausalLM::from_gguf (the tensors, stored as their blocks or dequantized).
#pragma once

#include <algorithm>    // std::copy_n, std::sort
#include <cmath>        // std::isfinite, std::log
#include <cstdint>      // std::uint8_t, std::uint64_t
#include <cstring>      // std::memcpy
#include <map>          // std::map
#include <memory>       // std::make_shared, std::shared_ptr
#include <optional>     // std::optional, std::nullopt
#include <set>          // std::set
#include <stdexcept>    // std::invalid_argument, std::runtime_error, std::logic_error
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::is_same_v
#include <vector>       // std::vector

#include "../config.hpp"
#include "../detail/compiled_templates.hpp"
#include "../detail/number_string.hpp"
#include "../io/gguf.hpp"  // also quant::dequantize_row, quant::row_bytes, quant::Type
#include "../io/gguf_value.hpp"
#include "../layers/detail/module_walks.hpp"
#include "../layers/weight_matrix.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"
#include "generation.hpp"  // generate over LlamaForCausalLM, which headwise::compiled holds
#include "llama.hpp"

namespace headwise::models {

namespace detail {

/// One tensor of a Llama GGUF file: llama.cpp's name, the parameter it fills (Hugging Face's
/// name, as LlamaForCausalLM declares it), its shape, and the heads whose rows llama.cpp's
/// converter permuted (0: none).
struct LlamaGgufTensor {
    std::string gguf;
    std::string hf;
    Shape shape;
    Index permuted_heads = 0;
};

/// The tensors a Llama (or Qwen2) GGUF file holds for `c`, in the order of llama.cpp's converter
/// (llama.cpp's tensor-name table for LLM_ARCH_LLAMA and LLM_ARCH_QWEN2). Only "llama"'s q and k
/// rows are permuted.
inline std::vector<LlamaGgufTensor> llama_gguf_tensors(const LlamaConfig& c) {
    const Index E = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
    const Index D = c.head_dim > 0 ? c.head_dim : E / c.num_attention_heads;
    const Index q = c.num_attention_heads * D, kv = c.num_key_value_heads * D;
    const bool permuted = c.model_type == "llama";
    const Index Hq = permuted ? c.num_attention_heads : 0,
                Hk = permuted ? c.num_key_value_heads : 0;
    std::vector<LlamaGgufTensor> t;
    t.push_back({"token_embd.weight", "model.embed_tokens.weight", Shape{V, E}, 0});
    for (Index n = 0; n < c.num_hidden_layers; ++n) {
        const std::string b = "blk." + std::to_string(n) + ".";
        const std::string m = "model.layers." + std::to_string(n) + ".";
        const auto add = [&](const char* gguf, const char* hf, Shape shape, Index heads) {
            t.push_back({b + gguf, m + hf, std::move(shape), heads});
        };
        add("attn_norm.weight", "input_layernorm.weight", Shape{E}, 0);
        add("attn_q.weight", "self_attn.q_proj.weight", Shape{q, E}, Hq);
        add("attn_k.weight", "self_attn.k_proj.weight", Shape{kv, E}, Hk);
        add("attn_v.weight", "self_attn.v_proj.weight", Shape{kv, E}, 0);
        add("attn_output.weight", "self_attn.o_proj.weight", Shape{E, q}, 0);
        if (c.attention_bias) {
            add("attn_q.bias", "self_attn.q_proj.bias", Shape{q}, Hq);
            add("attn_k.bias", "self_attn.k_proj.bias", Shape{kv}, Hk);
            add("attn_v.bias", "self_attn.v_proj.bias", Shape{kv}, 0);
            if (c.o_proj_bias) add("attn_output.bias", "self_attn.o_proj.bias", Shape{E}, 0);
        }
        add("ffn_norm.weight", "post_attention_layernorm.weight", Shape{E}, 0);
        add("ffn_gate.weight", "mlp.gate_proj.weight", Shape{I, E}, 0);
        add("ffn_up.weight", "mlp.up_proj.weight", Shape{I, E}, 0);
        add("ffn_down.weight", "mlp.down_proj.weight", Shape{E, I}, 0);
        if (c.mlp_bias) {
            add("ffn_gate.bias", "mlp.gate_proj.bias", Shape{I}, 0);
            add("ffn_up.bias", "mlp.up_proj.bias", Shape{I}, 0);
            add("ffn_down.bias", "mlp.down_proj.bias", Shape{E}, 0);
        }
    }
    t.push_back({"output_norm.weight", "model.norm.weight", Shape{E}, 0});
    if (!c.tie_word_embeddings) t.push_back({"output.weight", "lm_head.weight", Shape{V, E}, 0});
    return t;
}

/// Row r of Hugging Face's layout of a tensor whose rows are heads of D rows: the row of
/// llama.cpp's layout it was moved to. The converter reshapes each head's rows [2, D/2] (the
/// two halves that rotate_half pairs) and swaps the axes to [D/2, 2], so that HF row
/// s D/2 + i of a head is row 2 i + s of the file's.
inline Index llama_gguf_row(Index r, Index D) noexcept {
    const Index head = r / D, j = r % D, half = D / 2;
    return head * D + (j % half) * 2 + j / half;
}

/// A GGUF value in a message: its type and, for scalars, the value (strings bounded).
inline std::string describe_gguf_value(const io::GgufValue& v) {
    const std::string type = io::gguf_value_type_name(v.type());
    switch (v.type()) {
        case io::GgufValueType::array:
            return "an ARRAY of " + std::to_string(v.size());
        case io::GgufValueType::string:
            return "the STRING '" + io::detail::gguf::printable(v.as_string()) + "'";
        case io::GgufValueType::float32:
            return "the FLOAT32 " +
                   headwise::detail::shortest_str(static_cast<float>(v.as_float()));
        case io::GgufValueType::float64:
            return "the FLOAT64 " + headwise::detail::shortest_str(v.as_float());
        case io::GgufValueType::boolean:
            return std::string("the BOOL ") + (v.as_bool() ? "true" : "false");
        case io::GgufValueType::uint64:
            return "the UINT64 " + std::to_string(v.as_uint());
        default:
            return "the " + type + " " + std::to_string(v.as_int());
    }
}

/// Reads the metadata keys of a Llama GGUF file, each problem thrown as std::runtime_error
/// "<function>: <file>: <key>: <what>".
class LlamaGgufKeys {
public:
    explicit LlamaGgufKeys(const io::GgufFile& file) : file_(file) {}

    [[noreturn]] void fail(const std::string& key, const std::string& what) const {
        throw std::runtime_error(std::string(kFunction) + ": " + file_.name() + ": " + key + ": " +
                                 what);
    }
    const io::GgufValue* find(const std::string& key) const { return file_.find(key); }

    /// A positive integer (at most 2^31); `fallback` when absent and not required.
    Index count(const std::string& key, bool required, Index fallback = 0) const {
        const io::GgufValue* v = file_.find(key);
        if (v == nullptr) {
            if (required) fail(key, "missing (a Llama GGUF file has it)");
            return fallback;
        }
        if (!is_integer(*v) || v->as_int() < 1 || v->as_int() > (std::int64_t{1} << 31))
            fail(key, "expected a positive integer (one for all layers), got " +
                          describe_gguf_value(*v));
        return static_cast<Index>(v->as_int());
    }
    /// A finite number above `low` (at least, when `inclusive`).
    double number(const std::string& key, bool required, double fallback, double low,
                  bool inclusive) const {
        const io::GgufValue* v = file_.find(key);
        if (v == nullptr) {
            if (required) fail(key, "missing (a Llama GGUF file has it)");
            return fallback;
        }
        const bool real =
            v->type() == io::GgufValueType::float32 || v->type() == io::GgufValueType::float64;
        const double x = real ? v->as_float() : 0.0;
        if (!real || !std::isfinite(x) || x < low || (!inclusive && x == low))
            fail(key, std::string("expected a finite FLOAT32 or FLOAT64 ") +
                          (inclusive ? "of at least " : "above ") +
                          headwise::detail::shortest_str(low) + ", got " + describe_gguf_value(*v));
        return x;
    }

    /// Any finite number; std::nullopt when absent.
    std::optional<double> real(const std::string& key) const {
        const io::GgufValue* v = file_.find(key);
        if (v == nullptr) return std::nullopt;
        const bool real =
            v->type() == io::GgufValueType::float32 || v->type() == io::GgufValueType::float64;
        if (!real || !std::isfinite(v->as_float()))
            fail(key, "expected a finite FLOAT32 or FLOAT64, got " + describe_gguf_value(*v));
        return v->as_float();
    }

    static constexpr const char* kFunction = "headwise::models::LlamaConfig::from_gguf";

    /// An integer type whose value as_int() reads.
    static bool is_integer(const io::GgufValue& v) {
        switch (v.type()) {
            case io::GgufValueType::uint8:
            case io::GgufValueType::int8:
            case io::GgufValueType::uint16:
            case io::GgufValueType::int16:
            case io::GgufValueType::uint32:
            case io::GgufValueType::int32:
            case io::GgufValueType::int64:
                return true;
            case io::GgufValueType::uint64:
                return v.as_uint() <= (std::uint64_t{1} << 62);
            default:
                return false;
        }
    }

private:
    const io::GgufFile& file_;
};

/// The RoPE scaling of a Llama GGUF file onto `c` (rope_scaling_factor, rope_scaling), as
/// LlamaConfig::from_json_file maps Hugging Face's rope_scaling, so that a file made by
/// llama.cpp's converter gives the checkpoint's frequencies:
///  - rope.scaling.type "linear" (or, as llama.cpp, no type and rope.scaling.factor, or the
///    older rope.scale_linear): rope_scaling_factor.
///  - "yarn": RopeScalingType::yarn with factor = rope.scaling.factor, original_max_position =
///    rope.scaling.original_context_length (default context_length, as llama.cpp),
///    beta_fast/beta_slow = rope.scaling.yarn_beta_fast/yarn_beta_slow (default 32 and 1),
///    truncate (ggml floors and ceils the correction dimensions), attention_factor =
///    rope.scaling.yarn_attn_factor (where the converter writes Hugging Face's
///    attention_factor) or else 0.1 ln(factor) + 1, times rope.scaling.attn_factor (default 1).
///    llama.cpp itself reads neither yarn_beta_* nor yarn_attn_factor for these architectures
///    (it uses 32, 1 and 0.1 ln(factor) + 1): transformers' meaning is taken, they agree when
///    the keys hold the defaults. rope.scaling.yarn_ext_factor must be 1 (or negative: unset)
///    and yarn_log_multiplier 0, the values a converted Hugging Face model has.
///  - the tensor rope_freqs.weight (llama only, [D/2], F32, F16 or BF16, finite and positive):
///    rope_scaling.frequency_factors, the divisors llama.cpp's converter writes for "llama3".
inline void llama_gguf_rope_scaling(const LlamaGgufKeys& keys, const io::GgufFile& file,
                                    const std::string& a, LlamaConfig& c) {
    const std::string factor_key = a + "rope.scaling.factor";
    std::string kind = "none";
    if (const io::GgufValue* type = keys.find(a + "rope.scaling.type")) {
        kind = type->type() == io::GgufValueType::string ? type->as_string() : std::string();
        if (kind != "none" && kind != "linear" && kind != "yarn")
            keys.fail(a + "rope.scaling.type",
                      "only \"none\", \"linear\" and \"yarn\" rope scaling are read from GGUF "
                      "files, got " +
                          describe_gguf_value(*type));
    } else if (keys.find(factor_key) != nullptr || keys.find(a + "rope.scale_linear") != nullptr) {
        kind = "linear";  // llama.cpp's default type
    }
    if (kind == "linear") {
        const bool old = keys.find(factor_key) == nullptr && keys.find(a + "rope.scale_linear");
        c.rope_scaling_factor =
            keys.number(old ? a + "rope.scale_linear" : factor_key, true, 1.0, 1.0, true);
    }
    // rope.scaling.attn_factor multiplies cos and sin under any type in llama.cpp; a yarn
    // attention_factor can hold it, the other types have none.
    const double attn_factor = keys.number(a + "rope.scaling.attn_factor", false, 1.0, 0.0, false);
    if (kind != "yarn" && attn_factor != 1.0)
        keys.fail(a + "rope.scaling.attn_factor",
                  "only 1 is read for rope scaling \"" + kind +
                      "\" (a factor on cos and sin needs \"yarn\"), got " +
                      describe_gguf_value(*keys.find(a + "rope.scaling.attn_factor")));
    if (kind == "yarn") {
        RopeScaling& s = c.rope_scaling;
        s.type = RopeScalingType::yarn;
        if (keys.find(factor_key) == nullptr)
            keys.fail(factor_key, "missing (rope.scaling.type \"yarn\" needs it)");
        s.factor = keys.number(factor_key, true, 1.0, 1.0, true);
        s.original_max_position = keys.count(a + "rope.scaling.original_context_length", false,
                                             c.max_position_embeddings);
        s.beta_fast = keys.number(a + "rope.scaling.yarn_beta_fast", false, 32.0, 0.0, false);
        s.beta_slow = keys.number(a + "rope.scaling.yarn_beta_slow", false, 1.0, 0.0, false);
        s.truncate = true;
        // Hugging Face's get_mscale(factor) when no attention_factor is given.
        const double mscale = s.factor <= 1.0 ? 1.0 : 0.1 * std::log(s.factor) + 1.0;
        s.attention_factor =
            keys.number(a + "rope.scaling.yarn_attn_factor", false, mscale, 0.0, false) *
            attn_factor;
        const std::string ext = a + "rope.scaling.yarn_ext_factor";
        if (const std::optional<double> x = keys.real(ext); x && *x >= 0.0 && *x != 1.0)
            keys.fail(ext,
                      "only 1 (the full YaRN ramp, as transformers computes it; negative: unset) "
                      "is read, got " +
                          describe_gguf_value(*keys.find(ext)));
        const std::string log_mul = a + "rope.scaling.yarn_log_multiplier";
        if (const std::optional<double> x = keys.real(log_mul); x && *x != 0.0)
            keys.fail(log_mul,
                      "only 0 is read (llama.cpp reads it for DeepSeek models only), got " +
                          describe_gguf_value(*keys.find(log_mul)));
    }

    // rope_freqs.weight: per-pair divisors of the frequencies.
    const io::GgufTensorInfo* freqs = file.find_tensor("rope_freqs.weight");
    if (freqs == nullptr) return;
    const std::string key = "tensor 'rope_freqs.weight'";
    if (c.model_type != "llama")
        keys.fail(key,
                  "is read for general.architecture \"llama\" only (llama.cpp's converter "
                  "writes it for Llama 3.1's rope type llama3), got \"" +
                      c.model_type + "\"");
    const Index half = (c.head_dim > 0 ? c.head_dim : c.hidden_size / c.num_attention_heads) / 2;
    if (freqs->shape() != Shape{half})
        keys.fail(key, "has shape " + freqs->shape().str() + ", expected " + Shape{half}.str() +
                           " (one factor per rotated pair: the head dimension / 2)");
    if (freqs->type != quant::Type::f32 && freqs->type != quant::Type::f16 &&
        freqs->type != quant::Type::bf16)
        keys.fail(key, "has type " + quant::describe_type(static_cast<std::uint32_t>(freqs->type)) +
                           ", expected F32, F16 or BF16");
    const Tensor<float> f = file.to_float(freqs->name);  // [D/2]
    std::vector<double> factors(static_cast<std::size_t>(half));
    for (Index i = 0; i < half; ++i) {
        const double x = f.data()[i];
        if (!std::isfinite(x) || x <= 0.0)
            keys.fail(key, "value " + std::to_string(i) +
                               " must be finite and positive (it divides the frequency), got " +
                               headwise::detail::shortest_str(x));
        factors[static_cast<std::size_t>(i)] = x;
    }
    c.rope_scaling.frequency_factors = std::move(factors);
}

/// Dequantizes the tensor `info` of `file` into `out` (row-major, info.shape()), its rows put
/// back in Hugging Face's order when they are `heads` permuted heads.
template <class T>
void llama_gguf_dequantize(const io::GgufFile& file, const io::GgufTensorInfo& info, Index heads,
                           T* out) {
    const Shape shape = info.shape();
    const Index cols = shape[shape.rank() - 1], rows = info.numel / (cols > 0 ? cols : 1);
    if (info.numel == 0) return;
    const std::uint64_t row_bytes = quant::row_bytes(info.type, cols);
    const std::uint8_t* src = file.tensor_data(info);
    std::vector<float> row(static_cast<std::size_t>(cols));  // [cols]
    if (shape.rank() == 1 && heads > 0) {
        // A permuted bias: one row of elements, reordered as the rows of its weight.
        quant::dequantize_row(info.type, src, row.data(), cols);
        const Index D = cols / heads;
        for (Index r = 0; r < cols; ++r) out[r] = static_cast<T>(row[llama_gguf_row(r, D)]);
        return;
    }
    const Index D = heads > 0 ? rows / heads : 0;
    for (Index r = 0; r < rows; ++r) {
        const Index from = heads > 0 ? llama_gguf_row(r, D) : r;
        quant::dequantize_row(info.type, src + static_cast<std::uint64_t>(from) * row_bytes,
                              row.data(), cols);
        std::copy_n(row.data(), cols, out + r * cols);
    }
}

}  // namespace detail

// ---- definitions -----------------------------------------------------------------------------

inline LlamaConfig LlamaConfig::from_gguf(const io::GgufFile& file) {
    const detail::LlamaGgufKeys keys(file);
    const io::GgufValue* arch = keys.find("general.architecture");
    if (arch == nullptr) keys.fail("general.architecture", "missing (GGUF files name it)");
    if (arch->type() != io::GgufValueType::string ||
        (arch->as_string() != "llama" && arch->as_string() != "qwen2"))
        keys.fail("general.architecture",
                  "only \"llama\" and \"qwen2\" are read by LlamaForCausalLM, got " +
                      detail::describe_gguf_value(*arch));
    LlamaConfig c;
    c.model_type = arch->as_string();
    const std::string a = c.model_type + ".";  // the keys' prefix: llama.*, qwen2.*
    c.hidden_size = keys.count(a + "embedding_length", true);
    c.num_hidden_layers = keys.count(a + "block_count", true);
    c.intermediate_size = keys.count(a + "feed_forward_length", true);
    c.max_position_embeddings = keys.count(a + "context_length", true);
    c.num_attention_heads = keys.count(a + "attention.head_count", true);
    c.num_key_value_heads = keys.count(a + "attention.head_count_kv", false, c.num_attention_heads);
    c.rms_norm_eps = keys.number(a + "attention.layer_norm_rms_epsilon", true, 0.0, 0.0, false);
    c.rope_theta = keys.number(a + "rope.freq_base", false, 10000.0, 1.0, true);

    const Index H = c.num_attention_heads, E = c.hidden_size;
    // The head dimension: attention.key_length when present (it may differ from E / H), else
    // embedding_length / head_count.
    const bool has_key_length = keys.find(a + "attention.key_length") != nullptr;
    if (!has_key_length && E % H != 0)
        keys.fail(a + "attention.head_count",
                  "must divide " + a + "embedding_length = " + std::to_string(E) +
                      " (there is no " + a + "attention.key_length), got " + std::to_string(H));
    const Index D = has_key_length ? keys.count(a + "attention.key_length", true) : E / H;
    if (D != E / H || E % H != 0) c.head_dim = D;
    if (D % 2 != 0)
        keys.fail(has_key_length ? a + "attention.key_length" : a + "attention.head_count",
                  "the head dimension " + std::to_string(D) +
                      " must be even (RoPE rotates pairs of features)");
    if (H % c.num_key_value_heads != 0)
        keys.fail(a + "attention.head_count_kv",
                  "must divide " + a + "attention.head_count = " + std::to_string(H) + ", got " +
                      std::to_string(c.num_key_value_heads));
    for (const std::string& key : {a + "rope.dimension_count", a + "attention.value_length"})
        if (const Index n = keys.count(key, false, D); n != D)
            keys.fail(key, "only the head dimension " + std::to_string(D) +
                               " (attention.key_length, or embedding_length / head_count) is "
                               "supported, got " +
                               std::to_string(n));
    if (const io::GgufValue* experts = keys.find(a + "expert_count"))
        if (!detail::LlamaGgufKeys::is_integer(*experts) || experts->as_int() != 0)
            keys.fail(a + "expert_count", "mixture-of-experts models are not supported, got " +
                                              detail::describe_gguf_value(*experts));

    detail::llama_gguf_rope_scaling(keys, file, a, c);
    if (keys.find(a + "vocab_size") != nullptr) {
        c.vocab_size = keys.count(a + "vocab_size", true);
    } else if (const io::GgufValue* tokens = keys.find("tokenizer.ggml.tokens")) {
        if (tokens->type() != io::GgufValueType::array || tokens->size() == 0)
            keys.fail("tokenizer.ggml.tokens", "expected a non-empty ARRAY (the vocabulary, as " +
                                                   a + "vocab_size is missing), got " +
                                                   detail::describe_gguf_value(*tokens));
        c.vocab_size = static_cast<Index>(tokens->size());
    } else {
        keys.fail(a + "vocab_size", "missing, and so is tokenizer.ggml.tokens");
    }
    const auto token = [&](const char* key) -> std::optional<std::int64_t> {
        const io::GgufValue* v = keys.find(key);
        if (v == nullptr) return std::nullopt;
        if (!detail::LlamaGgufKeys::is_integer(*v) || v->as_int() < 0)
            keys.fail(key,
                      "expected a non-negative integer, got " + detail::describe_gguf_value(*v));
        return v->as_int();
    };
    c.bos_token_id = token("tokenizer.ggml.bos_token_id");
    if (const auto eos = token("tokenizer.ggml.eos_token_id")) c.eos_token_ids.push_back(*eos);
    c.tie_word_embeddings = file.find_tensor("output.weight") == nullptr;
    c.attention_bias = file.find_tensor("blk.0.attn_q.bias") != nullptr;
    c.o_proj_bias = file.find_tensor("blk.0.attn_output.bias") != nullptr;
    c.mlp_bias = file.find_tensor("blk.0.ffn_up.bias") != nullptr;
    return c;
}

template <class T>
LlamaForCausalLM<T> LlamaForCausalLM<T>::from_gguf(const std::string& path, GgufWeights weights,
                                                   Projection projection) {
    return from_gguf(io::load_gguf(path), weights, projection);
}

template <class T>
LlamaForCausalLM<T> LlamaForCausalLM<T>::from_gguf(const io::GgufFile& file, GgufWeights weights,
                                                   Projection projection) {
    const std::string fn = std::string(kName) + "::from_gguf";
    if (weights != GgufWeights::stored && weights != GgufWeights::float32)
        throw_invalid_argument(fn, "weights", "GgufWeights::stored or GgufWeights::float32",
                               std::to_string(static_cast<int>(weights)));
    if (weights == GgufWeights::stored && !std::is_same_v<T, float>)
        throw_invalid_argument(fn, "weights",
                               "GgufWeights::float32 for a LlamaForCausalLM<double> (stored "
                               "blocks are multiplied by float models)",
                               "GgufWeights::stored");
    const LlamaConfig config = LlamaConfig::from_gguf(file);
    const std::vector<detail::LlamaGgufTensor> specs = detail::llama_gguf_tensors(config);

    // Every tensor against the configuration before the model is built (and allocated).
    const auto fail = [&](const std::string& tensor, const std::string& what) {
        throw std::invalid_argument(fn + ": " + file.name() + ": tensor '" +
                                    io::detail::gguf::printable(tensor) + "' " + what);
    };
    std::vector<const io::GgufTensorInfo*> infos;
    std::set<std::string> expected;
    for (const detail::LlamaGgufTensor& s : specs) {
        const io::GgufTensorInfo* info = file.find_tensor(s.gguf);
        if (info == nullptr)
            fail(s.gguf, "is missing; a Llama model of this configuration has it, of shape " +
                             s.shape.str());
        if (info->shape() != s.shape)
            fail(s.gguf, "has shape " + info->shape().str() + ", expected " + s.shape.str() +
                             " (from the file's llama.* keys)");
        infos.push_back(info);
        expected.insert(s.gguf);
    }
    if (!config.rope_scaling.frequency_factors.empty())
        expected.insert("rope_freqs.weight");  // read by LlamaConfig::from_gguf
    for (const io::GgufTensorInfo& t : file.tensors())
        if (expected.count(t.name) == 0)
            fail(t.name, "is not one of a Llama model's (of llama.block_count = " +
                             std::to_string(config.num_hidden_layers) +
                             " layers); headwise reads token_embd, blk.N.attn_norm, attn_q, "
                             "attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down, "
                             "output_norm, output and rope_freqs");

    LlamaForCausalLM model(config, projection, uninitialized);
    headwise::detail::ListParametersWalk<T> walk;
    model.walk_module(walk, "", true);
    std::map<std::string, const headwise::detail::DeclaredParameter<T>*> params;
    for (const headwise::detail::ListedParameter<T>& p : walk.found) params[p.name] = &p.where;

    // The weight matrices each tensor fills, a holder's pieces in the order of their offsets.
    struct Piece {
        std::size_t spec;
        Index offset;
    };
    std::map<WeightMatrix<T>*, std::vector<Piece>> holders;
    for (std::size_t i = 0; i < specs.size(); ++i) {
        const auto it = params.find(specs[i].hf);
        if (it == params.end() || it->second->shape_of() != specs[i].shape)
            throw std::logic_error(fn + ": the model has no parameter " + specs[i].hf +
                                   " of shape " + specs[i].shape.str());
        if (it->second->holder) holders[it->second->holder].push_back({i, it->second->offset});
    }
    std::set<std::size_t> kept;  // specs whose blocks a holder keeps
    if constexpr (std::is_same_v<T, float>) {
        if (weights == GgufWeights::stored) {
            // The bytes alone: the metadata (the vocabulary, tens of MB) need not outlive loading.
            const std::shared_ptr<const void> alive = file.bytes_owner();
            for (auto& [w, pieces] : holders) {
                std::sort(pieces.begin(), pieces.end(),
                          [](const Piece& a, const Piece& b) { return a.offset < b.offset; });
                // One type for the whole holder, its pieces covering it in order, rows of the
                // holder's row length: else the holder is dequantized.
                const quant::Type type = infos[pieces.front().spec]->type;
                bool keep = type != quant::Type::f32 && w->row_length() > 0;
                Index next = 0;
                for (const Piece& p : pieces) {
                    const io::GgufTensorInfo& info = *infos[p.spec];
                    keep = keep && info.type == type && p.offset == next &&
                           info.shape().rank() == 2 && info.shape()[1] == w->row_length();
                    next += info.numel;
                }
                keep = keep && next == w->numel();
                if (!keep) continue;
                const std::uint64_t row_bytes = quant::row_bytes(type, w->row_length());
                const std::uint64_t bytes =
                    row_bytes * static_cast<std::uint64_t>(w->numel() / w->row_length());
                const bool as_is = pieces.size() == 1 && specs[pieces[0].spec].permuted_heads == 0;
                if (as_is) {  // the file's blocks where they lie
                    w->take_stored(type, file.tensor_data(*infos[pieces[0].spec]), bytes, alive);
                } else {  // the pieces' rows copied one after the other, q and k reordered
                    auto blocks = std::make_shared<std::vector<std::uint8_t>>(bytes);
                    std::uint8_t* out = blocks->data();
                    for (const Piece& p : pieces) {
                        const io::GgufTensorInfo& info = *infos[p.spec];
                        const Index rows = info.shape()[0], heads = specs[p.spec].permuted_heads;
                        const std::uint8_t* src = file.tensor_data(info);
                        for (Index r = 0; r < rows; ++r) {
                            const Index from =
                                heads > 0 ? detail::llama_gguf_row(r, rows / heads) : r;
                            std::memcpy(out, src + static_cast<std::uint64_t>(from) * row_bytes,
                                        static_cast<std::size_t>(row_bytes));
                            out += row_bytes;
                        }
                        file.release_pages(info);  // copied: the file's pages are not read again
                    }
                    const std::uint8_t* data = blocks->data();
                    w->take_stored(type, data, bytes, std::shared_ptr<const void>(blocks, data));
                }
                for (const Piece& p : pieces) kept.insert(p.spec);
            }
        }
    }
    // Everything else dequantized into the float parameters; the file's pages of what is not
    // kept are not read again.
    std::set<const io::GgufTensorInfo*> kept_infos;
    for (const std::size_t i : kept) kept_infos.insert(infos[i]);
    for (std::size_t i = 0; i < specs.size(); ++i) {
        if (kept.count(i) != 0) continue;
        const TensorView<T> dst = params.at(specs[i].hf)->value_of();
        detail::llama_gguf_dequantize(file, *infos[i], specs[i].permuted_heads, dst.data());
        if (kept_infos.count(infos[i]) == 0) file.release_pages(*infos[i]);
    }
    return model;
}

}  // namespace headwise::models

// Compiled once into headwise::compiled (detail/compiled_templates.hpp).
#define HEADWISE_DETAIL_LLAMA_TEMPLATES(C, F, T)                                    \
    C(class, models::LlamaDecoderLayer<T>)                                          \
    C(struct, models::LlamaCache<T>)                                                \
    C(class, models::LlamaModel<T>)                                                 \
    C(class, models::LlamaForCausalLM<T>)                                           \
    F(std::vector<std::vector<std::int64_t>>, models::generate,                     \
      (models::LlamaForCausalLM<T>&, const std::vector<std::vector<std::int64_t>>&, \
       const models::GenerationOptions&))
HEADWISE_COMPILED_TEMPLATES(HEADWISE_DETAIL_LLAMA_TEMPLATES);
