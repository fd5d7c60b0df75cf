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

#include <algorithm>  // std::copy_n, std::min
#include <cmath>      // std::isfinite, std::log
#include <cstdint>    // std::int64_t
#include <map>        // std::map
#include <memory>     // std::shared_ptr, std::make_shared
#include <optional>   // std::optional
#include <stdexcept>  // std::invalid_argument, std::runtime_error
#include <string>     // std::string, std::to_string
#include <utility>    // std::move
#include <vector>     // std::vector

#include "../config.hpp"
#include "../detail/precision_check.hpp"
#include "../detail/shape_checks.hpp"
#include "../error.hpp"
#include "../io/detail/config_file.hpp"
#include "../io/safetensors.hpp"
#include "../io/safetensors_checkpoint.hpp"
#include "../layers/attention/detail/attention_options.hpp"
#include "../layers/attention/detail/in_proj_layout.hpp"
#include "../layers/attention/kv_cache.hpp"
#include "../layers/attention/multihead_attention.hpp"
#include "../layers/detail/instance_id.hpp"
#include "../layers/embedding.hpp"
#include "../layers/linear.hpp"
#include "../layers/module.hpp"
#include "../layers/rms_norm.hpp"
#include "../layers/swiglu.hpp"
#include "../layers/uninitialized.hpp"
#include "../precision.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"
#include "detail/model_record.hpp"
#include "detail/pretrained_sizes.hpp"
#include "heads.hpp"

namespace headwise::io {
class GgufFile;
}

namespace headwise::models {

/// How LlamaForCausalLM::from_gguf holds a GGUF file's weight matrices.
enum class GgufWeights {
    stored,   // quantized (and F16, BF16) matrices kept as the file's blocks, multiplied as they
              // are (ops::quant_matmul); LlamaForCausalLM<float> only
    float32,  // every tensor dequantized to float at load
};

/// The keys of a Hugging Face Llama config.json (LlamaForCausalLM) that the decoder needs.
struct LlamaConfig {
    Index vocab_size = 32000;
    Index hidden_size = 4096;              // E
    Index intermediate_size = 11008;       // I, SwiGLU's inner width
    Index num_hidden_layers = 32;          // N
    Index num_attention_heads = 32;        // H
    Index num_key_value_heads = 32;        // Hkv (grouped-query attention when < H)
    Index head_dim = 0;                    // D; 0: E / H (set: H D may differ from E)
    Index max_position_embeddings = 2048;  // longest sequence the model was trained for
    double rms_norm_eps = 1e-6;
    double rope_theta = 10000.0;
    double rope_scaling_factor = 1.0;         // rope_scaling {"rope_type": "linear", "factor": f}
    RopeScaling rope_scaling;                 // rope_type "llama3", "dynamic" or "yarn"
    bool attention_bias = false;              // biases on q/k/v_proj (and o_proj: o_proj_bias)
    bool o_proj_bias = true;                  // with attention_bias, o_proj's too (Qwen2: false)
    bool mlp_bias = false;                    // biases on gate/up/down_proj
    bool tie_word_embeddings = false;         // lm_head shares embed_tokens.weight
    std::vector<std::int64_t> eos_token_ids;  // eos_token_id, an integer or a list
    std::optional<std::int64_t> bos_token_id;
    /// "llama", or "qwen2" (Qwen2ForCausalLM: the same decoder with q/k/v biases and none on
    /// o_proj; its GGUF files keep Hugging Face's q/k rows, llama.cpp's converter permutes only
    /// "llama"'s).
    std::string model_type = "llama";
    /// Query heads removed from the weights, {layer: [head, ...]} in the unpruned numbering
    /// (LlamaModel::prune_heads adds to it): a model built from this configuration has them
    /// pruned, so a pruned model's state dict loads into one built from its config().
    std::map<Index, std::vector<Index>> pruned_heads;

    /// Reads config.json, of transformers 4 (rope_theta, rope_scaling) or 5 (rope_parameters).
    /// model_type "llama" or "qwen2" (attention_bias then q/k/v only, use_sliding_window false);
    /// head_dim, when present, is the head dimension (the inner width H head_dim may differ from
    /// hidden_size); rope types "default", "linear", "llama3" (factor, low_freq_factor,
    /// high_freq_factor, original_max_position_embeddings), "dynamic" (factor; the original
    /// length is max_position_embeddings) and "yarn" (factor, or max_position_embeddings /
    /// original_max_position_embeddings; attention_factor, or 0.1 ln(factor) + 1, or
    /// mscale/mscale_all_dim's ratio; beta_fast, beta_slow, truncate), with Hugging Face's
    /// defaults. Throws std::runtime_error naming the file and the key that is missing, of the
    /// wrong type or out of range, or that asks for what this decoder does not do: another
    /// model_type, a hidden_act other than "silu", an odd head dimension, another rope type (named
    /// with its value), a Qwen2 sliding window.
    static LlamaConfig from_json_file(const std::string& path);

    /// Reads the metadata of a llama.cpp GGUF file (llama_gguf.hpp): general.architecture must
    /// be "llama" or "qwen2" (its keys' prefix <arch>, and model_type); <arch>.embedding_length,
    /// block_count, feed_forward_length, context_length, attention.head_count and
    /// attention.layer_norm_rms_epsilon are required; attention.head_count_kv (default
    /// head_count), rope.freq_base (default 10000), attention.key_length (the head dimension,
    /// default embedding_length / head_count; head_dim when it differs), value_length and
    /// rope.dimension_count (each, when present, equal to it), rope.scaling.type ("none",
    /// "linear" with rope.scaling.factor, or "yarn" with rope.scaling.factor,
    /// original_context_length, yarn_beta_fast, yarn_beta_slow, yarn_attn_factor and attn_factor
    /// onto rope_scaling, as config.json's yarn; see detail::llama_gguf_rope_scaling), the tensor
    /// rope_freqs.weight (llama only: rope_scaling.frequency_factors, which llama.cpp's converter
    /// writes for rope type llama3), vocab_size (else the length of tokenizer.ggml.tokens),
    /// tokenizer.ggml.bos_token_id and eos_token_id are read.
    /// tie_word_embeddings is true when the file has no output.weight, attention_bias when it has
    /// blk.0.attn_q.bias (o_proj_bias when it has blk.0.attn_output.bias), mlp_bias when it has
    /// blk.0.ffn_up.bias. Throws std::runtime_error naming this function, the file, the key and
    /// the value for a key missing, of the wrong type or out of range, or asking for what this
    /// decoder does not do (another architecture, rope scaling other than linear and yarn, a
    /// rope_freqs.weight not of D/2 finite positive factors, experts, value or rotary dimensions
    /// other than the key dimension).
    static LlamaConfig from_gguf(const io::GgufFile& file);
};

template <class T>
class LlamaModel;
template <class T>
class LlamaForCausalLM;

/// What LlamaDecoderLayer::forward keeps for backward in training mode: the inputs of the two
/// RMSNorms and the records of the attention and the MLP. Read only by the layer; users keep it
/// inside LlamaDecoderLayerForward.
template <class T>
struct LlamaDecoderLayerActivations {
    std::uint64_t layer = 0;        // the InstanceId of the layer that ran forward
    Index heads = 0;                // its attention's query heads then (prune_heads cuts them)
    Tensor<T> x;                    // the input, input_layernorm's: [B, L, E]
    AttentionForward<T> self_attn;  // Attention(n1), n1 = input_layernorm(x)
    Tensor<T> h;                    // x + Attention(n1), post_attention_layernorm's input
    SwiGLUForward<T> mlp;           // MLP(n2), n2 = post_attention_layernorm(h)
};

/// What LlamaDecoderLayer::forward returns; keep it until backward (in training mode it holds
/// what backward needs, in eval mode only the output).
template <class T>
struct LlamaDecoderLayerForward {
    Tensor<T> output;  // the input's shape, [B, L, E] ([L, E])
    std::shared_ptr<const LlamaDecoderLayerActivations<T>> saved;

    bool differentiable() const noexcept { return saved != nullptr; }
};

/// What LlamaModel::forward_train keeps for backward in training mode. Read only by the model;
/// users keep it inside LlamaModelForward.
template <class T>
struct LlamaModelActivations {
    std::uint64_t model = 0;                          // the InstanceId of the model
    Tensor<std::int64_t> input_ids;                   // [B, L]
    std::vector<LlamaDecoderLayerForward<T>> layers;  // the last one's output is norm's input
    // With head_mask_grad: the gates' gradient [N, H] that the attentions' backwards add into
    // (each layer's row is its AttentionMasks::head_mask_grad); backward zeroes it first.
    mutable Tensor<T> head_mask_grad;
};

/// What LlamaModel::forward_train returns; keep it until backward.
template <class T>
struct LlamaModelForward {
    Tensor<T> last_hidden_state;  // [B, L, E] ([L, E] for unbatched input ids)
    std::shared_ptr<const LlamaModelActivations<T>> saved;

