// SPDX-License-Identifier: MIT
// BertModel<T>: the BERT encoder (embeddings, then post-norm layers) under Hugging Face's names.
#pragma once

#if !__has_include(<nlohmann/json.hpp>)
#error \
    "headwise/models/bert.hpp needs nlohmann/json (Debian: nlohmann-json3-dev), for \
config.json and safetensors files; headwise::headwise links it when CMake finds it"
#endif

#include <nlohmann/json.hpp>

#include <algorithm>  // std::copy_n, std::fill_n
#include <cstddef>    // std::size_t
#include <cstdint>    // std::int64_t, std::uint64_t
#include <fstream>    // std::ifstream
#include <map>        // std::map
#include <memory>     // std::shared_ptr, std::make_shared
#include <stdexcept>  // std::invalid_argument, std::runtime_error
#include <string>     // std::string, std::to_string
#include <utility>    // std::move
#include <vector>     // std::vector

#include "../config.hpp"
#include "../detail/compiled_templates.hpp"
#include "../detail/precision_check.hpp"
#include "../error.hpp"
#include "../io/detail/config_file.hpp"
#include "../io/safetensors.hpp"
#include "../layers/attention/multihead_attention.hpp"
#include "../layers/detail/instance_id.hpp"
#include "../layers/embedding.hpp"
#include "../layers/gelu.hpp"
#include "../layers/layer_norm.hpp"
#include "../layers/linear.hpp"
#include "../layers/module.hpp"
#include "../layers/uninitialized.hpp"
#include "../ops/activation.hpp"
#include "../precision.hpp"
#include "../random.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"
#include "detail/model_record.hpp"
#include "detail/pretrained_sizes.hpp"
#include "heads.hpp"

namespace headwise::models {

/// The keys of a Hugging Face BERT config.json that the encoder needs.
struct BertConfig {
    Index vocab_size = 30522;
    Index hidden_size = 768;              // E
    Index num_hidden_layers = 12;         // N
    Index num_attention_heads = 12;       // H
    Index intermediate_size = 3072;       // F
    Index max_position_embeddings = 512;  // longest sequence
    Index type_vocab_size = 2;            // segments (token_type_ids)
    Index pad_token_id = 0;
    double layer_norm_eps = 1e-12;
    /// hidden_act: "gelu" is the exact erf form; "gelu_new" and "gelu_pytorch_tanh" the tanh
    /// approximation.
    GeluApproximation hidden_act = GeluApproximation::none;
    /// Heads removed from the weights, {layer: [head, ...]} in the unpruned numbering (Hugging
    /// Face's config.pruned_heads): a model built from this configuration has them pruned, so a
    /// pruned model's state dict loads into BertModel(pruned.config()). BertModel::prune_heads
    /// adds to it.
    std::map<Index, std::vector<Index>> pruned_heads;

    /// Reads config.json. Throws std::runtime_error naming the file and the key that is missing,
    /// of the wrong type or out of range, or that asks for what this encoder does not do
    /// (another hidden_act, a position_embedding_type other than "absolute", a model_type other
    /// than "bert"). "pruned_heads", when present, is an object {"layer": [head, ...]}.
    static BertConfig from_json_file(const std::string& path);
};

/// What BertLayer::forward_train keeps for backward in training mode: the inputs of each step.
/// Read only by the layer; users keep it inside BertLayerForward.
template <class T>
struct BertLayerActivations {
    std::uint64_t layer = 0;   // the InstanceId of the layer that ran forward
    AttentionForward<T> attn;  // the self-attention (its own saved state)
    Tensor<T> norm1_in;        // x + Attention(x), attention.output.LayerNorm's input [B, L, E]
    Tensor<T> h;               // that LayerNorm's output, intermediate.dense's input [B, L, E]
    Tensor<T> pre;             // intermediate.dense's output, GELU's input [B, L, F]
    Tensor<T> act;             // GELU's output, output.dense's input [B, L, F]
    Tensor<T> norm2_in;        // h + FFN(h), output.LayerNorm's input [B, L, E]
};

/// What BertLayer::forward_train returns; keep it until backward (in training mode it holds the
/// intermediates backward needs; in eval mode only the output).
template <class T>
struct BertLayerForward {
    Tensor<T> output;        // [B, L, E]
    Tensor<T> attn_weights;  // as BertLayer::forward's, when masks.need_weights
    std::shared_ptr<const BertLayerActivations<T>> saved;

    bool differentiable() const noexcept { return saved != nullptr; }
};

/// One BERT layer (Devlin et al. 2019; Vaswani et al. 2017, Section 3.1), post-norm:
///   x = LayerNorm(x + Attention(x));  out = LayerNorm(x + W2 GELU(W1 x + b1) + b2)
/// with Hugging Face's parameter names (attention.self.query.weight, ...,
/// attention.output.dense, attention.output.LayerNorm, intermediate.dense, output.dense,
/// output.LayerNorm). The attention is a MultiheadAttention: BERT's separate query, key and value
/// Linears are the row blocks [0, E), [E, 2E), [2E, 3E) of its packed in_proj_weight, declared
/// under their own names, so a state dict of either layout loads with one copy and any
/// Projection computes from the same memory. forward computes the same in either mode (there is
/// no dropout: training runs as Hugging Face's model with dropout off); forward_train in
/// training mode keeps what backward needs.
template <class T>
class BertLayer : public Module<BertLayer<T>, T> {
    HEADWISE_STATIC_ASSERT_REAL(T);

public:
    static constexpr const char* kName = "headwise::models::BertLayer";

    BertLayer(const BertConfig& config, Projection projection, std::uint64_t seed);
    /// The attention and the feed-forward Linears allocated but not written and without
    /// gradient buffers until asked for (headwise::uninitialized), for a layer whose weights are
    /// loaded next.
    BertLayer(const BertConfig& config, Projection projection, uninitialized_t);

