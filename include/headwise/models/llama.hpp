// SPDX-License-Identifier: MIT
// LlamaForCausalLM<T>: the Llama decoder (pre-RMSNorm, grouped-query attention with RoPE,
// SwiGLU) under Hugging Face's names, with a KV-cache decode path.
#pragma once

#if !__has_include(<nlohmann/json.hpp>)
#error \
    "headwise/models/llama.hpp needs nlohmann/json (Debian: nlohmann-json3-dev), for \
config.json and safetensors files; headwise::headwise links it when CMake finds it"
#endif

#include <nlohmann/json.hpp>

#include <algorithm>  // std::copy_n
#include <cmath>      // std::isfinite
#include <cstdint>    // std::int64_t
#include <optional>   // std::optional
#include <stdexcept>  // std::invalid_argument, std::runtime_error
#include <string>     // std::string, std::to_string
#include <utility>    // std::pair
#include <vector>     // std::vector

#include "../config.hpp"
#include "../detail/precision_check.hpp"
#include "../detail/shape_checks.hpp"
#include "../error.hpp"
#include "../io/detail/config_file.hpp"
#include "../io/safetensors.hpp"
#include "../layers/attention/detail/attention_options.hpp"
#include "../layers/attention/detail/in_proj_layout.hpp"
#include "../layers/attention/kv_cache.hpp"
#include "../layers/attention/multihead_attention.hpp"
#include "../layers/embedding.hpp"
#include "../layers/linear.hpp"
#include "../layers/module.hpp"
#include "../layers/rms_norm.hpp"
#include "../layers/swiglu.hpp"
#include "../layers/uninitialized.hpp"
#include "../precision.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"
#include "detail/pretrained_sizes.hpp"

namespace headwise::models {

/// The keys of a Hugging Face Llama config.json (LlamaForCausalLM) that the decoder needs.
struct LlamaConfig {
    Index vocab_size = 32000;
    Index hidden_size = 4096;              // E
    Index intermediate_size = 11008;       // I, SwiGLU's inner width
    Index num_hidden_layers = 32;          // N
    Index num_attention_heads = 32;        // H
    Index num_key_value_heads = 32;        // Hkv (grouped-query attention when < H)
    Index max_position_embeddings = 2048;  // longest sequence the model was trained for
    double rms_norm_eps = 1e-6;
    double rope_theta = 10000.0;
    double rope_scaling_factor = 1.0;         // rope_scaling {"rope_type": "linear", "factor": f}
    bool attention_bias = false;              // biases on q/k/v/o_proj
    bool mlp_bias = false;                    // biases on gate/up/down_proj
    bool tie_word_embeddings = false;         // lm_head shares embed_tokens.weight
    std::vector<std::int64_t> eos_token_ids;  // eos_token_id, an integer or a list
    std::optional<std::int64_t> bos_token_id;

    /// Reads config.json, of transformers 4 (rope_theta, rope_scaling) or 5 (rope_parameters).
    /// Throws std::runtime_error naming the file and the key that is missing, of the wrong type
    /// or out of range, or that asks for what this decoder does not do: a model_type other than
    /// "llama", a hidden_act other than "silu", a head_dim other than hidden_size /
    /// num_attention_heads, a rope type other than "default" and "linear".
    static LlamaConfig from_json_file(const std::string& path);
};

/// One Llama decoder layer (transformers' LlamaDecoderLayer), pre-norm:
///   h = x + o_proj(Attention(RoPE(q_proj(n1)), RoPE(k_proj(n1)), v_proj(n1))),  n1 = RMSNorm(x)
///   y = h + down_proj(SiLU(gate_proj(n2)) ⊙ up_proj(n2)),                      n2 = RMSNorm(h)
/// causal, grouped-query (query head i reads key/value head i / (H / Hkv)), RoPE rotate_half.
/// The attention is a MultiheadAttention whose packed in_proj_weight holds q_proj's rows, then
/// k_proj's, then v_proj's; they are visited under Hugging Face's names (self_attn.q_proj.weight,
/// ...), so a checkpoint loads with one copy. Inference only: runs through decode() with a KV
/// cache (a forward is a decode into an empty cache).
template <class T>
class LlamaDecoderLayer : public Module<LlamaDecoderLayer<T>, T> {
    HEADWISE_STATIC_ASSERT_REAL(T);

public:
    static constexpr const char* kName = "headwise::models::LlamaDecoderLayer";

    /// The feed-forward Linears allocated but not written (headwise::uninitialized), the
    /// attention with its own initial weights: load the checkpoint's next.
    LlamaDecoderLayer(const LlamaConfig& config, Projection projection, uninitialized_t);

    /// x_new [B, T, E] -> [B, T, E]: the new tokens over the cached ones and themselves;
    /// `padding` [B, T] (true = padding) or empty.
    Tensor<T> decode(TensorView<const T> x_new, KVCache<T>& cache,
                     TensorView<const bool> padding = {});