    bool differentiable() const noexcept { return saved != nullptr; }
};

/// What LlamaModel::backward and LlamaForCausalLM::backward return besides the parameter
/// gradients, which they add into the modules.
template <class T>
struct LlamaModelGradients {
    /// d loss / d embed_tokens(input_ids): [B, L, E] ([L, E]), the gradient of the embedded
    /// tokens (what the embedding table's gradient gathers per id).
    Tensor<T> inputs_embeds;
    /// With head_mask_grad at forward_train: d loss / d xi [N, H], layer n's gate of head h, at
    /// the head_mask given (or at ones without one): Michel et al.'s importance of a head is the
    /// mean of its |d loss / d xi| over batches at xi = 1. For a head_mask [H] shared by every
    /// layer, the gradient of the shared gate is the sum over n. Empty otherwise.
    Tensor<T> head_mask;
};

/// What LlamaForCausalLM::forward_train keeps for backward in training mode.
template <class T>
struct LlamaForCausalLMActivations {
    std::uint64_t model = 0;    // the InstanceId of the LlamaForCausalLM
    LlamaModelForward<T> body;  // the decoder's record; its last_hidden_state is lm_head's input
};

/// What LlamaForCausalLM::forward_train returns; keep it until backward.
template <class T>
struct LlamaForCausalLMForward {
    Tensor<T> logits;  // [B, L, V] ([L, V] for unbatched input ids)
    std::shared_ptr<const LlamaForCausalLMActivations<T>> saved;

    bool differentiable() const noexcept { return saved != nullptr; }
};

// Not compiled into headwise::compiled (detail/compiled_templates.hpp), having no member defined
// outside the class (the records' work is the modules'):
// not compiled: LlamaDecoderLayerActivations
// not compiled: LlamaDecoderLayerForward
// not compiled: LlamaModelActivations
// not compiled: LlamaModelForward
// not compiled: LlamaModelGradients
// not compiled: LlamaForCausalLMActivations
// not compiled: LlamaForCausalLMForward

/// One Llama decoder layer (transformers' LlamaDecoderLayer), pre-norm:
///   h = x + o_proj(Attention(RoPE(q_proj(n1)), RoPE(k_proj(n1)), v_proj(n1))),  n1 = RMSNorm(x)
///   y = h + down_proj(SiLU(gate_proj(n2)) ⊙ up_proj(n2)),                      n2 = RMSNorm(h)
/// causal, grouped-query (query head i reads key/value head i / (H / Hkv)), RoPE rotate_half.
/// The attention is a MultiheadAttention whose packed in_proj_weight holds q_proj's rows, then
/// k_proj's, then v_proj's; they are declared under Hugging Face's names (self_attn.q_proj.weight,
/// ...), so a checkpoint loads with one copy. Inference runs through decode() with a KV cache (a
/// forward is a decode into an empty cache); training through the forward that returns a
/// LlamaDecoderLayerForward and its backward.
template <class T>
class LlamaDecoderLayer : public Module<LlamaDecoderLayer<T>, T> {
    HEADWISE_STATIC_ASSERT_REAL(T);

public:
    static constexpr const char* kName = "headwise::models::LlamaDecoderLayer";

    /// The attention and the feed-forward Linears allocated but not written
    /// (headwise::uninitialized): load the checkpoint's next.
    LlamaDecoderLayer(const LlamaConfig& config, Projection projection, uninitialized_t);

    /// x_new [B, T, E] -> [B, T, E]: the new tokens over the cached ones and themselves;
    /// `padding` [B, T] (true = padding) or empty; `head_mask` [H] or [B, H] gates the heads
    /// (AttentionMasks::head_mask).
    Tensor<T> decode(TensorView<const T> x_new, KVCache<T>& cache,
                     TensorView<const bool> padding = {}, TensorView<const T> head_mask = {});
    /// x [B, L, E] -> [B, L, E] without a cache, through MultiheadAttention::forward (causal,
    /// rotary positions 0..L-1): what decode() into an empty cache gives, and with
    /// masks.need_weights the attention's weights moved into `attn_weights` (each head's,
    /// [B, H, L, L], with masks.average_attn_weights = false). `masks` carries the key padding
    /// and head_mask; is_causal is set here.
    Tensor<T> forward(TensorView<const T> x, AttentionMasks<T> masks, Tensor<T>& attn_weights);
    /// x [B, L, E] (or [L, E]) -> output of its shape, through MultiheadAttention::forward
    /// (causal, rotary positions 0..L-1; is_causal is set here). `masks` carries the key padding
    /// and head_mask, and head_mask_grad: set, backward adds d loss / d xi into it (see
    /// AttentionMasks). In training mode the result holds what backward needs (the input, the
    /// residual sum and the attention's and the MLP's records), in eval mode only the output.
    /// Throws shape_error for x of another rank or last extent, and what the attention throws
    /// for its masks, before anything changes.
    LlamaDecoderLayerForward<T> forward(TensorView<const T> x, AttentionMasks<T> masks = {});
    /// Gradient of sum(output ⊙ dy) with respect to x for this layer's forward that gave `fwd`;
    /// every parameter's gradient is added (until zero_grad()), and masks.head_mask_grad's when
    /// it was set. Throws std::invalid_argument for a result of an eval-mode forward or of
    /// another layer's (a copy of a layer is another layer), shape_error for dy of another shape
    /// than the output, std::logic_error for weights stored in a GGUF type or released float
    /// weights (the layer is then inference-only); all before anything changes.
    Tensor<T> backward(const LlamaDecoderLayerForward<T>& fwd, TensorView<const T> dy);

    MultiheadAttention<T>& self_attn() noexcept { return self_attn_; }
    const MultiheadAttention<T>& self_attn() const noexcept { return self_attn_; }
    SwiGLU<T>& mlp() noexcept { return mlp_; }
    const SwiGLU<T>& mlp() const noexcept { return mlp_; }
    LlamaDecoderLayer& with_projection(Projection projection) {
        self_attn_.with_projection(projection);
        return *this;
    }
    /// with_precision (Module; float layers): the attention's projections and the MLP's three
    /// Linears multiply in bf16 (FloatWeights::release frees their float weights: see
    /// Module::with_precision); the RMSNorms, RoPE, softmax and the residual sums stay float.

    /// input_layernorm, self_attn (its packed in-projection's row blocks as q_proj, k_proj and
    /// v_proj, out_proj as o_proj), post_attention_layernorm, mlp (the module contract).
    template <class D>
    void declare(D& d) {
        d.child("input_layernorm", input_layernorm_);
        d.renamed_child(self_attn_, attention_pieces());
        d.child("post_attention_layernorm", post_attention_layernorm_);
        d.child("mlp", mlp_);
    }

private:
    static MultiheadAttentionOptions attention_options(const LlamaConfig& c, Projection p);
    /// Throws std::invalid_argument naming `fn` and `argument` unless `fwd` is a training-mode
    /// record of this layer with its current heads.
    void check_record(const char* fn, const LlamaDecoderLayerForward<T>& fwd,
                      const std::string& argument) const;
    friend class LlamaModel<T>;
    friend class LlamaForCausalLM<T>;

    /// The attention's parameters as a Llama checkpoint names them, in transformers' order:
    /// self_attn.q_proj.weight [E, E] (and .bias), k_proj.* [Hkv D, E], v_proj.* (the row
    /// blocks of in_proj_weight and in_proj_bias), o_proj.* (out_proj.*).
    std::vector<ParameterPiece> attention_pieces() const;

    headwise::detail::InstanceId id_;  // names this object in its forward records
    RMSNorm<T> input_layernorm_;
    MultiheadAttention<T> self_attn_;
    RMSNorm<T> post_attention_layernorm_;
    SwiGLU<T> mlp_;
    bool o_proj_bias_ = true;  // with the attention's biases, o_proj's declared (Qwen2: not, zero)
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
/// layers.N.self_attn.q_proj.weight, ..., norm.weight). Built in evaluation mode, for inference
/// (decode, forward); after train(), forward_train and backward give every parameter's gradient
/// and the head gates' (see forward_train).
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
    /// make_kv_cache), in either precision of the model (float models only). Its layers share
    /// one decode scratch (KVCache::share_decode_buffers), so a cache serves one decode call at
    /// a time; a copy of the LlamaCache gives each layer a scratch of its own.
    LlamaCache<T> make_cache(Index batch, Index capacity,
                             Precision cache_precision = Precision::float32) const;