    /// x [B, L, E] -> [B, L, E]; masks.key_padding_mask [B, L] (true = padding) keeps padding
    /// out of every attention row.
    Tensor<T> forward(TensorView<const T> x, const AttentionMasks<T>& masks);
    /// The same, with masks.need_weights: the attention's weights (masks.average_attn_weights
    /// false: [B, H, L, L], each head's) moved into `attn_weights`.
    Tensor<T> forward(TensorView<const T> x, const AttentionMasks<T>& masks,
                      Tensor<T>& attn_weights);
    /// The same computation, returning a record: in training mode it keeps what backward needs
    /// (masks.head_mask_grad, when set, then collects d loss / d head_mask in backward, as
    /// MultiheadAttention's); in eval mode only the output (and the weights).
    BertLayerForward<T> forward_train(TensorView<const T> x, const AttentionMasks<T>& masks);
    /// Gradient of sum(output ⊙ dy) with respect to x [B, L, E] for the call that produced
    /// `fwd`; the parameter gradients accumulate (until zero_grad()). Throws
    /// std::invalid_argument for a record of an eval-mode forward or of another layer (a copy is
    /// another layer), shape_error for dy of another shape than the output, std::logic_error
    /// for weights released to bf16 or stored in a GGUF type; all before any gradient changes.
    Tensor<T> backward(const BertLayerForward<T>& fwd, TensorView<const T> dy);

    BertLayer& with_projection(Projection projection) {
        attention_.with_projection(projection);
        return *this;
    }
    /// with_precision (Module; float layers only): the attention's projections and the
    /// feed-forward Linears (intermediate.dense, output.dense) run their products in bf16; the
    /// LayerNorms, GELU, softmax and the residual sums stay float (see
    /// BertModel::with_precision).

    MultiheadAttention<T>& attention() noexcept { return attention_; }
    const MultiheadAttention<T>& attention() const noexcept { return attention_; }

    /// Its parameters under Hugging Face's names, in their order (the module contract): the
    /// attention's in_proj_weight and in_proj_bias cut into the query, key and value blocks,
    /// out_proj as attention.output.dense, then the LayerNorms and the feed-forward Linears.
    template <class D>
    void declare(D& d) {
        d.renamed_child(attention_, attention_pieces());
        d.child("attention.output.LayerNorm", attention_norm_);
        d.child("intermediate.dense", intermediate_);
        d.child("output.dense", output_);
        d.child("output.LayerNorm", output_norm_);
    }

private:
    static MultiheadAttentionOptions attention_options(const BertConfig& c, Projection p);
    /// The attention's parameters as BERT names them.
    std::vector<ParameterPiece> attention_pieces() const;

    Generator rng_;  // draws the linears' initial weights
    MultiheadAttention<T> attention_;
    LayerNorm<T> attention_norm_;
    Linear<T> intermediate_, output_;
    LayerNorm<T> output_norm_;
    GELU<T> act_;
    headwise::detail::InstanceId id_;  // names this object in its forward records
};

/// What BertModel::forward_train keeps for backward in training mode. Read only by the model;
/// users keep it inside BertForward.
template <class T>
struct BertActivations {
    std::uint64_t model = 0;     // the InstanceId of the model that ran forward
    Tensor<std::int64_t> ids;    // input_ids as [B, L]
    Tensor<std::int64_t> types;  // token_type_ids as [B, L]; empty: all 0
    Tensor<T> norm_in;           // the summed embeddings, embeddings.LayerNorm's input [B, L, E]
    std::vector<BertLayerForward<T>> layers;
    std::vector<Index> heads;  // each layer's head count then (prune_heads may change it)
    /// With head_mask_grad: each layer's d loss / d gate [B, H_n], which its attention's
    /// backward adds into (AttentionMasks::head_mask_grad); BertModel::backward zeroes them
    /// first and returns them. Null otherwise.
    std::shared_ptr<std::vector<Tensor<T>>> gate_grads;
};

/// What BertModel::forward_train returns: forward's outputs (ModelOutput) and, in training mode,
/// what backward needs. Keep it until backward.
template <class T>
struct BertForward : ModelOutput<T> {
    std::shared_ptr<const BertActivations<T>> saved;

    bool differentiable() const noexcept { return saved != nullptr; }
};

/// What BertModel::backward returns besides the parameter gradients, which it adds.
template <class T>
struct BertGradients {
    /// With head_mask_grad at forward_train: d loss / d xi [N, H], layer n's gate of head h
    /// (Michel et al. 2019; Hugging Face's head_mask), at the head_mask given (or at ones
    /// without one): Michel et al.'s importance of a head is the mean of its |d loss / d xi|
    /// over batches at xi = 1. For a head_mask [H] shared by every layer, the gradient of the
    /// shared gate is the sum over n. Empty without head_mask_grad, and when the layers have
    /// unequal head counts (after prune_heads; head_mask_per_example has them).
    Tensor<T> head_mask;
    /// With head_mask_grad: the same per example, one tensor per layer, [B, H_n] (B = 1 for
    /// unbatched input ids; H_n the layer's heads): example b's gate of head h (head_mask is
    /// their sum over b). The mean of |head_mask_per_example[n](b, h)| over examples is the
    /// importance with one example's loss per gradient. Empty without head_mask_grad.
    std::vector<Tensor<T>> head_mask_per_example;
    /// d loss / d inputs_embeds (word_embeddings(input_ids), Hugging Face's inputs_embeds),
    /// which is the gradient of the summed embeddings (word + position + token type,
    /// embeddings.LayerNorm's input): [B, L, E] ([L, E] for unbatched input ids).
    Tensor<T> inputs_embeds;
};

/// The BERT encoder as transformers' BertModel computes last_hidden_state:
///   x = LayerNorm(word_embeddings[ids] + position_embeddings[0..L) + token_type_embeddings[types])
///   then each of the N BertLayers.
/// Parameters under Hugging Face's names (embeddings.word_embeddings.weight, ...,
/// encoder.layer.N.attention.self.query.weight, ...). The pooler (dense + tanh on [CLS], used by
/// next-sentence prediction, not by sentence embeddings) is not part of it: load_pretrained and
/// from_pretrained ignore pooler.* entries, and the int64 embeddings.position_ids buffer (0, 1,
/// 2, ...) that older checkpoints hold (pretrained_rules()). A model is in evaluation mode from
/// the start, as transformers' from_pretrained returns it; after train(), forward_train keeps
/// what backward needs (training computes as Hugging Face's model with dropout off: there is no
/// dropout), and backward gives the parameter gradients and each head gate's.
template <class T>
class BertModel : public Module<BertModel<T>, T> {
    HEADWISE_STATIC_ASSERT_REAL(T);

public:
    static constexpr const char* kName = "headwise::models::BertModel";