    MultiheadAttention<T>& self_attn() noexcept { return self_attn_; }
    const MultiheadAttention<T>& self_attn() const noexcept { return self_attn_; }
    SwiGLU<T>& mlp() noexcept { return mlp_; }
    const SwiGLU<T>& mlp() const noexcept { return mlp_; }
    LlamaDecoderLayer& with_projection(Projection projection) {
        self_attn_.with_projection(projection);
        return *this;
    }
    /// Precision::bf16 (float layers only): the attention's projections and the MLP's three
    /// Linears run their products in bf16 (bf16 copies of their weights taken here, the float
    /// parameters kept); the RMSNorms, RoPE, softmax and the residual sums stay float. Throws
    /// std::invalid_argument for bf16 on a double layer or a value that is no Precision
    /// enumerator, before any sub-module changes.
    /// FloatWeights::release (with bf16; inference only) is forwarded to every sub-module switched:
    /// their float weight matrices and gradients are freed (see Linear::with_precision and
    /// MultiheadAttention::with_precision); forward and decode give the results of keep bit for
    /// bit; parameters(), state_dict(), load_state_dict() and load_pretrained() throw
    /// std::logic_error before anything changes; with_precision(Precision::bf16,
    /// FloatWeights::keep) throws std::logic_error; with_precision(Precision::float32) brings
    /// float weights back, widened from bf16.
    LlamaDecoderLayer& with_precision(Precision precision,
                                      FloatWeights float_weights = FloatWeights::keep) {
        headwise::detail::check_precision<T>("headwise::models::LlamaDecoderLayer::with_precision",
                                             precision, float_weights, float_weights_released());
        self_attn_.with_precision(precision, float_weights);
        mlp_.with_precision(precision, float_weights);
        return *this;
    }
    Precision precision() const noexcept { return self_attn_.precision(); }
    /// Whether the attention's or the MLP's float weights are released.
    bool float_weights_released() const noexcept {
        return self_attn_.float_weights_released() || mlp_.float_weights_released();
    }

    template <class Self, class Visit>
    static void visit_parameters(Self& self, Visit&& visit);
    /// visit(name, value) for every parameter under visit_parameters' names, without touching
    /// the gradients (so that loading weights allocates none).
    template <class Visit>
    void visit_values(Visit&& visit);
    template <class Self, class Visit>
    static void visit_children(Self& self, Visit&& visit) {
        visit(self.input_layernorm_);
        visit(self.self_attn_);
        visit(self.post_attention_layernorm_);
        visit(self.mlp_);
    }

private:
    static MultiheadAttentionOptions attention_options(const LlamaConfig& c, Projection p);
    /// Calls visit(name, row block of `w`, row block of `g`) for q, k and v (and the biases).
    template <class W, class Visit>
    static void visit_in_proj(const detail::InProjLayout& layout, bool bias, W w, W b, W gw, W gb,
                              Visit&& visit);

    RMSNorm<T> input_layernorm_;
    MultiheadAttention<T> self_attn_;
    RMSNorm<T> post_attention_layernorm_;
    SwiGLU<T> mlp_;
};

/// One KV cache per layer of a LlamaModel, for a batch of sequences (LlamaModel::make_cache).
template <class T>
struct LlamaCache {
    std::vector<KVCache<T>> layers;

    Index size() const noexcept { return layers.empty() ? 0 : layers.front().size(); }
    Index capacity() const noexcept { return layers.empty() ? 0 : layers.front().capacity(); }
    Index batch() const noexcept { return layers.empty() ? 0 : layers.front().batch(); }
    void clear() noexcept {
        for (KVCache<T>& c : layers) c.clear();
    }
};

/// The Llama decoder stack as transformers' LlamaModel computes last_hidden_state:
///   x = embed_tokens[ids], then the N LlamaDecoderLayers, then RMSNorm.
/// Parameters under Hugging Face's names without the "model." prefix (embed_tokens.weight,
/// layers.N.self_attn.q_proj.weight, ..., norm.weight). Inference only, in evaluation mode.
///
/// Positions (RoPE): a token's position is the number of non-padding tokens before it in its
/// sequence, as transformers' generate() computes position_ids = cumsum(attention_mask) - 1, so
/// that a left-padded prompt gives what it gives alone. Padding tokens attend nothing and are
/// attended by nothing; their output rows are not meaningful.
template <class T>
class LlamaModel : public Module<LlamaModel<T>, T> {
    HEADWISE_STATIC_ASSERT_REAL(T);

public:
    static constexpr const char* kName = "headwise::models::LlamaModel";

    /// A model whose weights are allocated but not written (headwise::uninitialized); fill it
    /// with load_pretrained(). Throws std::invalid_argument for non-positive sizes, heads not
    /// dividing hidden_size or key/value heads not dividing the heads.
    LlamaModel(const LlamaConfig& config, Projection projection, uninitialized_t);

    /// A cache for decode(): room for `capacity` tokens of `batch` sequences in every layer;
    /// `cache_precision` Precision::bf16 holds the keys and values in bf16 (half the bytes; see
    /// make_kv_cache), in either precision of the model (float models only).
    LlamaCache<T> make_cache(Index batch, Index capacity,
                             Precision cache_precision = Precision::float32) const;

    /// input_ids [B, T] of new tokens (after the cache's) -> hidden states [B, T, E];
    /// `padding` [B, T] (true = padding, e.g. a left-padded prompt) or empty. Throws
    /// std::out_of_range for an id outside the vocabulary, std::invalid_argument (shape_error)
    /// for shapes that do not match the cache or a cache without room, before anything changes.
    Tensor<T> decode(TensorView<const std::int64_t> input_ids, LlamaCache<T>& cache,
                     TensorView<const bool> padding = {});
    /// input_ids [B, L] (or [L]) -> last_hidden_state [B, L, E] (or [L, E]): decode() into a
    /// fresh cache. padding_mask as decode's.
    Tensor<T> forward(TensorView<const std::int64_t> input_ids,
                      TensorView<const bool> padding_mask = {});