    /// input_ids [B, T] of new tokens (after the cache's) -> hidden states [B, T, E];
    /// `padding` [B, T] (true = padding, e.g. a left-padded prompt) or empty. Throws
    /// std::out_of_range for an id outside the vocabulary, std::invalid_argument (shape_error)
    /// for shapes that do not match the cache or a cache without room, before anything changes.
    /// `head_mask` [N, H] or [H] gates each layer's heads (HeadOptions::head_mask). A cache
    /// made before prune_heads no longer fits the layers it pruned: it is refused
    /// (std::invalid_argument naming the cache and the layer) before anything changes.
    Tensor<T> decode(TensorView<const std::int64_t> input_ids, LlamaCache<T>& cache,
                     TensorView<const bool> padding = {}, TensorView<const T> head_mask = {});
    /// The checks decode makes, with its messages, without decoding: for a caller that
    /// decodes a batch of new tokens in parts and must refuse it before the first part
    /// changes the cache.
    void check_decode(TensorView<const std::int64_t> input_ids, const LlamaCache<T>& cache,
                      TensorView<const bool> padding = {},
                      TensorView<const T> head_mask = {}) const;
    /// input_ids [B, L] (or [L]) -> last_hidden_state [B, L, E] (or [L, E]): decode() into a
    /// fresh cache. padding_mask as decode's.
    Tensor<T> forward(TensorView<const std::int64_t> input_ids,
                      TensorView<const bool> padding_mask = {});
    /// The same with Hugging Face's head_mask and output_attentions (HeadOptions). With
    /// output_attentions the layers run MultiheadAttention::forward (causal, positions 0..L-1)
    /// instead of a cache and return each layer's per-head probabilities [B, H, L, L]; that
    /// needs every padding token after the sequence's real ones (right padding): left padding
    /// shifts the rotary positions, which only decode() follows, and throws
    /// std::invalid_argument. Rows of padding queries are not meaningful.
    ModelOutput<T> forward(TensorView<const std::int64_t> input_ids,
                           TensorView<const bool> padding_mask, const HeadOptions<T>& heads);

    /// The forward that backward differentiates: input_ids [B, L] (or [L]) ->
    /// last_hidden_state [B, L, E] (or [L, E]) through each layer's LlamaDecoderLayer::forward
    /// (causal, rotary positions 0..L-1, as forward with output_attentions: padding_mask [B, L]
    /// must have each sequence's padding after its tokens, and padding rows are not meaningful).
    /// heads.head_mask [N, H] or [H] gates each layer's heads (heads.output_attentions must be
    /// false). With `head_mask_grad`, backward also returns d loss / d head_mask per layer and
    /// head ([N, H]; needs every layer to have the same number of heads). In training mode
    /// (train()) the result holds what backward needs; in eval mode only the hidden states.
    /// Throws std::out_of_range for an id outside the vocabulary, shape_error /
    /// std::invalid_argument for shapes, left padding, output_attentions or a head_mask_grad
    /// the layers cannot have, before anything changes.
    LlamaModelForward<T> forward_train(TensorView<const std::int64_t> input_ids,
                                       TensorView<const bool> padding_mask = {},
                                       const HeadOptions<T>& heads = {},
                                       bool head_mask_grad = false);
    /// Gradients of sum(last_hidden_state ⊙ grad_output) for this model's forward_train that
    /// gave `fwd`: every parameter's gradient is added (the embedding table's rows of the
    /// ids included; until zero_grad()), the gradient of the embedded tokens and (with
    /// head_mask_grad) of the head gates returned. Throws std::invalid_argument for a result of
    /// an eval-mode forward or of another model's (a copy is another model), shape_error for
    /// grad_output of another shape than last_hidden_state, std::logic_error for weights stored
    /// in a GGUF type or released float weights (inference-only); all before anything changes.
    LlamaModelGradients<T> backward(const LlamaModelForward<T>& fwd,
                                    TensorView<const T> grad_output);

    /// Removes query heads from the weights: `heads` {layer: [head, ...]}, head indices of the
    /// unpruned model (as BertModel::prune_heads; config().pruned_heads records them). A
    /// key/value head goes when its whole group of query heads is gone; the groups that remain
    /// must keep equally many query heads. Afterwards forward and decode give what the unpruned
    /// model gives with those heads' head_mask at 0; state dict names stay, shapes narrow.
    /// Caches made before belong to the old shapes (decode refuses them; make a new one).
    /// Throws std::invalid_argument naming the argument for a layer outside [0, N), a head
    /// outside [0, H), a head listed twice or pruned before, every remaining head of a layer,
    /// or groups left unequal; std::logic_error unless the weights are float32 and held (not
    /// bf16, not a GGUF file's stored blocks); all before anything changes.
    LlamaModel& prune_heads(const HeadsToPrune& heads);

    /// Loads a checkpoint's state dict under `prefix` ("model." for a LlamaForCausalLM's):
    /// load_state_dict(state, prefix, load_rules()), its errors naming this function: strict
    /// (each key present, each of its shape, no unknown key under the prefix; rotary_emb.inv_freq
    /// buffers are ignored), everything checked before anything is written. Throws
    /// std::logic_error when the float weights are released, before anything changes.
    void load_pretrained(const StateDict<T>& state, const std::string& prefix = "");
    /// What a Llama checkpoint holds besides the parameters: the rotary_emb.inv_freq buffers
    /// that transformers saved.
    static LoadRules load_rules() {
        LoadRules rules;
        rules.ignored_suffixes = {"rotary_emb.inv_freq"};
        return rules;
    }

    LlamaModel& with_projection(Projection projection) {
        for (LlamaDecoderLayer<T>& l : layers_) l.with_projection(projection);
        return *this;
    }
    /// with_precision (Module; LlamaModel<float>, inference): every layer's attention
    /// projections and MLP Linears multiply in bf16 (see LlamaDecoderLayer); the embedding, the
    /// norms, RoPE, softmax and the residual sums stay float. load_pretrained() in bf16 takes new
    /// bf16 copies of what it loads.
    const LlamaConfig& config() const noexcept { return config_; }
    std::vector<LlamaDecoderLayer<T>>& layers() noexcept { return layers_; }
    Embedding<T>& embed_tokens() noexcept { return embed_tokens_; }
    const Embedding<T>& embed_tokens() const noexcept { return embed_tokens_; }

    /// embed_tokens, layers.0 ... layers.N-1, norm (the module contract).
    template <class D>
    void declare(D& d) {
        d.child("embed_tokens", embed_tokens_);
        for (std::size_t i = 0; i < layers_.size(); ++i)
            d.child("layers." + std::to_string(i), layers_[i]);
        d.child("norm", norm_);
    }

private:
    static const LlamaConfig& checked(const LlamaConfig& c);
    /// Throws std::invalid_argument naming `fn`, padding_mask [B, L] and `context` (where only
    /// right padding is taken) when a sequence has a padding token before a real one (left
    /// padding shifts the rotary positions, which only decode() follows).
    static void check_right_padding(const char* fn, const char* context,
                                    TensorView<const bool> padding_mask, Index B, Index L);

    headwise::detail::InstanceId id_;  // names this object in its forward records
    LlamaConfig config_;
    Embedding<T> embed_tokens_;
    std::vector<LlamaDecoderLayer<T>> layers_;
    RMSNorm<T> norm_;
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

    /// From a Hugging Face model directory: config.json and model.safetensors, or the shards
    /// of model.safetensors.index.json (io::load_safetensors_checkpoint; float32, float64,
    /// bfloat16 or float16 weights, read into T). Throws std::runtime_error naming the
    /// file when one is missing or malformed or the configuration unsupported,
    /// std::invalid_argument naming the file and the entry when a weight is missing, unexpected
    /// or of the wrong shape. The sizes config.json gives (vocab_size, hidden_size,
    /// intermediate_size, num_hidden_layers) are compared with the weight file's tensors before
    /// the model is built; a disagreement throws std::invalid_argument naming config.json, the
    /// key and what the file holds, having allocated nothing of the model.
    static LlamaForCausalLM from_pretrained(const std::string& dir,
                                            Projection projection = Projection::fused);