    /// A model of the given configuration with the headwise modules' initial weights (not
    /// BERT's); load trained ones with load_state_dict() or use from_pretrained(). Throws
    /// std::invalid_argument for non-positive sizes or heads not dividing hidden_size.
    explicit BertModel(const BertConfig& config, Projection projection = Projection::fused,
                       std::uint64_t seed = 0);

    /// From a Hugging Face model directory: config.json and model.safetensors (float32, float64,
    /// bfloat16 or float16 weights, read into T). Keys may carry a "bert." prefix (as saved from
    /// BertFor... heads); keys of heads are ignored then. Throws std::runtime_error naming the
    /// file when one is missing or malformed, std::invalid_argument naming the entry when a
    /// weight is missing or of the wrong shape. The sizes config.json gives (vocab_size,
    /// hidden_size, max_position_embeddings, type_vocab_size, intermediate_size,
    /// num_hidden_layers) are compared with the weight file's tensors before the model is built;
    /// a disagreement throws std::invalid_argument naming config.json, the key and what the file
    /// holds, having allocated nothing of the model.
    static BertModel from_pretrained(const std::string& dir,
                                     Projection projection = Projection::fused);

    /// Loads a checkpoint's state dict: the encoder's keys, strictly (each present, each of its
    /// shape); pooler.* and embeddings.position_ids are ignored; `prefix` is removed first.
    /// load_state_dict with pretrained_rules(), its errors naming this function; throws
    /// std::logic_error when the float weights are released.
    void load_pretrained(const StateDict<T>& state, const std::string& prefix = "");
    /// What a checkpoint holds beside the encoder's parameters: the keys load_pretrained skips.
    static LoadRules pretrained_rules() {
        LoadRules rules;
        rules.ignored = {"embeddings.position_ids"};
        rules.ignored_prefixes = {"pooler."};
        return rules;
    }

    /// input_ids [B, L] (or [L]) -> last_hidden_state [B, L, E] (or [L, E]). padding_mask
    /// [B, L], true = padding, or empty for none; token_type_ids [B, L] or empty for all 0.
    /// Throws std::out_of_range for an id outside the vocabulary or the type vocabulary,
    /// shape_error for masks of another shape or L > max_position_embeddings.
    Tensor<T> forward(TensorView<const std::int64_t> input_ids,
                      TensorView<const bool> padding_mask = {},
                      TensorView<const std::int64_t> token_type_ids = {});
    /// The same, with Hugging Face's head_mask and output_attentions (HeadOptions): head_mask
    /// [N, H] or [H] gates each layer's heads; output_attentions returns each layer's per-head
    /// probabilities [B, H, L, L] (padding keys get 0). Throws shape_error for a head_mask of
    /// another shape, std::invalid_argument for one on a model whose layers have unequal head
    /// counts, before anything is computed.
    ModelOutput<T> forward(TensorView<const std::int64_t> input_ids,
                           TensorView<const bool> padding_mask,
                           TensorView<const std::int64_t> token_type_ids,
                           const HeadOptions<T>& heads);

    /// The forward that backward differentiates: forward's computation (its arguments, results
    /// and errors), returning a record. In training mode (train()) the record keeps what
    /// backward needs; with `head_mask_grad` each layer's attention is also gated per example
    /// (by heads.head_mask, or by ones) so that backward returns d loss / d gate
    /// (BertGradients::head_mask, head_mask_per_example). In eval mode the record holds the
    /// outputs only.
    BertForward<T> forward_train(TensorView<const std::int64_t> input_ids,
                                 TensorView<const bool> padding_mask = {},
                                 TensorView<const std::int64_t> token_type_ids = {},
                                 const HeadOptions<T>& heads = {}, bool head_mask_grad = false);
    /// Gradient of sum(last_hidden_state ⊙ grad_output) for the call that produced `fwd`
    /// (grad_output of last_hidden_state's shape): the parameter gradients accumulate (until
    /// zero_grad()), the embedding tables' included (the word table's row pad_token_id gets
    /// none, as torch's padding_idx; position and token type rows get the sum over the tokens
    /// that used them); returns inputs_embeds' gradient and, with head_mask_grad at
    /// forward_train, the head gates'. Backward may run several times on one record (each time
    /// adding the parameter gradients again).
    /// Throws std::invalid_argument for a record of an eval-mode forward or of another model (a
    /// copy is another model) or of a forward before prune_heads changed a layer, shape_error
    /// for grad_output of another shape, std::logic_error for weights released to bf16 or
    /// stored in a GGUF type; all before any gradient changes.
    BertGradients<T> backward(const BertForward<T>& fwd, TensorView<const T> grad_output);

    /// Removes attention heads from the weights, as Hugging Face's BertModel.prune_heads:
    /// `heads` {layer: [head, ...]}, head indices of the unpruned model (heads pruned before keep
    /// their numbers; config().pruned_heads lists them). Each layer's attention loses those
    /// heads' query, key and value rows and out_proj columns (MultiheadAttention::prune_heads);
    /// the state dict keeps its names with narrower shapes, config().pruned_heads records them
    /// (a model built from config() loads the state dict), and forward gives what the unpruned
    /// model gives with those heads' head_mask at 0. Throws std::invalid_argument naming the
    /// argument for a layer outside [0, N), a head outside [0, H), a head listed twice or
    /// pruned before, or every remaining head of a layer (a layer keeps at least one: a layer
    /// without attention is no longer a BERT layer); std::logic_error unless the weights are
    /// float32 and held; all before anything changes. An empty map changes nothing.
    BertModel& prune_heads(const HeadsToPrune& heads);

    /// A model of the given configuration whose embeddings and feed-forward Linears are
    /// allocated but not written, without gradient buffers until asked for
    /// (headwise::uninitialized); load_pretrained() fills it. from_pretrained() builds on it.
    BertModel(const BertConfig& config, Projection projection, uninitialized_t);