    /// Loads a checkpoint's state dict under `prefix` ("model." for a LlamaForCausalLM's):
    /// strictly (each key present, each of its shape, no unknown key under the prefix;
    /// rotary_emb.inv_freq buffers are ignored), everything checked before anything is written.
    void load_pretrained(const StateDict<T>& state, const std::string& prefix = "");

    LlamaModel& with_projection(Projection projection) {
        for (LlamaDecoderLayer<T>& l : layers_) l.with_projection(projection);
        return *this;
    }
    /// Precision::bf16 (LlamaModel<float> only; inference): every layer's attention
    /// projections and MLP Linears run their products in bf16 (see
    /// LlamaDecoderLayer::with_precision); the embedding, the norms, RoPE, softmax and the
    /// residual sums stay float. load_pretrained() in bf16 takes new bf16 copies of what it
    /// loads. Precision::float32 returns every layer to float. Throws std::invalid_argument for
    /// bf16 on a LlamaModel<double>, or a value that is no Precision enumerator, before any
    /// layer changes.
    /// FloatWeights::release (with bf16; inference only) is forwarded to every sub-module switched:
    /// their float weight matrices and gradients are freed (see Linear::with_precision and
    /// MultiheadAttention::with_precision); forward and decode give the results of keep bit for
    /// bit; parameters(), state_dict(), load_state_dict() and load_pretrained() throw
    /// std::logic_error before anything changes; with_precision(Precision::bf16,
    /// FloatWeights::keep) throws std::logic_error; with_precision(Precision::float32) brings
    /// float weights back, widened from bf16.
    LlamaModel& with_precision(Precision precision,
                               FloatWeights float_weights = FloatWeights::keep) {
        headwise::detail::check_precision<T>("headwise::models::LlamaModel::with_precision",
                                             precision, float_weights, float_weights_released());
        for (LlamaDecoderLayer<T>& l : layers_) l.with_precision(precision, float_weights);
        precision_ = precision;
        return *this;
    }
    Precision precision() const noexcept { return precision_; }
    /// Whether any layer's float weights are released.
    bool float_weights_released() const noexcept {
        for (const LlamaDecoderLayer<T>& l : layers_)
            if (l.float_weights_released()) return true;
        return false;
    }
    const LlamaConfig& config() const noexcept { return config_; }
    std::vector<LlamaDecoderLayer<T>>& layers() noexcept { return layers_; }
    Embedding<T>& embed_tokens() noexcept { return embed_tokens_; }
    const Embedding<T>& embed_tokens() const noexcept { return embed_tokens_; }

    template <class Self, class Visit>
    static void visit_parameters(Self& self, Visit&& visit);
    template <class Visit>
    void visit_values(Visit&& visit);
    template <class Self, class Visit>
    static void visit_children(Self& self, Visit&& visit) {
        visit(self.embed_tokens_);
        for (auto& layer : self.layers_) visit(layer);
        visit(self.norm_);
    }

private:
    static const LlamaConfig& checked(const LlamaConfig& c);
    /// Strict loading by name: every (name, view) of `values` must be in `state` under prefix +
    /// name with the view's shape; keys under `prefix` that are no value's and not `ignored`
    /// are errors. Everything is checked before anything is copied.
    template <class Ignored>
    static void load_values(const std::string& fn, const StateDict<T>& state,
                            const std::string& prefix,
                            const std::vector<std::pair<std::string, TensorView<T>>>& values,
                            Ignored&& ignored);

    LlamaConfig config_;
    Embedding<T> embed_tokens_;
    std::vector<LlamaDecoderLayer<T>> layers_;
    RMSNorm<T> norm_;
    Precision precision_ = Precision::float32;
};

/// transformers' LlamaForCausalLM: a LlamaModel ("model.") and lm_head [V, E] without bias
/// ("lm_head.weight"), or, with tie_word_embeddings, the embedding matrix as lm_head (then no
/// lm_head parameter). logits = lm_head(last_hidden_state).
template <class T>
class LlamaForCausalLM : public Module<LlamaForCausalLM<T>, T> {
    HEADWISE_STATIC_ASSERT_REAL(T);

public:
    static constexpr const char* kName = "headwise::models::LlamaForCausalLM";

    /// Allocated but not written (headwise::uninitialized); load_pretrained() fills it.
    LlamaForCausalLM(const LlamaConfig& config, Projection projection, uninitialized_t);

    /// From a Hugging Face model directory: config.json and model.safetensors (float32,
    /// float64, bfloat16 or float16 weights, read into T). Throws std::runtime_error naming the
    /// file when one is missing or malformed or the configuration unsupported,
    /// std::invalid_argument naming the file and the entry when a weight is missing, unexpected
    /// or of the wrong shape. The sizes config.json gives (vocab_size, hidden_size,
    /// intermediate_size, num_hidden_layers) are compared with the weight file's tensors before
    /// the model is built; a disagreement throws std::invalid_argument naming config.json, the
    /// key and what the file holds, having allocated nothing of the model.
    static LlamaForCausalLM from_pretrained(const std::string& dir,
                                            Projection projection = Projection::fused);

    /// Strict loading of a LlamaForCausalLM state dict (model.*, and lm_head.weight unless the
    /// embeddings are tied; a tied checkpoint's lm_head.weight, when present, is ignored).
    void load_pretrained(const StateDict<T>& state);