    /// From a llama.cpp GGUF file (llama_gguf.hpp): the configuration from its metadata
    /// (LlamaConfig::from_gguf), the weights from llama.cpp's tensor names (token_embd,
    /// blk.N.attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up,
    /// ffn_down, output_norm, and output unless tied), every tensor's presence and shape
    /// checked against the configuration before the model is built. The rows of attn_q and
    /// attn_k, which llama.cpp's converter permutes within each head (rotary pairs adjacent),
    /// are put back in Hugging Face's rotate-half order. GgufWeights::stored (float models
    /// only) keeps each weight matrix in its file type: the file's blocks are used where they
    /// lie in the mapping (kept alive by the model), the in-projection's q, k and v rows are
    /// copied into blocks of the model's own (q and k reordered); an in-projection whose q, k
    /// and v have different types (llama.cpp's Q4_K_M gives some layers' attn_v Q6_K) and F32
    /// matrices are dequantized to float, as are the norms. The token embedding's table keeps
    /// its blocks too (lookups dequantize their rows; a tied output multiplies by the blocks).
    /// GgufWeights::float32 dequantizes every tensor. Throws std::runtime_error from
    /// io::load_gguf (a file that is no valid GGUF, a tensor type headwise does not read) and
    /// LlamaConfig::from_gguf, std::invalid_argument naming this function, the file and the
    /// tensor for a tensor missing, of the wrong shape or that a Llama model does not have.
    static LlamaForCausalLM from_gguf(const std::string& path,
                                      GgufWeights weights = GgufWeights::stored,
                                      Projection projection = Projection::fused);
    /// The same from a GGUF file already open (io::load_gguf or io::parse_gguf); stored
    /// weights keep a copy of `file` (its mapping) alive.
    static LlamaForCausalLM from_gguf(const io::GgufFile& file,
                                      GgufWeights weights = GgufWeights::stored,
                                      Projection projection = Projection::fused);

    /// Strict loading of a LlamaForCausalLM state dict (model.*, and lm_head.weight unless the
    /// embeddings are tied; a tied checkpoint's lm_head.weight, when present, is ignored):
    /// load_state_dict(state, "", load_rules()), its errors naming this function.
    void load_pretrained(const StateDict<T>& state);
    /// LlamaModel's rules, and a tied checkpoint's lm_head.weight skipped.
    LoadRules load_rules() const {
        LoadRules rules = LlamaModel<T>::load_rules();
        if (model_.config().tie_word_embeddings) rules.ignored.push_back("lm_head.weight");
        return rules;
    }

    /// See LlamaModel::make_cache.
    LlamaCache<T> make_cache(Index batch, Index capacity,
                             Precision cache_precision = Precision::float32) const {
        return model_.make_cache(batch, capacity, cache_precision);
    }
    /// See LlamaModel::prune_heads.
    LlamaForCausalLM& prune_heads(const HeadsToPrune& heads) {
        model_.prune_heads(heads);
        return *this;
    }
    /// input_ids [B, T] after the cache's tokens -> logits [B, T, V] (see LlamaModel::decode).
    Tensor<T> decode(TensorView<const std::int64_t> input_ids, LlamaCache<T>& cache,
                     TensorView<const bool> padding = {});
    /// The same, but the logits of the last position only: [B, 1, V] (what generation reads
    /// after a prompt: the LM head then multiplies one row per sequence instead of T). The new
    /// tokens are decoded in chunks of at most `chunk` (0: all at once), so that the
    /// temporaries (projections, attention probabilities, the feed-forward's activations) hold
    /// `chunk` tokens rather than T: SmolLM2-135M's 512-token prompt added 45 MB to the
    /// resident set at once, 28 MB in chunks of 128, for 6% more time. The chunks' results
    /// equal one decode's up to float rounding (the attention sums its keys in other blocks).
    /// Everything is checked before the first chunk changes the cache (decode's errors);
    /// std::invalid_argument for a negative chunk.
    Tensor<T> decode_last(TensorView<const std::int64_t> input_ids, LlamaCache<T>& cache,
                          TensorView<const bool> padding = {}, Index chunk = kPrefillChunk);
    /// decode_last's default chunk, in tokens.
    static constexpr Index kPrefillChunk = 128;
    /// input_ids [B, L] (or [L]) -> logits [B, L, V] (or [L, V]); padding_mask [B, L] (true =
    /// padding) or empty.
    Tensor<T> forward(TensorView<const std::int64_t> input_ids,
                      TensorView<const bool> padding_mask = {});

    /// The forward that backward differentiates: LlamaModel::forward_train (its arguments and
    /// errors), then lm_head: logits [B, L, V] (or [L, V]). In training mode (train()) the
    /// result holds what backward needs; in eval mode only the logits.
    LlamaForCausalLMForward<T> forward_train(TensorView<const std::int64_t> input_ids,
                                             TensorView<const bool> padding_mask = {},
                                             const HeadOptions<T>& heads = {},
                                             bool head_mask_grad = false);
    /// Gradients of sum(logits ⊙ grad_logits) (grad_logits: d loss / d logits, e.g.
    /// losses::cross_entropy's) for this model's forward_train that gave `fwd`: every parameter's
    /// gradient is added (with tied embeddings the table gets both the output layer's and the
    /// lookup's; until zero_grad()); returns LlamaModel::backward's gradients (the embedded
    /// tokens', the head gates' with head_mask_grad). Throws std::invalid_argument for a result
    /// of an eval-mode forward or of another model's (a copy is another model), shape_error for
    /// grad_logits of another shape than the logits, std::logic_error for weights stored in a
    /// GGUF type or released float weights (inference-only); all before anything changes.
    LlamaModelGradients<T> backward(const LlamaForCausalLMForward<T>& fwd,
                                    TensorView<const T> grad_logits);

    LlamaForCausalLM& with_projection(Projection projection) {
        model_.with_projection(projection);
        return *this;
    }
    /// with_precision (Module; LlamaForCausalLM<float>, inference): the model's layers as
    /// LlamaModel's, and lm_head's product in bf16 unless the embeddings are tied: a tied
    /// lm_head is no part of the module (not declared), the logits multiply by the embedding
    /// table as it is held: float (with_precision and with_weight_type leave tables float), or
    /// a GGUF file's blocks (from_gguf, GgufWeights::stored).
    const LlamaConfig& config() const noexcept { return model_.config(); }
    LlamaModel<T>& model() noexcept { return model_; }
    const LlamaModel<T>& model() const noexcept { return model_; }

    /// model, then lm_head unless the embeddings are tied (the module contract).
    template <class D>
    void declare(D& d) {
        d.child("model", model_);
        if (!model_.config().tie_word_embeddings) d.child("lm_head", lm_head_);
    }

private:
    Tensor<T> logits(const Tensor<T>& hidden) const;