    /// Every layer's attention computes its projections this way from now on.
    BertModel& with_projection(Projection projection) {
        headwise::detail::check_projection("headwise::models::BertModel::with_projection",
                                           "projection", projection);
        for (BertLayer<T>& l : layers_) l.with_projection(projection);
        return *this;
    }
    /// with_precision (Module; BertModel<float> only; inference): Precision::bf16 runs every
    /// layer's attention projections and feed-forward Linears in bf16; the embeddings, the
    /// LayerNorms, GELU, softmax and the residual sums stay float. load_pretrained() in bf16
    /// takes new bf16 copies of what it loads. FloatWeights::release frees the float weight
    /// matrices (see MultiheadAttention and Linear); what needs them (parameters(),
    /// state_dict(), load_state_dict(), load_pretrained()) then throws std::logic_error.

    const BertConfig& config() const noexcept { return config_; }
    std::vector<BertLayer<T>>& layers() noexcept { return layers_; }

    /// Its parameters under Hugging Face's names, in their order (the module contract).
    template <class D>
    void declare(D& d) {
        d.child("embeddings.word_embeddings", word_embeddings_);
        d.child("embeddings.position_embeddings", position_embeddings_);
        d.child("embeddings.token_type_embeddings", token_type_embeddings_);
        d.child("embeddings.LayerNorm", embeddings_norm_);
        for (std::size_t i = 0; i < layers_.size(); ++i)
            d.child("encoder.layer." + std::to_string(i), layers_[i]);
    }

private:
    static const BertConfig& checked(const BertConfig& c);
    ModelOutput<T> run(TensorView<const std::int64_t> input_ids,
                       TensorView<const bool> padding_mask,
                       TensorView<const std::int64_t> token_type_ids, const HeadOptions<T>& heads,
                       BertActivations<T>* saved, bool gate_grads);