    /// See LlamaModel::make_cache.
    LlamaCache<T> make_cache(Index batch, Index capacity,
                             Precision cache_precision = Precision::float32) const {
        return model_.make_cache(batch, capacity, cache_precision);
    }
    /// input_ids [B, T] after the cache's tokens -> logits [B, T, V] (see LlamaModel::decode).
    Tensor<T> decode(TensorView<const std::int64_t> input_ids, LlamaCache<T>& cache,
                     TensorView<const bool> padding = {});
    /// input_ids [B, L] (or [L]) -> logits [B, L, V] (or [L, V]); padding_mask [B, L] (true =
    /// padding) or empty.
    Tensor<T> forward(TensorView<const std::int64_t> input_ids,
                      TensorView<const bool> padding_mask = {});

    LlamaForCausalLM& with_projection(Projection projection) {
        model_.with_projection(projection);
        return *this;
    }
    /// Precision::bf16 (LlamaForCausalLM<float> only; inference): the model's layers as
    /// LlamaModel::with_precision, and lm_head's product in bf16 unless the embeddings are tied
    /// (then the logits multiply by the float embedding matrix). load_pretrained() in bf16
    /// takes new bf16 copies. Throws std::invalid_argument for bf16 on a double model, or a
    /// value that is no Precision enumerator, before anything changes.
    /// FloatWeights::release (with bf16; inference only) is forwarded to every sub-module switched:
    /// their float weight matrices and gradients are freed (see Linear::with_precision and
    /// MultiheadAttention::with_precision); forward and decode give the results of keep bit for
    /// bit; parameters(), state_dict(), load_state_dict() and load_pretrained() throw
    /// std::logic_error before anything changes; with_precision(Precision::bf16,
    /// FloatWeights::keep) throws std::logic_error; with_precision(Precision::float32) brings
    /// float weights back, widened from bf16.
    /// With tied embeddings lm_head is not switched and the embedding matrix stays float.
    LlamaForCausalLM& with_precision(Precision precision,
                                     FloatWeights float_weights = FloatWeights::keep) {
        headwise::detail::check_precision<T>("headwise::models::LlamaForCausalLM::with_precision",
                                             precision, float_weights, float_weights_released());
        model_.with_precision(precision, float_weights);
        if (!model_.config().tie_word_embeddings) lm_head_.with_precision(precision, float_weights);
        return *this;
    }
    Precision precision() const noexcept { return model_.precision(); }
    /// Whether the model's or lm_head's float weights are released.
    bool float_weights_released() const noexcept {
        return model_.float_weights_released() || lm_head_.float_weights_released();
    }
    const LlamaConfig& config() const noexcept { return model_.config(); }
    LlamaModel<T>& model() noexcept { return model_; }
    const LlamaModel<T>& model() const noexcept { return model_; }

    template <class Self, class Visit>
    static void visit_parameters(Self& self, Visit&& visit) {
        LlamaForCausalLM::visit_child(self.model_, "model.", visit);
        if (!self.model_.config().tie_word_embeddings)
            LlamaForCausalLM::visit_child(self.lm_head_, "lm_head.", visit);
    }
    template <class Self, class Visit>
    static void visit_children(Self& self, Visit&& visit) {
        visit(self.model_);
        if (!self.model_.config().tie_word_embeddings) visit(self.lm_head_);
    }

private:
    Tensor<T> logits(const Tensor<T>& hidden) const;