    headwise::detail::InstanceId id_;  // names this object in its forward records
    LlamaModel<T> model_;
    Linear<T> lm_head_;  // [V, E]; [1, 1] and unused when tied
};

// ---- definitions ----------------------------------------------------------------------------

inline LlamaConfig LlamaConfig::from_json_file(const std::string& path) {
    const headwise::detail::ConfigFile file("headwise::models::LlamaConfig::from_json_file", path);
    const nlohmann::json& j = file.json();
    LlamaConfig c;
    if (const auto it = j.find("model_type"); it != j.end() && !it->is_null()) {
        if (*it != "llama" && *it != "qwen2")
            file.fail("model_type", "expected \"llama\" or \"qwen2\", got " +
                                        headwise::detail::describe_json(*it));
        c.model_type = it->get<std::string>();
    }
    const bool qwen2 = c.model_type == "qwen2";
    file.integer("vocab_size", c.vocab_size, true, 1);
    file.integer("hidden_size", c.hidden_size, true, 1);
    file.integer("intermediate_size", c.intermediate_size, true, 1);
    file.integer("num_hidden_layers", c.num_hidden_layers, true, 1);
    file.integer("num_attention_heads", c.num_attention_heads, true, 1);
    c.num_key_value_heads = c.num_attention_heads;
    file.integer("num_key_value_heads", c.num_key_value_heads, false, 1);
    file.integer("max_position_embeddings", c.max_position_embeddings, false, 1);
    // head_dim (Qwen3, Gemma, Llama configs of transformers >= 4.45): the inner width H D may
    // differ from hidden_size; without it D = hidden_size / num_attention_heads.
    file.integer("head_dim", c.head_dim, false, 1);
    if (c.head_dim == 0) {
        file.check_heads_divide(c.hidden_size, c.num_attention_heads);
        if (const Index D = c.hidden_size / c.num_attention_heads; D % 2 != 0)
            file.fail("num_attention_heads",
                      "the head dimension hidden_size / num_attention_heads = " +
                          std::to_string(c.hidden_size) + " / " +
                          std::to_string(c.num_attention_heads) + " = " + std::to_string(D) +
                          " must be even (RoPE rotates pairs of features)");
    } else if (c.head_dim % 2 != 0) {
        file.fail("head_dim", "must be even (RoPE rotates pairs of features), got " +
                                  std::to_string(c.head_dim));
    }
    if (c.num_attention_heads % c.num_key_value_heads != 0)
        file.fail("num_key_value_heads",
                  "must divide num_attention_heads = " + std::to_string(c.num_attention_heads) +
                      ", got " + std::to_string(c.num_key_value_heads));
    file.number("rms_norm_eps", c.rms_norm_eps, 0.0, false);
    file.expect_string("hidden_act", "silu");
    if (qwen2) {  // Qwen2Attention: q/k/v_proj with biases, o_proj without
        c.attention_bias = true;
        c.o_proj_bias = false;
        bool sliding = false;
        file.boolean("use_sliding_window", sliding);
        if (sliding)
            file.fail("use_sliding_window", "sliding-window attention is not supported, got true");
    } else {
        file.boolean("attention_bias", c.attention_bias);
    }
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
        const auto has = [&](const char* key) {
            const auto it = scaling->find(key);
            return it != scaling->end() && !it->is_null();
        };
        const auto required = [&](const char* key) {
            if (!has(key))
                file.fail(scaling_key, std::string(key) + " missing (rope type " + kind + ")");
        };
        RopeScaling& s = c.rope_scaling;
        const auto original_length = [&] {
            // Hugging Face's default: max_position_embeddings.
            s.original_max_position = c.max_position_embeddings;
            if (const auto it = scaling->find("original_max_position_embeddings");
                it != scaling->end() && !it->is_null()) {
                if (!it->is_number_integer() || it->get<std::int64_t>() < 1)
                    file.fail(
                        "original_max_position_embeddings",
                        "expected a positive integer, got " + headwise::detail::describe_json(*it));
                s.original_max_position = it->get<Index>();
            }
        };
        if (kind == "linear") {
            required("factor");
            file.number(*scaling, "factor", c.rope_scaling_factor, 1.0, false);
        } else if (kind == "llama3") {
            for (const char* key : {"factor", "low_freq_factor", "high_freq_factor"}) required(key);
            s.type = RopeScalingType::llama3;
            file.number(*scaling, "factor", s.factor, 1.0, false);
            file.number(*scaling, "low_freq_factor", s.low_freq_factor, 0.0, true);
            file.number(*scaling, "high_freq_factor", s.high_freq_factor, s.low_freq_factor, true);
            original_length();
        } else if (kind == "dynamic") {
            required("factor");
            s.type = RopeScalingType::dynamic;
            file.number(*scaling, "factor", s.factor, 1.0, false);
            s.original_max_position = c.max_position_embeddings;
        } else if (kind == "yarn") {
            s.type = RopeScalingType::yarn;
            original_length();
            s.factor = static_cast<double>(c.max_position_embeddings) /
                       static_cast<double>(s.original_max_position);
            file.number(*scaling, "factor", s.factor, 1.0, false);
            // attention_factor, else Hugging Face's get_mscale: 0.1 mscale ln(factor) + 1.
            const auto mscale = [&](double m) {
                return s.factor <= 1.0 ? 1.0 : 0.1 * m * std::log(s.factor) + 1.0;
            };
            double m = 0.0, m_all = 0.0;
            file.number(*scaling, "mscale", m, 0.0, false);
            file.number(*scaling, "mscale_all_dim", m_all, 0.0, false);
            s.attention_factor = m != 0.0 && m_all != 0.0 ? mscale(m) / mscale(m_all) : mscale(1.0);
            file.number(*scaling, "attention_factor", s.attention_factor, 0.0, true);
            file.number(*scaling, "beta_fast", s.beta_fast, 0.0, true);
            file.number(*scaling, "beta_slow", s.beta_slow, 0.0, true);
            if (has("truncate")) {
                if (!(*scaling)["truncate"].is_boolean())
                    file.fail("truncate",
                              "expected true or false, got " +
                                  headwise::detail::describe_json((*scaling)["truncate"]));
                s.truncate = (*scaling)["truncate"].get<bool>();
            }
        } else if (kind != "default") {
            file.fail(scaling_key,
                      "only the \"default\", \"linear\", \"llama3\", \"dynamic\" and \"yarn\" "
                      "rope types are supported, got " +
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
    o.rotary.scaling = c.rope_scaling;
    o.head_dim = c.head_dim;
    return o;
}

template <class T>
LlamaDecoderLayer<T>::LlamaDecoderLayer(const LlamaConfig& c, Projection projection,
                                        uninitialized_t)
    : input_layernorm_(c.hidden_size, c.rms_norm_eps),
      self_attn_(attention_options(c, projection), uninitialized),
      post_attention_layernorm_(c.hidden_size, c.rms_norm_eps),
      mlp_(c.hidden_size, c.intermediate_size, c.mlp_bias, uninitialized),
      o_proj_bias_(c.o_proj_bias) {
    self_attn_.eval();
}

template <class T>
std::vector<ParameterPiece> LlamaDecoderLayer<T>::attention_pieces() const {
    // The packed in_proj_weight [E + 2 Hkv D, E]: q_proj's E rows, k_proj's Hkv D, v_proj's.
    const detail::InProjLayout layout = detail::make_in_proj_layout<T>(kName, self_attn_.options());
    const bool bias = self_attn_.options().bias;
    const char* names[3] = {"self_attn.q_proj.", "self_attn.k_proj.", "self_attn.v_proj."};
    std::vector<ParameterPiece> pieces;
    for (int i : {detail::kQuery, detail::kKey, detail::kValue}) {
        pieces.push_back({std::string(names[i]) + "weight", "in_proj_weight",
                          layout.weight_offset(i), layout.weight_shape(i)});
        if (bias)
            pieces.push_back({std::string(names[i]) + "bias", "in_proj_bias", layout.bias_offset(i),
                              Shape{layout.rows(i)}});
    }
    pieces.push_back(
        {"self_attn.o_proj.weight", "out_proj.weight", 0, Shape{layout.E, layout.inner()}});
    if (bias && o_proj_bias_)
        pieces.push_back({"self_attn.o_proj.bias", "out_proj.bias", 0, Shape{layout.E}});
    return pieces;
}

template <class T>
Tensor<T> LlamaDecoderLayer<T>::forward(TensorView<const T> x, AttentionMasks<T> masks,
                                        Tensor<T>& attn_weights) {
    // x [B, L, E]
    masks.is_causal = true;
    const Tensor<T> n1 = input_layernorm_.forward(x);
    AttentionForward<T> a = self_attn_.forward(n1, n1, n1, masks);
    if (masks.need_weights) attn_weights = std::move(a.attn_weights);  // [B, H, L, L]
    Tensor<T> h = std::move(a.output);
    h.matrix() += x.matrix();                                                 // x + Attention(n1)
    Tensor<T> y = mlp_.forward(post_attention_layernorm_.forward(h)).output;  // [B, L, E]
    y.matrix() += h.matrix();                                                 // h + MLP(n2)
    return y;
}

template <class T>
Tensor<T> LlamaDecoderLayer<T>::decode(TensorView<const T> x_new, KVCache<T>& cache,
                                       TensorView<const bool> padding,
                                       TensorView<const T> head_mask) {
    // x_new [B, T, E]
    Tensor<T> h = self_attn_.decode(input_layernorm_.forward(x_new), cache, padding, head_mask);
    h.matrix() += x_new.matrix();                                             // x + Attention(n1)
    Tensor<T> y = mlp_.forward(post_attention_layernorm_.forward(h)).output;  // [B, T, E]
    y.matrix() += h.matrix();                                                 // h + MLP(n2)
    return y;
}

template <class T>
LlamaDecoderLayerForward<T> LlamaDecoderLayer<T>::forward(TensorView<const T> x,
                                                          AttentionMasks<T> masks) {
    constexpr const char* fn = "headwise::models::LlamaDecoderLayer::forward";
    const Index E = self_attn_.embed_dim();
    if ((x.rank() != 2 && x.rank() != 3) || x.shape().back() != E)
        throw shape_error(fn, "x",
                          "[B, L, " + std::to_string(E) + "] or [L, " + std::to_string(E) + "]",
                          x.shape());
    masks.is_causal = true;
    auto s = std::make_shared<LlamaDecoderLayerActivations<T>>();
    s->layer = id_.value();
    s->heads = self_attn_.num_heads();
    // 1. h = x + Attention(n1), n1 = input_layernorm(x)                    [B, L, E]
    const Tensor<T> n1 = input_layernorm_.forward(x);
    s->self_attn = self_attn_.forward(n1, n1, n1, masks);  // checks the masks first
    Tensor<T> h = std::move(s->self_attn.output);  // backward reads the attention's record only
    h.matrix() += x.matrix();
    // 2. y = h + MLP(n2), n2 = post_attention_layernorm(h)                  [B, L, E]
    s->mlp = mlp_.forward(post_attention_layernorm_.forward(h));
    LlamaDecoderLayerForward<T> f;
    f.output = std::move(s->mlp.output);  // backward reads the MLP's record only
    f.output.matrix() += h.matrix();
    if (this->is_training()) {
        s->x = Tensor<T>(x);
        s->h = std::move(h);
        f.saved = std::move(s);
    }
    return f;
}

template <class T>
void LlamaDecoderLayer<T>::check_record(const char* fn, const LlamaDecoderLayerForward<T>& fwd,
                                        const std::string& argument) const {
    if (!fwd.saved)
        throw std::invalid_argument(std::string(fn) + ": " + argument +
                                    ": comes from a forward in eval mode, which saves nothing "
                                    "for backward; call train() before forward");
    // Another layer's record holds activations of other parameters: its gradients would be
    // silently wrong, so it is refused outright.
    if (fwd.saved->layer != id_.value())
        throw std::invalid_argument(std::string(fn) + ": " + argument +
                                    ": comes from another layer's forward (a copy of a layer is "
                                    "another layer); pass a result of this layer's forward");
    if (fwd.saved->heads != self_attn_.num_heads())
        throw std::invalid_argument(
            std::string(fn) + ": " + argument + ": comes from a forward of " +
            std::to_string(fwd.saved->heads) + " heads, before prune_heads (the layer has " +
            std::to_string(self_attn_.num_heads()) + " now); run forward again");
}

template <class T>
Tensor<T> LlamaDecoderLayer<T>::backward(const LlamaDecoderLayerForward<T>& fwd,
                                         TensorView<const T> dy) {
    constexpr const char* fn = "headwise::models::LlamaDecoderLayer::backward";
    this->check_not_stored(fn);
    headwise::detail::check_float_weights(
        fn, this->float_weights_released(),
        "backward needs the float weights (the layer is inference-only)");
    check_record(fn, fwd, "fwd");
    headwise::detail::check_shape(fn, "grad_output", dy.shape(), fwd.output.shape());
    const LlamaDecoderLayerActivations<T>& s = *fwd.saved;
    // Forward's steps in reverse.
    // 2. y = h + MLP(post_attention_layernorm(h)): dh = dy (residual) + the MLP's path.
    const Tensor<T> d_n2 = mlp_.backward(s.mlp, dy);  // [B, L, E]
    Tensor<T> dh(dy);                                 // [B, L, E], residual path
    post_attention_layernorm_.backward_into(s.h, d_n2, dh);
    // 1. h = x + Attention(input_layernorm(x)): dx = dh (residual) + the attention's path, its
    // query, key and value gradients gathered (self-attention of n1).
    AttentionBackwardOptions once;
    once.combine_self = true;
    AttentionGradients<T> g = self_attn_.backward(s.self_attn, dh, once);
    Tensor<T> d_n1 = std::move(g.input);  // [B, L, E]
    if (d_n1.numel() == 0) {
        d_n1 = std::move(g.query);
        d_n1.matrix() += g.key.matrix() + g.value.matrix();
    }
    Tensor<T> dx(dh);  // [B, L, E], residual path
    input_layernorm_.backward_into(s.x, d_n1, dx);
    return dx;
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
    if (c.head_dim < 0)
        throw_invalid_argument(fn, "config.head_dim", "must be 0 or positive",
                               std::to_string(c.head_dim));
    if (c.head_dim == 0 && c.hidden_size % c.num_attention_heads != 0)
        throw_invalid_argument(fn, "config.num_attention_heads",
                               "must divide hidden_size = " + std::to_string(c.hidden_size),
                               std::to_string(c.num_attention_heads));
    if (c.num_attention_heads % c.num_key_value_heads != 0)
        throw_invalid_argument(
            fn, "config.num_key_value_heads",
            "must divide num_attention_heads = " + std::to_string(c.num_attention_heads),
            std::to_string(c.num_key_value_heads));
    // The same checks as prune_heads, on the pruned heads as a list to prune.
    detail::plan_head_pruning(std::string(fn) + ": config.pruned_heads", c.pruned_heads,
                              c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads,
                              {});
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
    for (const auto& [layer, heads] : config.pruned_heads)
        layers_[static_cast<std::size_t>(layer)].self_attn().prune_heads(heads);
    this->eval();
}

template <class T>
LlamaModel<T>& LlamaModel<T>::prune_heads(const HeadsToPrune& heads) {
    const std::string fn = std::string(kName) + "::prune_heads";
    const auto plan =
        detail::plan_head_pruning(fn, heads, config_.num_hidden_layers, config_.num_attention_heads,
                                  config_.num_key_value_heads, config_.pruned_heads);
    if (plan.empty()) return *this;
    for (const auto& [layer, now] : plan)
        layers_[static_cast<std::size_t>(layer)].self_attn().check_not_stored(fn.c_str());
    if (this->precision() != Precision::float32 || this->float_weights_released())
        throw std::logic_error(fn +
                               ": needs the float32 weights (the model computes in bf16 or has "
                               "released them); with_precision(Precision::float32) first");
    for (const auto& [layer, now] : plan)
        layers_[static_cast<std::size_t>(layer)].self_attn().prune_heads(now);
    detail::record_pruned_heads(config_.pruned_heads, heads);
    return *this;
}

template <class T>
void LlamaModel<T>::load_pretrained(const StateDict<T>& state, const std::string& prefix) {
    const std::string fn = std::string(kName) + "::load_pretrained";
    headwise::detail::check_float_weights(
        fn.c_str(), this->float_weights_released(),
        "loading writes the float weights (the model is inference-only)");
    this->load_state_dict(state, prefix, load_rules(), fn.c_str());
}

template <class T>
LlamaCache<T> LlamaModel<T>::make_cache(Index batch, Index capacity,
                                        Precision cache_precision) const {
    LlamaCache<T> cache;
    cache.layers.reserve(layers_.size());
    for (const LlamaDecoderLayer<T>& l : layers_) {
        cache.layers.push_back(l.self_attn().make_kv_cache(batch, capacity, cache_precision));
        // The layers decode one after the other: one scratch for all (KVCache's).
        if (cache.layers.size() > 1) cache.layers.back().share_decode_buffers(cache.layers[0]);
    }
    return cache;
}

template <class T>
Tensor<T> LlamaModel<T>::decode(TensorView<const std::int64_t> input_ids, LlamaCache<T>& cache,
                                TensorView<const bool> padding, TensorView<const T> head_mask) {
    check_decode(input_ids, cache, padding, head_mask);
    const bool padded = padding.data() != nullptr && padding.numel() > 0;
    Tensor<T> x = embed_tokens_.forward(input_ids);  // [B, T, E]
    for (std::size_t i = 0; i < layers_.size(); ++i) {
        const Tensor<T> gates = detail::layer_head_mask(head_mask, static_cast<Index>(i));  // [H]
        x = layers_[i].decode(x, cache.layers[i], padded ? padding : TensorView<const bool>{},
                              gates.numel() > 0 ? gates.view() : TensorView<const T>{});
    }
    return norm_.forward(x);
}

template <class T>
void LlamaModel<T>::check_decode(TensorView<const std::int64_t> input_ids,
                                 const LlamaCache<T>& cache, TensorView<const bool> padding,
                                 TensorView<const T> head_mask) const {
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
    // Each layer's cache against its attention, so that no layer appends before a later one
    // refuses (a cache made before prune_heads has the old key/value heads).
    std::vector<Index> heads_per_layer;
    for (std::size_t i = 0; i < layers_.size(); ++i) {
        const MultiheadAttention<T>& a = layers_[i].self_attn();
        const KVCache<T>& c = cache.layers[i];
        if (c.num_kv_heads() != a.num_kv_heads() || c.head_dim() != a.head_dim() ||
            c.batch() != B || c.size() != cache.size() || c.capacity() != cache.capacity())
            throw_invalid_argument(
                fn, "cache.layers[" + std::to_string(i) + "]",
                "a cache for " + std::to_string(a.num_kv_heads()) + " key/value heads of " +
                    std::to_string(a.head_dim()) + " features, " + std::to_string(B) +
                    " sequences and the other layers' size (make_cache after prune_heads)",
                std::to_string(c.num_kv_heads()) + " key/value heads, batch " +
                    std::to_string(c.batch()) + ", size " + std::to_string(c.size()));
        heads_per_layer.push_back(a.num_heads());
    }
    detail::check_model_head_mask(fn, head_mask, heads_per_layer);
    embed_tokens_.check_forward(input_ids);
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
ModelOutput<T> LlamaModel<T>::forward(TensorView<const std::int64_t> input_ids,
                                      TensorView<const bool> padding_mask,
                                      const HeadOptions<T>& heads) {
    constexpr const char* fn = "headwise::models::LlamaModel::forward";
    ModelOutput<T> out;
    if (!heads.output_attentions) {
        if (input_ids.rank() != 1 && input_ids.rank() != 2)
            throw shape_error(fn, "input_ids", "[B, L] or [L]", input_ids.shape());
        const bool batched = input_ids.rank() == 2;
        const Index B = batched ? input_ids.size(0) : 1, L = input_ids.size(-1);
        const bool padded = padding_mask.data() != nullptr && padding_mask.numel() > 0;
        if (padded)
            headwise::detail::check_shape(fn, "padding_mask", padding_mask.shape(),
                                          input_ids.shape());
        if (L == 0) throw shape_error(fn, "input_ids", "at least one token", input_ids.shape());
        LlamaCache<T> cache = make_cache(B, L);
        const Shape bl{B, L};
        out.last_hidden_state =
            decode(input_ids.reshape(bl), cache,
                   padded ? padding_mask.reshape(bl) : TensorView<const bool>{}, heads.head_mask);
        if (!batched)
            out.last_hidden_state =
                std::move(out.last_hidden_state).reshape(Shape{L, config_.hidden_size});
        return out;
    }
    if (input_ids.rank() != 1 && input_ids.rank() != 2)
        throw shape_error(fn, "input_ids", "[B, L] or [L]", input_ids.shape());
    const bool batched = input_ids.rank() == 2;
    const Index B = batched ? input_ids.size(0) : 1, L = input_ids.size(-1);
    if (L == 0) throw shape_error(fn, "input_ids", "at least one token", input_ids.shape());
    const bool padded = padding_mask.data() != nullptr && padding_mask.numel() > 0;
    if (padded)
        headwise::detail::check_shape(fn, "padding_mask", padding_mask.shape(), input_ids.shape());
    std::vector<Index> heads_per_layer;
    for (const LlamaDecoderLayer<T>& l : layers_)
        heads_per_layer.push_back(l.self_attn().num_heads());
    detail::check_model_head_mask(fn, heads.head_mask, heads_per_layer);
    AttentionMasks<T> masks;
    masks.need_weights = true;
    masks.average_attn_weights = false;  // each head's: [B, H, L, L]
    if (padded) {
        check_right_padding(fn, "with output_attentions", padding_mask, B, L);
        masks.key_padding_mask = Tensor<bool>(Shape{B, L});
        std::copy_n(padding_mask.data(), B * L, masks.key_padding_mask.data());
    }
    Tensor<T> x = embed_tokens_.forward(input_ids.reshape(Shape{B, L}));  // [B, L, E]
    out.attentions.resize(layers_.size());
    for (std::size_t i = 0; i < layers_.size(); ++i) {
        masks.head_mask = detail::layer_head_mask(heads.head_mask, static_cast<Index>(i));
        x = layers_[i].forward(x, masks, out.attentions[i]);
    }
    out.last_hidden_state = norm_.forward(x);
    if (!batched)
        out.last_hidden_state =
            std::move(out.last_hidden_state).reshape(Shape{L, config_.hidden_size});
    return out;
}

template <class T>
void LlamaModel<T>::check_right_padding(const char* fn, const char* context,
                                        TensorView<const bool> padding_mask, Index B, Index L) {
    // Positions 0..L-1 are the real tokens' positions only when no padding precedes them.
    for (Index b = 0; b < B; ++b)
        for (Index t = 1; t < L; ++t)
            if (padding_mask.data()[b * L + t - 1] && !padding_mask.data()[b * L + t])
                throw_invalid_argument(
                    fn, "padding_mask",
                    std::string("padding after each sequence's tokens only ") + context +
                        " (left padding shifts the rotary positions; use decode)",
                    "padding before token " + std::to_string(t) + " of sequence " +
                        std::to_string(b));
}

template <class T>
LlamaModelForward<T> LlamaModel<T>::forward_train(TensorView<const std::int64_t> input_ids,
                                                  TensorView<const bool> padding_mask,
                                                  const HeadOptions<T>& heads,
                                                  bool head_mask_grad) {
    constexpr const char* fn = "headwise::models::LlamaModel::forward_train";
    if (input_ids.rank() != 1 && input_ids.rank() != 2)
        throw shape_error(fn, "input_ids", "[B, L] or [L]", input_ids.shape());
    const bool batched = input_ids.rank() == 2;
    const Index B = batched ? input_ids.size(0) : 1, L = input_ids.size(-1);
    if (L == 0) throw shape_error(fn, "input_ids", "at least one token", input_ids.shape());
    const bool padded = padding_mask.data() != nullptr && padding_mask.numel() > 0;
    if (padded)
        headwise::detail::check_shape(fn, "padding_mask", padding_mask.shape(), input_ids.shape());
    if (heads.output_attentions)
        throw_invalid_argument(fn, "heads.output_attentions",
                               "false (forward returns the attention maps)", "true");
    std::vector<Index> heads_per_layer;
    for (const LlamaDecoderLayer<T>& l : layers_)
        heads_per_layer.push_back(l.self_attn().num_heads());
    headwise::detail::check_model_head_mask(fn, heads.head_mask, heads_per_layer);
    const Index N = static_cast<Index>(layers_.size()), H = heads_per_layer.front();
    if (head_mask_grad)
        for (std::size_t n = 0; n < layers_.size(); ++n)
            if (heads_per_layer[n] != H)
                throw_invalid_argument(
                    fn, "head_mask_grad",
                    "every layer with the same number of heads (layer 0 has " + std::to_string(H) +
                        " after prune_heads)",
                    "layer " + std::to_string(n) + " with " + std::to_string(heads_per_layer[n]));
    AttentionMasks<T> masks;
    if (padded) {
        check_right_padding(fn, "in forward_train", padding_mask, B, L);
        masks.key_padding_mask = Tensor<bool>(Shape{B, L});
        std::copy_n(padding_mask.data(), B * L, masks.key_padding_mask.data());
    }
    auto s = std::make_shared<LlamaModelActivations<T>>();
    s->model = id_.value();
    const Shape bl{B, L};
    Tensor<T> x = embed_tokens_.forward(input_ids.reshape(bl));  // [B, L, E], checks the ids
    const bool keep = this->is_training();
    if (keep) s->input_ids = Tensor<std::int64_t>(input_ids.reshape(bl));
    if (head_mask_grad && keep) s->head_mask_grad = Tensor<T>(Shape{N, H});
    s->layers.reserve(layers_.size());
    for (Index i = 0; i < N; ++i) {
        masks.head_mask = headwise::detail::layer_head_mask(heads.head_mask, i);  // [H] or empty
        masks.head_mask_grad = s->head_mask_grad.numel() > 0
                                   ? view(s->head_mask_grad.data() + i * H, Shape{H})
                                   : TensorView<T>{};
        const TensorView<const T> in =
            i == 0 ? x.view() : s->layers.back().output.view();  // [B, L, E]
        s->layers.push_back(layers_[static_cast<std::size_t>(i)].forward(in, masks));
    }
    LlamaModelForward<T> f;
    f.last_hidden_state = norm_.forward(s->layers.back().output);  // [B, L, E]
    if (!batched)
        f.last_hidden_state = std::move(f.last_hidden_state).reshape(Shape{L, config_.hidden_size});
    if (keep) f.saved = std::move(s);
    return f;
}

template <class T>
LlamaModelGradients<T> LlamaModel<T>::backward(const LlamaModelForward<T>& fwd,
                                               TensorView<const T> grad_output) {
    constexpr const char* fn = "headwise::models::LlamaModel::backward";
    this->check_not_stored(fn);
    headwise::detail::check_float_weights(
        fn, this->float_weights_released(),
        "backward needs the float weights (the model is inference-only)");
    headwise::detail::check_model_record(fn, fwd.saved.get(), id_.value());
    headwise::detail::check_shape(fn, "grad_output", grad_output.shape(),
                                  fwd.last_hidden_state.shape());
    const LlamaModelActivations<T>& s = *fwd.saved;
    // Each layer's record checked here, before the norm's gradient is added.
    for (std::size_t i = 0; i < layers_.size(); ++i)
        layers_[i].check_record(fn, s.layers[i], "fwd.layers[" + std::to_string(i) + "]");
    const Shape& hidden = s.layers.back().output.shape();  // [B, L, E]
    LlamaModelGradients<T> result;
    // Forward's steps in reverse: norm, the layers from the last, the embedding lookup.
    Tensor<T> d = norm_.backward(s.layers.back().output, grad_output.reshape(hidden));
    if (s.head_mask_grad.numel() > 0) s.head_mask_grad.fill(T(0));
    for (std::size_t i = layers_.size(); i-- > 0;) d = layers_[i].backward(s.layers[i], d);
    embed_tokens_.backward(s.input_ids, d);  // the rows of the ids: d embed_tokens[ids]
    result.inputs_embeds = std::move(d).reshape(fwd.last_hidden_state.shape());
    if (s.head_mask_grad.numel() > 0) result.head_mask = Tensor<T>(s.head_mask_grad);
    return result;
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
        fn.c_str(), this->float_weights_released(),
        "loading writes the float weights (the model is inference-only)");
    if (!model_.config().tie_word_embeddings && state.count("lm_head.weight") == 0)
        throw std::invalid_argument(fn +
                                    ": lm_head.weight: missing from the state dict, expected "
                                    "shape " +
                                    lm_head_.weight().shape().str() +
                                    " (tie_word_embeddings is false)");
    this->load_state_dict(state, "", load_rules(), fn.c_str());
}

template <class T>
LlamaForCausalLM<T> LlamaForCausalLM<T>::from_pretrained(const std::string& dir,
                                                         Projection projection) {
    constexpr const char* fn = "headwise::models::LlamaForCausalLM::from_pretrained";
    const std::string base = dir.empty() || dir.back() == '/' ? dir : dir + "/";
    const std::string config_path = base + "config.json";
    const LlamaConfig config = LlamaConfig::from_json_file(config_path);
    // model.safetensors, or the shards of model.safetensors.index.json.
    const io::SafetensorsCheckpoint<T> checkpoint = io::load_safetensors_checkpoint<T>(dir);
    const std::string& weights = checkpoint.source;
    const StateDict<T>& state = checkpoint.tensors;
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
    // The table in its format: float, or a GGUF file's blocks (from_gguf, stored).
    model_.embed_tokens().table().forward(hidden.matrix(), nullptr, out.matrix(), false);
    return out;
}

template <class T>
Tensor<T> LlamaForCausalLM<T>::decode(TensorView<const std::int64_t> input_ids,
                                      LlamaCache<T>& cache, TensorView<const bool> padding) {
    return logits(model_.decode(input_ids, cache, padding));
}

template <class T>
Tensor<T> LlamaForCausalLM<T>::decode_last(TensorView<const std::int64_t> input_ids,
                                           LlamaCache<T>& cache, TensorView<const bool> padding,
                                           Index chunk) {
    constexpr const char* fn = "headwise::models::LlamaForCausalLM::decode_last";
    if (chunk < 0)
        throw_invalid_argument(fn, "chunk", "expected 0 (all at once) or a positive token count",
                               std::to_string(chunk));
    Tensor<T> hidden;  // [B, T', E]: the last chunk's
    const Index Tn = input_ids.rank() == 2 ? input_ids.size(1) : 0;
    if (chunk == 0 || Tn <= chunk) {
        hidden = model_.decode(input_ids, cache, padding);
    } else {
        model_.check_decode(input_ids, cache, padding);
        const Index B = input_ids.size(0);
        const bool padded = padding.data() != nullptr && padding.numel() > 0;
        // Columns [at, at + n) of a [B, T] tensor.
        const auto columns = [&](auto view, Index at, Index n) {
            using V = typename decltype(view)::value_type;
            Tensor<V> part = Tensor<V>::uninitialized(Shape{B, n});
            for (Index b = 0; b < B; ++b)
                std::copy_n(view.data() + b * Tn + at, n, part.data() + b * n);
            return part;
        };
        for (Index at = 0; at < Tn; at += chunk) {
            const Index n = std::min(chunk, Tn - at);
            const Tensor<std::int64_t> ids = columns(input_ids, at, n);
            const Tensor<bool> pad = padded ? columns(padding, at, n) : Tensor<bool>{};
            hidden =
                model_.decode(ids.view(), cache, padded ? pad.view() : TensorView<const bool>{});
        }
    }
    const Index B = hidden.shape()[0], L = hidden.shape()[1], E = hidden.shape()[2];
    Tensor<T> last = Tensor<T>::uninitialized(Shape{B, 1, E});
    for (Index b = 0; b < B; ++b)
        std::copy_n(hidden.data() + (b * L + L - 1) * E, E, last.data() + b * E);
    return logits(last);
}

template <class T>
Tensor<T> LlamaForCausalLM<T>::forward(TensorView<const std::int64_t> input_ids,
                                       TensorView<const bool> padding_mask) {
    return logits(model_.forward(input_ids, padding_mask));
}

template <class T>
LlamaForCausalLMForward<T> LlamaForCausalLM<T>::forward_train(
    TensorView<const std::int64_t> input_ids, TensorView<const bool> padding_mask,
    const HeadOptions<T>& heads, bool head_mask_grad) {
    auto s = std::make_shared<LlamaForCausalLMActivations<T>>();
    s->model = id_.value();
    s->body = model_.forward_train(input_ids, padding_mask, heads, head_mask_grad);
    LlamaForCausalLMForward<T> f;
    f.logits = logits(s->body.last_hidden_state);  // [B, L, V]
    if (s->body.differentiable()) {
        f.saved = std::move(s);
    }
    return f;
}

template <class T>
LlamaModelGradients<T> LlamaForCausalLM<T>::backward(const LlamaForCausalLMForward<T>& fwd,
                                                     TensorView<const T> grad_logits) {
    constexpr const char* fn = "headwise::models::LlamaForCausalLM::backward";
    this->check_not_stored(fn);
    headwise::detail::check_float_weights(
        fn, this->float_weights_released(),
        "backward needs the float weights (the model is inference-only)");
    headwise::detail::check_model_record(fn, fwd.saved.get(), id_.value());
    headwise::detail::check_shape(fn, "grad_logits", grad_logits.shape(), fwd.logits.shape());
    const LlamaModelForward<T>& body = fwd.saved->body;
    for (std::size_t i = 0; i < model_.layers().size(); ++i)
        model_.layers()[i].check_record(fn, body.saved->layers[i],
                                        "fwd.layers[" + std::to_string(i) + "]");
    // logits = hidden W^T, W = lm_head.weight [V, E] or, tied, embed_tokens.weight:
    // d hidden = d logits W, dW += d logits^T hidden.
    const TensorView<const T> hidden = body.last_hidden_state.view();  // [B, L, E] ([L, E])
    Tensor<T> d_hidden;
    if (!model_.config().tie_word_embeddings) {
        d_hidden = lm_head_.backward(hidden, grad_logits);
    } else {
        Embedding<T>& table = model_.embed_tokens();
        const TensorView<const T> W = static_cast<const Embedding<T>&>(table).weight();  // [V, E]
        d_hidden = Tensor<T>(hidden.shape());
        d_hidden.matrix().noalias() = grad_logits.matrix() * W.matrix();
        table.grad_weight().matrix().noalias() +=
            grad_logits.matrix().transpose() * hidden.matrix();
    }
    return model_.backward(body, d_hidden);
}

}  // namespace headwise::models

// LlamaConfig::from_gguf and LlamaForCausalLM::from_gguf.
#include "llama_gguf.hpp"  // IWYU pragma: export