    BertConfig config_;
    Generator rng_;  // draws the embeddings' initial weights
    Embedding<T> word_embeddings_, position_embeddings_, token_type_embeddings_;
    LayerNorm<T> embeddings_norm_;
    std::vector<BertLayer<T>> layers_;
    headwise::detail::InstanceId id_;  // names this object in its forward records
};

// ---- definitions ----------------------------------------------------------------------------

inline BertConfig BertConfig::from_json_file(const std::string& path) {
    const headwise::detail::ConfigFile file("headwise::models::BertConfig::from_json_file", path);
    const nlohmann::json& j = file.json();
    file.expect_string("model_type", "bert");
    BertConfig c;
    file.integer("vocab_size", c.vocab_size, true, 1);
    file.integer("hidden_size", c.hidden_size, true, 1);
    file.integer("num_hidden_layers", c.num_hidden_layers, true, 1);
    file.integer("num_attention_heads", c.num_attention_heads, true, 1);
    file.integer("intermediate_size", c.intermediate_size, true, 1);
    file.integer("max_position_embeddings", c.max_position_embeddings, true, 1);
    file.integer("type_vocab_size", c.type_vocab_size, false, 1);
    file.integer("pad_token_id", c.pad_token_id, false, 0);
    file.check_heads_divide(c.hidden_size, c.num_attention_heads);
    file.number("layer_norm_eps", c.layer_norm_eps, 0.0, false);
    if (const auto it = j.find("hidden_act"); it != j.end()) {
        const std::string act = it->is_string() ? it->get<std::string>() : std::string();
        if (act == "gelu")
            c.hidden_act = GeluApproximation::none;
        else if (act == "gelu_new" || act == "gelu_pytorch_tanh")
            c.hidden_act = GeluApproximation::tanh;
        else
            file.fail("hidden_act",
                      "expected \"gelu\", \"gelu_new\" or \"gelu_pytorch_tanh\", got " +
                          headwise::detail::describe_json(*it));
    }
    file.expect_string("position_embedding_type", "absolute");
    if (const auto it = j.find("pruned_heads"); it != j.end() && !it->is_null()) {
        const auto bad = [&](const std::string& what) { file.fail("pruned_heads", what); };
        if (!it->is_object())
            bad("expected an object {\"layer\": [head, ...]}, got " +
                headwise::detail::describe_json(*it));
        for (const auto& [key, list] : it->items()) {
            Index layer = -1;
            if (!key.empty() && key.size() <= 9 &&
                key.find_first_not_of("0123456789") == std::string::npos)
                layer = static_cast<Index>(std::stoll(key));
            if (layer < 0 || layer >= c.num_hidden_layers)
                bad("expected layer keys in [0, num_hidden_layers = " +
                    std::to_string(c.num_hidden_layers) + "), got \"" + key.substr(0, 32) + "\"");
            if (!list.is_array())
                bad("expected a list of heads, got " + headwise::detail::describe_json(list));
            std::vector<Index>& heads = c.pruned_heads[layer];
            for (const auto& h : list) {
                if (!h.is_number_integer() || h.get<std::int64_t>() < 0 ||
                    h.get<std::int64_t>() >= c.num_attention_heads)
                    bad("expected heads in [0, num_attention_heads = " +
                        std::to_string(c.num_attention_heads) + "), got " +
                        headwise::detail::describe_json(h));
                heads.push_back(static_cast<Index>(h.get<std::int64_t>()));
            }
        }
    }
    return c;
}

template <class T>
MultiheadAttentionOptions BertLayer<T>::attention_options(const BertConfig& c, Projection p) {
    MultiheadAttentionOptions o;
    o.embed_dim = c.hidden_size;
    o.num_heads = c.num_attention_heads;
    o.bias = true;
    o.dropout = 0.0;
    o.projection = p;
    return o;
}

template <class T>
BertLayer<T>::BertLayer(const BertConfig& c, Projection projection, std::uint64_t seed)
    : rng_(seed),
      attention_(attention_options(c, projection), seed + 1),
      attention_norm_(c.hidden_size, c.layer_norm_eps),
      intermediate_(c.hidden_size, c.intermediate_size, true, rng_),
      output_(c.intermediate_size, c.hidden_size, true, rng_),
      output_norm_(c.hidden_size, c.layer_norm_eps),
      act_(c.hidden_act) {}

template <class T>
BertLayer<T>::BertLayer(const BertConfig& c, Projection projection, uninitialized_t)
    : rng_(0),
      attention_(attention_options(c, projection), uninitialized),
      attention_norm_(c.hidden_size, c.layer_norm_eps),
      intermediate_(c.hidden_size, c.intermediate_size, true, uninitialized),
      output_(c.intermediate_size, c.hidden_size, true, uninitialized),
      output_norm_(c.hidden_size, c.layer_norm_eps),
      act_(c.hidden_act) {}

template <class T>
std::vector<ParameterPiece> BertLayer<T>::attention_pieces() const {
    // in_proj_weight [3 HD, E]: query rows, key rows, value rows; in_proj_bias [3 HD] likewise.
    // HD = E unless heads were pruned (then out_proj.weight is [E, HD]).
    const Index E = attention_.embed_dim(), HD = attention_.inner_dim();
    const Shape matrix{HD, E}, vector{HD};
    return {{"attention.self.query.weight", "in_proj_weight", 0, matrix},
            {"attention.self.query.bias", "in_proj_bias", 0, vector},
            {"attention.self.key.weight", "in_proj_weight", HD * E, matrix},
            {"attention.self.key.bias", "in_proj_bias", HD, vector},
            {"attention.self.value.weight", "in_proj_weight", 2 * HD * E, matrix},
            {"attention.self.value.bias", "in_proj_bias", 2 * HD, vector},
            {"attention.output.dense.weight", "out_proj.weight", 0, Shape{E, HD}},
            {"attention.output.dense.bias", "out_proj.bias", 0, Shape{E}}};
}

template <class T>
Tensor<T> BertLayer<T>::forward(TensorView<const T> x, const AttentionMasks<T>& masks) {
    Tensor<T> unused;
    return forward(x, masks, unused);
}

template <class T>
Tensor<T> BertLayer<T>::forward(TensorView<const T> x, const AttentionMasks<T>& masks,
                                Tensor<T>& attn_weights) {
    // x [B, L, E]
    AttentionForward<T> a = attention_.forward(x, x, x, masks);
    if (masks.need_weights) attn_weights = std::move(a.attn_weights);  // [B, H, L, L]
    Tensor<T> h = std::move(a.output);                                 // [B, L, E]
    h.matrix() += x.matrix();                                          // x + Attention(x)
    h = attention_norm_.forward(h);                                    // [B, L, E]
    Tensor<T> f = intermediate_.forward(h);                            // [B, L, F]
    // GELU in place, [B, L, F]: no second activation of F columns
    ops::gelu_forward(f.data(), f.numel(), act_.approximate(), f.data());
    Tensor<T> y = output_.forward(f);  // [B, L, E]
    y.matrix() += h.matrix();          // h + FFN(h)
    return output_norm_.forward(y);    // [B, L, E]
}

template <class T>
BertLayerForward<T> BertLayer<T>::forward_train(TensorView<const T> x,
                                                const AttentionMasks<T>& masks) {
    BertLayerForward<T> f;
    if (!this->is_training()) {
        f.output = forward(x, masks, f.attn_weights);
        return f;
    }
    // The steps of forward(), each intermediate kept. x [B, L, E]
    auto s = std::make_shared<BertLayerActivations<T>>();
    s->layer = id_.value();
    s->attn = attention_.forward(x, x, x, masks);
    if (masks.need_weights) f.attn_weights = std::move(s->attn.attn_weights);  // [B, H, L, L]
    s->norm1_in = Tensor<T>::uninitialized(x.shape());                         // [B, L, E]
    s->norm1_in.matrix() = s->attn.output.matrix() + x.matrix();               // x + Attention(x)
    s->h = attention_norm_.forward(s->norm1_in);                               // [B, L, E]
    s->pre = intermediate_.forward(s->h);                                      // [B, L, F]
    s->act = act_.forward(s->pre);                                             // [B, L, F]
    s->norm2_in = output_.forward(s->act);                                     // [B, L, E]
    s->norm2_in.matrix() += s->h.matrix();                                     // h + FFN(h)
    f.output = output_norm_.forward(s->norm2_in);                              // [B, L, E]
    f.saved = std::move(s);
    return f;
}

template <class T>
Tensor<T> BertLayer<T>::backward(const BertLayerForward<T>& fwd, TensorView<const T> dy) {
    constexpr const char* fn = "headwise::models::BertLayer::backward";
    this->check_not_stored(fn);
    headwise::detail::check_float_weights(
        fn, this->float_weights_released(),
        "backward needs the float weights (the layer is inference-only)");
    if (!fwd.saved)
        throw std::invalid_argument(std::string(fn) +
                                    ": fwd: comes from a forward in eval mode, which saves "
                                    "nothing for backward; call train() before forward_train");
    if (fwd.saved->layer != id_.value())
        throw std::invalid_argument(std::string(fn) +
                                    ": fwd: comes from another layer's forward (a copy of a layer "
                                    "is another layer); pass a result of this layer's forward");
    headwise::detail::check_shape(fn, "grad_output", dy.shape(), fwd.output.shape());
    const BertLayerActivations<T>& s = *fwd.saved;
    // forward's steps in reverse: out = LayerNorm2(h + W2 GELU(W1 h + b1) + b2).
    Tensor<T> dh = output_norm_.backward(s.norm2_in, dy);  // d(h + FFN(h)), [B, L, E]
    const Tensor<T> d_act = output_.backward(s.act, dh);   // [B, L, F]
    const Tensor<T> d_pre = act_.backward(s.pre, d_act);   // [B, L, F]
    intermediate_.backward_into(s.h, d_pre, dh);           // dh += W1^T d_pre (residual kept)
    // h = LayerNorm1(x + Attention(x)).
    const Tensor<T> d_norm1_in = attention_norm_.backward(s.norm1_in, dh);  // [B, L, E]
    AttentionBackwardOptions self;
    self.combine_self = true;  // x was query, key and value: one gradient
    AttentionGradients<T> g = attention_.backward(s.attn, d_norm1_in, self);
    Tensor<T> dx = std::move(g.input);   // [B, L, E]
    dx.matrix() += d_norm1_in.matrix();  // the residual path
    return dx;
}

template <class T>
const BertConfig& BertModel<T>::checked(const BertConfig& c) {
    constexpr const char* fn = "headwise::models::BertModel::BertModel";
    const auto positive = [&](const char* name, Index v) {
        if (v <= 0) throw_invalid_argument(fn, name, "must be positive", std::to_string(v));
    };
    positive("config.vocab_size", c.vocab_size);
    positive("config.hidden_size", c.hidden_size);
    positive("config.num_hidden_layers", c.num_hidden_layers);
    positive("config.num_attention_heads", c.num_attention_heads);
    positive("config.intermediate_size", c.intermediate_size);
    positive("config.max_position_embeddings", c.max_position_embeddings);
    positive("config.type_vocab_size", c.type_vocab_size);
    if (c.hidden_size % c.num_attention_heads != 0)
        throw_invalid_argument(fn, "config.num_attention_heads",
                               "must divide hidden_size = " + std::to_string(c.hidden_size),
                               std::to_string(c.num_attention_heads));
    // The same checks as prune_heads, on the pruned heads as a list to prune.
    headwise::detail::plan_head_pruning(std::string(fn) + ": config.pruned_heads", c.pruned_heads,
                                        c.num_hidden_layers, c.num_attention_heads,
                                        c.num_attention_heads, {});
    return c;
}

template <class T>
BertModel<T>::BertModel(const BertConfig& config, Projection projection, std::uint64_t seed)
    : config_(checked(config)),
      rng_(seed),
      word_embeddings_(config.vocab_size, config.hidden_size, std::nullopt, rng_),
      position_embeddings_(config.max_position_embeddings, config.hidden_size, std::nullopt, rng_),
      token_type_embeddings_(config.type_vocab_size, config.hidden_size, std::nullopt, rng_),
      embeddings_norm_(config.hidden_size, config.layer_norm_eps) {
    layers_.reserve(static_cast<std::size_t>(config.num_hidden_layers));
    for (Index i = 0; i < config.num_hidden_layers; ++i)
        layers_.emplace_back(config, projection, seed + 2 * static_cast<std::uint64_t>(i) + 1);
    for (const auto& [layer, heads] : config.pruned_heads)
        layers_[static_cast<std::size_t>(layer)].attention().prune_heads(heads);
    this->eval();
}

template <class T>
BertModel<T>::BertModel(const BertConfig& config, Projection projection, uninitialized_t)
    : config_(checked(config)),
      rng_(0),
      word_embeddings_(config.vocab_size, config.hidden_size, std::nullopt, uninitialized),
      position_embeddings_(config.max_position_embeddings, config.hidden_size, std::nullopt,
                           uninitialized),
      token_type_embeddings_(config.type_vocab_size, config.hidden_size, std::nullopt,
                             uninitialized),
      embeddings_norm_(config.hidden_size, config.layer_norm_eps) {
    layers_.reserve(static_cast<std::size_t>(config.num_hidden_layers));
    for (Index i = 0; i < config.num_hidden_layers; ++i)
        layers_.emplace_back(config, projection, uninitialized);
    for (const auto& [layer, heads] : config.pruned_heads)
        layers_[static_cast<std::size_t>(layer)].attention().prune_heads(heads);
    this->eval();
}

template <class T>
void BertModel<T>::load_pretrained(const StateDict<T>& state, const std::string& prefix) {
    const std::string fn = std::string(kName) + "::load_pretrained";
    headwise::detail::check_float_weights(
        fn.c_str(), this->float_weights_released(),
        "loading writes the float weights (the model is inference-only)");
    this->load_state_dict(state, prefix, pretrained_rules(), fn.c_str());
}

template <class T>
BertModel<T> BertModel<T>::from_pretrained(const std::string& dir, Projection projection) {
    constexpr const char* fn = "headwise::models::BertModel::from_pretrained";
    const std::string base = dir.empty() || dir.back() == '/' ? dir : dir + "/";
    const std::string config_path = base + "config.json";
    const BertConfig config = BertConfig::from_json_file(config_path);
    const std::string weights = base + "model.safetensors";
    // Integer entries (the position_ids buffer) load as T; load_pretrained ignores them.
    const StateDict<T> state = io::load_safetensors<T>(weights);
    // A BertFor... checkpoint keeps the encoder under "bert.".
    const bool prefixed = state.count("embeddings.word_embeddings.weight") == 0 &&
                          state.count("bert.embeddings.word_embeddings.weight") != 0;
    const std::string prefix = prefixed ? "bert." : "";
    // The sizes that the model's allocation grows with, against the file's tensors first: a
    // config.json asking for more than the file holds fails here at once.
    const auto extents = [&](const std::string& tensor,
                             std::vector<headwise::detail::ConfigExtent> dims) {
        headwise::detail::check_config_extents(fn, config_path, weights, state, prefix + tensor,
                                               dims);
    };
    const headwise::detail::ConfigExtent E{"hidden_size", config.hidden_size};
    extents("embeddings.word_embeddings.weight", {{"vocab_size", config.vocab_size}, E});
    extents("embeddings.position_embeddings.weight",
            {{"max_position_embeddings", config.max_position_embeddings}, E});
    extents("embeddings.token_type_embeddings.weight",
            {{"type_vocab_size", config.type_vocab_size}, E});
    headwise::detail::check_config_layers(fn, config_path, weights, state,
                                          prefix + "encoder.layer.", "num_hidden_layers",
                                          config.num_hidden_layers);
    extents("encoder.layer.0.intermediate.dense.weight",
            {{"intermediate_size", config.intermediate_size}, E});
    BertModel model(config, projection, uninitialized);
    try {
        model.load_pretrained(state, prefix);
    } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(std::string(fn) + ": " + weights + ": " + e.what());
    }
    return model;
}