    LlamaModel<T> model_;
    Linear<T> lm_head_;  // [V, E]; [1, 1] and unused when tied
};

// ---- definitions ----------------------------------------------------------------------------

inline LlamaConfig LlamaConfig::from_json_file(const std::string& path) {
    const headwise::detail::ConfigFile file("headwise::models::LlamaConfig::from_json_file", path);
    const nlohmann::json& j = file.json();
    LlamaConfig c;
    file.expect_string("model_type", "llama");
    file.integer("vocab_size", c.vocab_size, true, 1);
    file.integer("hidden_size", c.hidden_size, true, 1);
    file.integer("intermediate_size", c.intermediate_size, true, 1);
    file.integer("num_hidden_layers", c.num_hidden_layers, true, 1);
    file.integer("num_attention_heads", c.num_attention_heads, true, 1);
    c.num_key_value_heads = c.num_attention_heads;
    file.integer("num_key_value_heads", c.num_key_value_heads, false, 1);
    file.integer("max_position_embeddings", c.max_position_embeddings, false, 1);
    file.check_heads_divide(c.hidden_size, c.num_attention_heads);
    if (const Index D = c.hidden_size / c.num_attention_heads; D % 2 != 0)
        file.fail("num_attention_heads", "the head dimension hidden_size / num_attention_heads = " +
                                             std::to_string(c.hidden_size) + " / " +
                                             std::to_string(c.num_attention_heads) + " = " +
                                             std::to_string(D) +
                                             " must be even (RoPE rotates pairs of features)");
    if (c.num_attention_heads % c.num_key_value_heads != 0)
        file.fail("num_key_value_heads",
                  "must divide num_attention_heads = " + std::to_string(c.num_attention_heads) +
                      ", got " + std::to_string(c.num_key_value_heads));
    if (const auto it = j.find("head_dim"); it != j.end() && !it->is_null()) {
        const Index D = c.hidden_size / c.num_attention_heads;
        if (!it->is_number_integer() || it->get<std::int64_t>() != D)
            file.fail("head_dim", "only hidden_size / num_attention_heads = " + std::to_string(D) +
                                      " is supported, got " + headwise::detail::describe_json(*it));
    }
    file.number("rms_norm_eps", c.rms_norm_eps, 0.0, false);
    file.expect_string("hidden_act", "silu");
    file.boolean("attention_bias", c.attention_bias);
    file.boolean("mlp_bias", c.mlp_bias);
    file.boolean("tie_word_embeddings", c.tie_word_embeddings);

    // RoPE: transformers 4 keeps rope_theta and rope_scaling at the top, 5 both in
    // rope_parameters.
    const auto params = j.find("rope_parameters");
    const bool v5 = params != j.end() && params->is_object();
    file.number("rope_theta", c.rope_theta, 1.0, true);
    if (v5) file.number(*params, "rope_theta", c.rope_theta, 1.0, true);
    const auto scaling = v5 ? params : j.find("rope_scaling");
    const char* scaling_key = v5 ? "rope_parameters" : "rope_scaling";
    if (scaling != j.end() && !scaling->is_null()) {
        if (!scaling->is_object())
            file.fail(scaling_key,
                      "expected an object, got " + headwise::detail::describe_json(*scaling));
        auto type = scaling->find("rope_type");
        if (type == scaling->end()) type = scaling->find("type");
        const std::string kind = type == scaling->end()
                                     ? "default"
                                     : (type->is_string() ? type->get<std::string>() : "");
        if (kind == "linear") {
            if (scaling->find("factor") == scaling->end()) file.fail(scaling_key, "factor missing");
            file.number(*scaling, "factor", c.rope_scaling_factor, 1.0, false);
        } else if (kind != "default") {
            file.fail(scaling_key,
                      "only the \"default\" and \"linear\" rope types are supported, got " +
                          headwise::detail::describe_json(*type));
        }
    }
    const auto token = [&](const nlohmann::json& v, const char* key) {
        if (!v.is_number_integer() || v.get<std::int64_t>() < 0)
            file.fail(key, "expected a non-negative integer or a list of them, got " +
                               headwise::detail::describe_json(v));
        return v.get<std::int64_t>();
    };
    if (const auto it = j.find("eos_token_id"); it != j.end() && !it->is_null()) {
        if (it->is_array())
            for (const auto& v : *it) c.eos_token_ids.push_back(token(v, "eos_token_id"));
        else
            c.eos_token_ids.push_back(token(*it, "eos_token_id"));
    }
    if (const auto it = j.find("bos_token_id"); it != j.end() && !it->is_null())
        c.bos_token_id = token(*it, "bos_token_id");
    return c;
}

template <class T>
MultiheadAttentionOptions LlamaDecoderLayer<T>::attention_options(const LlamaConfig& c,
                                                                  Projection p) {
    MultiheadAttentionOptions o;
    o.embed_dim = c.hidden_size;
    o.num_heads = c.num_attention_heads;
    o.num_kv_heads = c.num_key_value_heads;
    o.bias = c.attention_bias;
    o.dropout = 0.0;
    o.projection = p;
    o.rotary.enabled = true;
    o.rotary.theta = c.rope_theta;
    o.rotary.convention = RopeConvention::rotate_half;
    o.rotary.scaling_factor = c.rope_scaling_factor;
    return o;
}

template <class T>
LlamaDecoderLayer<T>::LlamaDecoderLayer(const LlamaConfig& c, Projection projection,
                                        uninitialized_t)
    : input_layernorm_(c.hidden_size, c.rms_norm_eps),
      self_attn_(attention_options(c, projection), 0),
      post_attention_layernorm_(c.hidden_size, c.rms_norm_eps),
      mlp_(c.hidden_size, c.intermediate_size, c.mlp_bias, uninitialized) {
    self_attn_.eval();
}

template <class T>
template <class W, class Visit>
void LlamaDecoderLayer<T>::visit_in_proj(const detail::InProjLayout& layout, bool bias, W w, W b,
                                         W gw, W gb, Visit&& visit) {
    // The packed in_proj_weight [E + 2 Hkv D, E]: q_proj's E rows, k_proj's Hkv D, v_proj's.
    const char* names[3] = {"self_attn.q_proj.", "self_attn.k_proj.", "self_attn.v_proj."};
    for (int i : {detail::kQuery, detail::kKey, detail::kValue}) {
        const std::string prefix = names[i];
        const Shape ws = layout.weight_shape(i);
        visit(prefix + "weight", view(w + layout.weight_offset(i), ws),
              view(gw + layout.weight_offset(i), ws));
        if (bias) {
            const Shape bs{layout.rows(i)};
            visit(prefix + "bias", view(b + layout.bias_offset(i), bs),
                  view(gb + layout.bias_offset(i), bs));
        }
    }
}

template <class T>
template <class Self, class Visit>
void LlamaDecoderLayer<T>::visit_parameters(Self& self, Visit&& visit) {
    LlamaDecoderLayer::visit_child(self.input_layernorm_, "input_layernorm.", visit);
    auto attention = self.self_attn_.parameters();  // in_proj_weight, [in_proj_bias,] out_proj.*
    const auto find = [&](const char* name) {
        for (auto& p : attention)
            if (p.name == name) return p;
        throw std::logic_error(std::string(kName) + ": the attention has no " + name);
    };
    const bool bias = self.self_attn_.options().bias;
    const auto w = find("in_proj_weight");
    const auto empty = w;  // stands for the biases when there are none (not visited)
    const auto b = bias ? find("in_proj_bias") : empty;
    const detail::InProjLayout layout =
        detail::make_in_proj_layout<T>(kName, self.self_attn_.options());
    visit_in_proj(layout, bias, w.value.data(), b.value.data(), w.grad.data(), b.grad.data(),
                  visit);
    const auto ow = find("out_proj.weight");
    visit("self_attn.o_proj.weight", ow.value, ow.grad);
    if (bias) {
        const auto ob = find("out_proj.bias");
        visit("self_attn.o_proj.bias", ob.value, ob.grad);
    }
    LlamaDecoderLayer::visit_child(self.post_attention_layernorm_, "post_attention_layernorm.",
                                   visit);
    LlamaDecoderLayer::visit_child(self.mlp_, "mlp.", visit);
}

template <class T>
template <class Visit>
void LlamaDecoderLayer<T>::visit_values(Visit&& visit) {
    visit("input_layernorm.weight", input_layernorm_.weight());
    const bool bias = self_attn_.options().bias;
    auto attention = self_attn_.parameters();
    TensorView<T> w, b, ow, ob;
    for (auto& p : attention) {
        if (p.name == "in_proj_weight") w = p.value;
        if (p.name == "in_proj_bias") b = p.value;
        if (p.name == "out_proj.weight") ow = p.value;
        if (p.name == "out_proj.bias") ob = p.value;
    }
    const detail::InProjLayout layout = detail::make_in_proj_layout<T>(kName, self_attn_.options());
    visit_in_proj(layout, bias, w.data(), b.data(), w.data(), b.data(),
                  [&](const std::string& name, TensorView<T> v, TensorView<T>) { visit(name, v); });
    visit("self_attn.o_proj.weight", ow);
    if (bias) visit("self_attn.o_proj.bias", ob);
    visit("post_attention_layernorm.weight", post_attention_layernorm_.weight());
    visit("mlp.gate_proj.weight", mlp_.gate_proj().weight());
    if (mlp_.has_bias()) visit("mlp.gate_proj.bias", mlp_.gate_proj().bias());
    visit("mlp.up_proj.weight", mlp_.up_proj().weight());
    if (mlp_.has_bias()) visit("mlp.up_proj.bias", mlp_.up_proj().bias());
    visit("mlp.down_proj.weight", mlp_.down_proj().weight());
    if (mlp_.has_bias()) visit("mlp.down_proj.bias", mlp_.down_proj().bias());
}

template <class T>
Tensor<T> LlamaDecoderLayer<T>::decode(TensorView<const T> x_new, KVCache<T>& cache,
                                       TensorView<const bool> padding) {
    // x_new [B, T, E]
    Tensor<T> h = self_attn_.decode(input_layernorm_.forward(x_new), cache, padding);
    h.matrix() += x_new.matrix();                                             // x + Attention(n1)
    Tensor<T> y = mlp_.forward(post_attention_layernorm_.forward(h)).output;  // [B, T, E]
    y.matrix() += h.matrix();                                                 // h + MLP(n2)
    return y;
}

template <class T>
const LlamaConfig& LlamaModel<T>::checked(const LlamaConfig& c) {
    constexpr const char* fn = "headwise::models::LlamaModel::LlamaModel";
    const auto positive = [&](const char* name, Index v) {
        if (v <= 0) throw_invalid_argument(fn, name, "must be positive", std::to_string(v));
    };
    positive("config.vocab_size", c.vocab_size);
    positive("config.hidden_size", c.hidden_size);
    positive("config.intermediate_size", c.intermediate_size);
    positive("config.num_hidden_layers", c.num_hidden_layers);
    positive("config.num_attention_heads", c.num_attention_heads);
    positive("config.num_key_value_heads", c.num_key_value_heads);
    if (c.hidden_size % c.num_attention_heads != 0)
        throw_invalid_argument(fn, "config.num_attention_heads",
                               "must divide hidden_size = " + std::to_string(c.hidden_size),
                               std::to_string(c.num_attention_heads));
    if (c.num_attention_heads % c.num_key_value_heads != 0)
        throw_invalid_argument(
            fn, "config.num_key_value_heads",
            "must divide num_attention_heads = " + std::to_string(c.num_attention_heads),
            std::to_string(c.num_key_value_heads));
    return c;
}

template <class T>
LlamaModel<T>::LlamaModel(const LlamaConfig& config, Projection projection, uninitialized_t)
    : config_(checked(config)),
      embed_tokens_(config.vocab_size, config.hidden_size, std::nullopt, uninitialized),
      norm_(config.hidden_size, config.rms_norm_eps) {
    layers_.reserve(static_cast<std::size_t>(config.num_hidden_layers));
    for (Index i = 0; i < config.num_hidden_layers; ++i)
        layers_.emplace_back(config, projection, uninitialized);
    this->eval();
}

template <class T>
template <class Self, class Visit>
void LlamaModel<T>::visit_parameters(Self& self, Visit&& visit) {
    LlamaModel::visit_child(self.embed_tokens_, "embed_tokens.", visit);
    for (std::size_t i = 0; i < self.layers_.size(); ++i)
        LlamaModel::visit_child(self.layers_[i], "layers." + std::to_string(i) + ".", visit);
    LlamaModel::visit_child(self.norm_, "norm.", visit);
}

template <class T>
template <class Visit>
void LlamaModel<T>::visit_values(Visit&& visit) {
    visit("embed_tokens.weight", embed_tokens_.weight());
    for (std::size_t i = 0; i < layers_.size(); ++i) {
        const std::string layer = "layers." + std::to_string(i) + ".";
        layers_[i].visit_values(
            [&](const std::string& name, TensorView<T> v) { visit(layer + name, v); });
    }
    visit("norm.weight", norm_.weight());
}

/// Strict loading by name: every (name, view) of `values` must be in `state` under prefix +
/// name with the view's shape; keys under `prefix` that are no value's and not in `ignored`
/// are errors. Everything is checked before anything is copied.
template <class T>
template <class Ignored>
void LlamaModel<T>::load_values(const std::string& fn, const StateDict<T>& state,
                                const std::string& prefix,
                                const std::vector<std::pair<std::string, TensorView<T>>>& values,
                                Ignored&& ignored) {
    std::vector<std::string> unexpected;
    for (const auto& entry : state) {
        const std::string& key = entry.first;
        if (key.compare(0, prefix.size(), prefix) != 0) continue;
        const std::string name = key.substr(prefix.size());
        bool known = ignored(name);
        for (const auto& v : values) known = known || v.first == name;
        if (!known) unexpected.push_back(key);
    }
    for (const auto& [name, v] : values) {
        const std::string key = prefix + name;
        const auto it = state.find(key);
        if (it == state.end())
            throw std::invalid_argument(fn + ": " + key +
                                        ": missing from the state dict, expected shape " +
                                        v.shape().str());
        headwise::detail::check_shape(fn.c_str(), key.c_str(), it->second.shape(), v.shape());
    }
    if (!unexpected.empty())
        throw std::invalid_argument(fn + ": " + unexpected.front() +
                                    ": unexpected key in the state dict (shape " +
                                    state.at(unexpected.front()).shape().str() + ")");
    for (const auto& [name, v] : values) {
        const Tensor<T>& src = state.at(prefix + name);
        std::copy_n(src.data(), src.numel(), v.data());
    }
}

template <class T>
void LlamaModel<T>::load_pretrained(const StateDict<T>& state, const std::string& prefix) {
    headwise::detail::check_float_weights(
        (std::string(kName) + "::load_pretrained").c_str(), float_weights_released(),
        "loading writes the float weights (the model is inference-only)");
    std::vector<std::pair<std::string, TensorView<T>>> values;
    visit_values([&](const std::string& name, TensorView<T> v) { values.emplace_back(name, v); });
    const auto ignored = [](const std::string& name) {
        const std::string buffer = "rotary_emb.inv_freq";
        return name.size() >= buffer.size() &&
               name.compare(name.size() - buffer.size(), buffer.size(), buffer) == 0;
    };
    load_values(std::string(kName) + "::load_pretrained", state, prefix, values, ignored);
    if (precision_ == Precision::bf16) with_precision(Precision::bf16);  // copies of the new
}

template <class T>
LlamaCache<T> LlamaModel<T>::make_cache(Index batch, Index capacity,
                                        Precision cache_precision) const {
    LlamaCache<T> cache;
    cache.layers.reserve(layers_.size());
    for (const LlamaDecoderLayer<T>& l : layers_)
        cache.layers.push_back(l.self_attn().make_kv_cache(batch, capacity, cache_precision));
    return cache;
}

template <class T>
Tensor<T> LlamaModel<T>::decode(TensorView<const std::int64_t> input_ids, LlamaCache<T>& cache,
                                TensorView<const bool> padding) {
    constexpr const char* fn = "headwise::models::LlamaModel::decode";
    if (input_ids.rank() != 2) throw shape_error(fn, "input_ids", "[B, T]", input_ids.shape());
    const Index B = input_ids.size(0), Tn = input_ids.size(1);
    if (cache.layers.size() != layers_.size())
        throw_invalid_argument(fn, "cache",
                               "must have one KV cache per layer (" +
                                   std::to_string(layers_.size()) + ", see make_cache)",
                               std::to_string(cache.layers.size()));
    if (cache.batch() != B)
        throw shape_error(fn, "input_ids",
                          "[" + std::to_string(cache.batch()) + ", T] (the cache's batch)",
                          input_ids.shape());
    if (Tn > cache.capacity() - cache.size())
        throw_invalid_argument(fn, "input_ids",
                               "must fit the cache, which holds " + std::to_string(cache.size()) +
                                   " of capacity " + std::to_string(cache.capacity()) + " tokens",
                               std::to_string(Tn) + " new tokens");
    const bool padded = padding.data() != nullptr && padding.numel() > 0;
    if (padded) headwise::detail::check_shape(fn, "padding", padding.shape(), input_ids.shape());
    Tensor<T> x = embed_tokens_.forward(input_ids);  // [B, T, E], checks the ids
    for (std::size_t i = 0; i < layers_.size(); ++i)
        x = layers_[i].decode(x, cache.layers[i], padded ? padding : TensorView<const bool>{});
    return norm_.forward(x);
}

template <class T>
Tensor<T> LlamaModel<T>::forward(TensorView<const std::int64_t> input_ids,
                                 TensorView<const bool> padding_mask) {
    constexpr const char* fn = "headwise::models::LlamaModel::forward";
    if (input_ids.rank() != 1 && input_ids.rank() != 2)
        throw shape_error(fn, "input_ids", "[B, L] or [L]", input_ids.shape());
    const bool batched = input_ids.rank() == 2;
    const Index B = batched ? input_ids.size(0) : 1, L = input_ids.size(-1);
    const bool padded = padding_mask.data() != nullptr && padding_mask.numel() > 0;
    if (padded)
        headwise::detail::check_shape(fn, "padding_mask", padding_mask.shape(), input_ids.shape());
    if (L == 0) throw shape_error(fn, "input_ids", "at least one token", input_ids.shape());
    LlamaCache<T> cache = make_cache(B, L);
    const Shape bl{B, L};
    Tensor<T> y = decode(input_ids.reshape(bl), cache,
                         padded ? padding_mask.reshape(bl) : TensorView<const bool>{});
    if (!batched) y = std::move(y).reshape(Shape{L, config_.hidden_size});
    return y;
}

template <class T>
LlamaForCausalLM<T>::LlamaForCausalLM(const LlamaConfig& config, Projection projection,
                                      uninitialized_t)
    : model_(config, projection, uninitialized),
      lm_head_(config.hidden_size, config.tie_word_embeddings ? 1 : config.vocab_size, false,
               uninitialized) {
    this->eval();
}

template <class T>
void LlamaForCausalLM<T>::load_pretrained(const StateDict<T>& state) {
    const std::string fn = std::string(kName) + "::load_pretrained";
    headwise::detail::check_float_weights(
        fn.c_str(), float_weights_released(),
        "loading writes the float weights (the model is inference-only)");
    const bool tied = model_.config().tie_word_embeddings;
    for (const auto& entry : state) {
        const std::string& key = entry.first;
        if (key.compare(0, 6, "model.") != 0 && !(key == "lm_head.weight"))
            throw std::invalid_argument(fn + ": " + key +
                                        ": unexpected key in the state dict (shape " +
                                        entry.second.shape().str() + ")");
    }
    if (!tied) {
        const auto it = state.find("lm_head.weight");
        const Shape expected{model_.config().vocab_size, model_.config().hidden_size};
        if (it == state.end())
            throw std::invalid_argument(
                fn + ": lm_head.weight: missing from the state dict, expected shape " +
                expected.str() + " (tie_word_embeddings is false)");
        headwise::detail::check_shape(fn.c_str(), "lm_head.weight", it->second.shape(), expected);
    }
    model_.load_pretrained(state, "model.");
    if (!tied) {
        const Tensor<T>& w = state.at("lm_head.weight");
        std::copy_n(w.data(), w.numel(), lm_head_.weight().data());
        if (lm_head_.precision() == Precision::bf16) lm_head_.with_precision(Precision::bf16);
    }
}

template <class T>
LlamaForCausalLM<T> LlamaForCausalLM<T>::from_pretrained(const std::string& dir,
                                                         Projection projection) {
    constexpr const char* fn = "headwise::models::LlamaForCausalLM::from_pretrained";
    const std::string base = dir.empty() || dir.back() == '/' ? dir : dir + "/";
    const std::string config_path = base + "config.json";
    const LlamaConfig config = LlamaConfig::from_json_file(config_path);
    const std::string weights = base + "model.safetensors";
    const StateDict<T> state = io::load_safetensors<T>(weights);
    // The sizes that the model's allocation (and its attention's initialisation) grows with,
    // against the file's tensors first: a config.json asking for more than the file holds fails
    // here at once.
    const auto extents = [&](const std::string& tensor,
                             std::vector<headwise::detail::ConfigExtent> dims) {
        headwise::detail::check_config_extents(fn, config_path, weights, state, tensor, dims);
    };
    extents("model.embed_tokens.weight",
            {{"vocab_size", config.vocab_size}, {"hidden_size", config.hidden_size}});
    headwise::detail::check_config_layers(fn, config_path, weights, state, "model.layers.",
                                          "num_hidden_layers", config.num_hidden_layers);
    extents("model.layers.0.mlp.gate_proj.weight",
            {{"intermediate_size", config.intermediate_size}, {"hidden_size", config.hidden_size}});
    LlamaForCausalLM model(config, projection, uninitialized);
    try {
        model.load_pretrained(state);
    } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(std::string(fn) + ": " + weights + ": " + e.what());
    }
    return model;
}

template <class T>
Tensor<T> LlamaForCausalLM<T>::logits(const Tensor<T>& hidden) const {
    if (!model_.config().tie_word_embeddings) return lm_head_.forward(hidden);
    const Index V = model_.config().vocab_size;
    Shape s = hidden.shape();
    std::vector<Index> dims(s.begin(), s.end());
    dims.back() = V;
    Tensor<T> out = Tensor<T>::uninitialized(Shape(dims));  // [..., V]
    out.matrix().noalias() = hidden.matrix() * model_.embed_tokens().weight().matrix().transpose();
    return out;
}

template <class T>
Tensor<T> LlamaForCausalLM<T>::decode(TensorView<const std::int64_t> input_ids,
                                      LlamaCache<T>& cache, TensorView<const bool> padding) {
    return logits(model_.decode(input_ids, cache, padding));
}

template <class T>
Tensor<T> LlamaForCausalLM<T>::forward(TensorView<const std::int64_t> input_ids,
                                       TensorView<const bool> padding_mask) {
    return logits(model_.forward(input_ids, padding_mask));
}

}  // namespace headwise::models