template <class T>
Tensor<T> BertModel<T>::forward(TensorView<const std::int64_t> input_ids,
                                TensorView<const bool> padding_mask,
                                TensorView<const std::int64_t> token_type_ids) {
    return run(input_ids, padding_mask, token_type_ids, HeadOptions<T>{}, nullptr, false)
        .last_hidden_state;
}

template <class T>
ModelOutput<T> BertModel<T>::forward(TensorView<const std::int64_t> input_ids,
                                     TensorView<const bool> padding_mask,
                                     TensorView<const std::int64_t> token_type_ids,
                                     const HeadOptions<T>& heads) {
    return run(input_ids, padding_mask, token_type_ids, heads, nullptr, false);
}

template <class T>
BertForward<T> BertModel<T>::forward_train(TensorView<const std::int64_t> input_ids,
                                           TensorView<const bool> padding_mask,
                                           TensorView<const std::int64_t> token_type_ids,
                                           const HeadOptions<T>& heads, bool head_mask_grad) {
    BertForward<T> f;
    std::shared_ptr<BertActivations<T>> s;
    if (this->is_training()) s = std::make_shared<BertActivations<T>>();
    static_cast<ModelOutput<T>&>(f) =
        run(input_ids, padding_mask, token_type_ids, heads, s.get(), head_mask_grad);
    f.saved = std::move(s);
    return f;
}

template <class T>
BertGradients<T> BertModel<T>::backward(const BertForward<T>& fwd,
                                        TensorView<const T> grad_output) {
    constexpr const char* fn = "headwise::models::BertModel::backward";
    this->check_not_stored(fn);
    headwise::detail::check_float_weights(
        fn, this->float_weights_released(),
        "backward needs the float weights (the model is inference-only)");
    headwise::detail::check_model_record(fn, fwd.saved.get(), id_.value());
    const BertActivations<T>& s = *fwd.saved;
    for (std::size_t i = 0; i < layers_.size(); ++i)
        if (layers_[i].attention().num_heads() != s.heads[i])
            throw std::invalid_argument(
                std::string(fn) + ": fwd: comes from a forward before prune_heads: layer " +
                std::to_string(i) + " had " + std::to_string(s.heads[i]) + " heads, now " +
                std::to_string(layers_[i].attention().num_heads()));
    headwise::detail::check_shape(fn, "grad_output", grad_output.shape(),
                                  fwd.last_hidden_state.shape());
    const Index B = s.ids.size(0), L = s.ids.size(1), E = config_.hidden_size;
    const Shape ble{B, L, E};
    if (s.gate_grads)
        for (Tensor<T>& g : *s.gate_grads) g.matrix().setZero();

    // The layers in reverse; each attention adds its gates' gradient into s.gate_grads.
    Tensor<T> dx = layers_.back().backward(s.layers.back(), grad_output.reshape(ble));
    for (std::size_t i = layers_.size() - 1; i-- > 0;) dx = layers_[i].backward(s.layers[i], dx);
    // x = LayerNorm(word[ids] + position[t] + token_type[types]).
    Tensor<T> d_sum = embeddings_norm_.backward(s.norm_in, dx);  // [B, L, E]
    {
        // The word table: the pad token's row takes no gradient (torch's padding_idx).
        Tensor<T> d_word = d_sum;  // [B, L, E]
        for (Index i = 0; i < B * L; ++i)
            if (s.ids.data()[i] == config_.pad_token_id)
                std::fill_n(d_word.data() + i * E, E, T(0));
        word_embeddings_.backward(s.ids, d_word);
    }
    Tensor<std::int64_t> positions(Shape{L});
    for (Index t = 0; t < L; ++t) positions.data()[t] = t;
    Tensor<T> d_pos(Shape{L, E});  // the sum over the batch
    for (Index b = 0; b < B; ++b) d_pos.matrix() += d_sum.matrix().middleRows(b * L, L);
    position_embeddings_.backward(positions, d_pos);
    if (s.types.numel() > 0) {
        token_type_embeddings_.backward(s.types, d_sum);
    } else {
        Tensor<std::int64_t> zero(Shape{1});  // every token's type 0
        Tensor<T> d_type(Shape{1, E});
        d_type.matrix() = d_sum.matrix().colwise().sum();
        token_type_embeddings_.backward(zero, d_type);
    }

    BertGradients<T> g;
    if (s.gate_grads) {
        g.head_mask_per_example = *s.gate_grads;
        const Index H = g.head_mask_per_example.front().size(1);
        bool equal = true;
        for (const Tensor<T>& d : g.head_mask_per_example) equal = equal && d.size(1) == H;
        if (equal) {
            const Index N = static_cast<Index>(layers_.size());
            g.head_mask = Tensor<T>(Shape{N, H});  // the sum over the batch
            for (Index n = 0; n < N; ++n)
                g.head_mask.matrix().row(n) =
                    g.head_mask_per_example[static_cast<std::size_t>(n)].matrix().colwise().sum();
        }
    }
    g.inputs_embeds = std::move(d_sum).reshape(fwd.last_hidden_state.shape());
    return g;
}

template <class T>
BertModel<T>& BertModel<T>::prune_heads(const HeadsToPrune& heads) {
    const std::string fn = std::string(kName) + "::prune_heads";
    const auto plan = headwise::detail::plan_head_pruning(
        fn, heads, config_.num_hidden_layers, config_.num_attention_heads,
        config_.num_attention_heads, config_.pruned_heads);
    if (plan.empty()) return *this;
    if (this->precision() != Precision::float32 || this->float_weights_released())
        throw std::logic_error(fn +
                               ": needs the float32 weights (the model computes in bf16 or has "
                               "released them); with_precision(Precision::float32) first");
    for (const auto& [layer, now] : plan)
        layers_[static_cast<std::size_t>(layer)].attention().prune_heads(now);
    headwise::detail::record_pruned_heads(config_.pruned_heads, heads);
    return *this;
}

template <class T>
ModelOutput<T> BertModel<T>::run(TensorView<const std::int64_t> input_ids,
                                 TensorView<const bool> padding_mask,
                                 TensorView<const std::int64_t> token_type_ids,
                                 const HeadOptions<T>& heads, BertActivations<T>* saved,
                                 bool gate_grads) {
    constexpr const char* fn = "headwise::models::BertModel::forward";
    const bool batched = input_ids.rank() == 2;
    if (input_ids.rank() != 1 && input_ids.rank() != 2)
        throw shape_error(fn, "input_ids", "[B, L] or [L]", input_ids.shape());
    const Index B = batched ? input_ids.size(0) : 1;
    const Index L = input_ids.size(-1);
    const Index E = config_.hidden_size;
    if (L > config_.max_position_embeddings)
        throw shape_error(fn, "input_ids",
                          "at most max_position_embeddings = " +
                              std::to_string(config_.max_position_embeddings) + " positions",
                          input_ids.shape());
    const bool padded = padding_mask.data() != nullptr && padding_mask.numel() > 0;
    if (padded)
        headwise::detail::check_shape(fn, "padding_mask", padding_mask.shape(), input_ids.shape());
    const bool typed = token_type_ids.data() != nullptr && token_type_ids.numel() > 0;
    if (typed)
        headwise::detail::check_shape(fn, "token_type_ids", token_type_ids.shape(),
                                      input_ids.shape());
    std::vector<Index> heads_per_layer;
    for (const BertLayer<T>& l : layers_) heads_per_layer.push_back(l.attention().num_heads());
    headwise::detail::check_model_head_mask(fn, heads.head_mask, heads_per_layer);

    // Embeddings (Devlin et al. 2019, Section 3.2): the sum of the token, position and segment
    // embeddings, then LayerNorm.
    const Shape bl{B, L};
    Tensor<T> x = word_embeddings_.forward(input_ids.reshape(bl));  // [B, L, E], checks the ids
    Tensor<std::int64_t> positions(Shape{L});
    for (Index t = 0; t < L; ++t) positions.data()[t] = t;
    const Tensor<T> pos = position_embeddings_.forward(positions);  // [L, E]
    Tensor<std::int64_t> zero(Shape{1});
    const Tensor<T> types =
        token_type_embeddings_.forward(typed ? token_type_ids.reshape(bl) : zero.view());
    for (Index b = 0; b < B; ++b)
        for (Index t = 0; t < L; ++t) {
            T* row = x.data() + (b * L + t) * E;                               // [E]
            const T* p = pos.data() + t * E;                                   // [E]
            const T* s = types.data() + (typed ? (b * L + t) * E : Index{0});  // [E]
            for (Index e = 0; e < E; ++e) row[e] = (row[e] + s[e]) + p[e];  // transformers' order
        }
    if (saved) {
        saved->model = id_.value();
        saved->ids = Tensor<std::int64_t>(bl);
        std::copy_n(input_ids.data(), B * L, saved->ids.data());
        if (typed) {
            saved->types = Tensor<std::int64_t>(bl);
            std::copy_n(token_type_ids.data(), B * L, saved->types.data());
        }
        saved->norm_in = x;  // [B, L, E]
    }
    x = embeddings_norm_.forward(x);

    AttentionMasks<T> masks;
    if (padded) {
        bool any = false;
        for (Index i = 0; i < padding_mask.numel(); ++i) any = any || padding_mask.data()[i];
        if (any) {
            masks.key_padding_mask = Tensor<bool>(bl);
            std::copy_n(padding_mask.data(), B * L, masks.key_padding_mask.data());
        }
    }
    // One set of attention scratch for the whole stack: each layer hands it to the next, and
    // the last back to the first for the next call (the layers run one after another).
    const std::size_t n = layers_.size();
    ModelOutput<T> out;
    masks.need_weights = heads.output_attentions;  // each head's: [B, H, L, L]
    masks.average_attn_weights = false;
    if (heads.output_attentions) out.attentions.resize(n);
    Tensor<T> unused;
    if (saved) {
        // Training. With gate_grads every layer is gated by [B, H] (the head_mask broadcast
        // over the batch, or ones), so that its backward adds each example's d loss / d gate
        // into gate_grads[i].
        if (gate_grads) {
            saved->gate_grads = std::make_shared<std::vector<Tensor<T>>>();
            saved->gate_grads->reserve(n);  // the attentions keep views of its tensors
        }
        saved->layers.reserve(n);
        saved->heads = heads_per_layer;
        for (std::size_t i = 0; i < n; ++i) {
            masks.head_mask =
                headwise::detail::layer_head_mask(heads.head_mask, static_cast<Index>(i));
            if (gate_grads) {
                const Index H = layers_[i].attention().num_heads();
                saved->gate_grads->emplace_back(Shape{B, H});
                if (masks.head_mask.numel() > 0) {
                    const Tensor<T> gates = std::move(masks.head_mask);  // [H]
                    masks.head_mask = Tensor<T>(Shape{B, H});
                    for (Index b = 0; b < B; ++b)
                        std::copy_n(gates.data(), H, masks.head_mask.data() + b * H);
                }
                masks.head_mask_grad = saved->gate_grads->back();
            }
            saved->layers.push_back(layers_[i].forward_train(x, masks));
            BertLayerForward<T>& r = saved->layers.back();
            if (heads.output_attentions) out.attentions[i] = std::move(r.attn_weights);
            x = r.output;  // [B, L, E]; the record keeps its own
        }
        if (!batched) x = std::move(x).reshape(Shape{L, E});
        out.last_hidden_state = std::move(x);
        return out;
    }
    for (std::size_t i = 0; i < n; ++i) {
        masks.head_mask = headwise::detail::layer_head_mask(heads.head_mask, static_cast<Index>(i));
        x = layers_[i].forward(x, masks, heads.output_attentions ? out.attentions[i] : unused);
        if (i + 1 < n) layers_[i + 1].attention().swap_eval_buffers(layers_[i].attention());
    }
    if (n > 1) layers_[0].attention().swap_eval_buffers(layers_[n - 1].attention());
    if (!batched) x = std::move(x).reshape(Shape{L, E});
    out.last_hidden_state = std::move(x);
    return out;
}

}  // namespace headwise::models

// Compiled once into headwise::compiled (detail/compiled_templates.hpp).
#define HEADWISE_DETAIL_BERT_TEMPLATES(C, F, T) \
    C(struct, models::BertLayerActivations<T>)  \
    C(struct, models::BertLayerForward<T>)      \
    C(class, models::BertLayer<T>)              \
    C(struct, models::BertActivations<T>)       \
    C(struct, models::BertForward<T>)           \
    C(struct, models::BertGradients<T>)         \
    C(class, models::BertModel<T>)
HEADWISE_COMPILED_TEMPLATES(HEADWISE_DETAIL_BERT_TEMPLATES);
