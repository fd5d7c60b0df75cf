// SPDX-License-Identifier: MIT
// BertModel<T>: the BERT encoder (embeddings, then post-norm layers) under Hugging Face's names.
#pragma once

#if !__has_include(<nlohmann/json.hpp>)
#error \
    "headwise/models/bert.hpp needs nlohmann/json (Debian: nlohmann-json3-dev), for \
config.json and safetensors files; headwise::headwise links it when CMake finds it"
#endif

#include <nlohmann/json.hpp>

#include <algorithm>  // std::copy_n
#include <cstddef>    // std::size_t
#include <cstdint>    // std::int64_t, std::uint64_t
#include <fstream>    // std::ifstream
#include <map>        // std::map
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

/// One BERT layer (Devlin et al. 2019; Vaswani et al. 2017, Section 3.1), post-norm:
///   x = LayerNorm(x + Attention(x));  out = LayerNorm(x + W2 GELU(W1 x + b1) + b2)
/// with Hugging Face's parameter names (attention.self.query.weight, ...,
/// attention.output.dense, attention.output.LayerNorm, intermediate.dense, output.dense,
/// output.LayerNorm). The attention is a MultiheadAttention: BERT's separate query, key and value
/// Linears are the row blocks [0, E), [E, 2E), [2E, 3E) of its packed in_proj_weight, declared
/// under their own names, so a state dict of either layout loads with one copy and any
/// Projection computes from the same memory. Inference only: forward in any mode computes the
/// same and there is no backward (the model has no dropout at inference).
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
};

/// The BERT encoder as transformers' BertModel computes last_hidden_state:
///   x = LayerNorm(word_embeddings[ids] + position_embeddings[0..L) + token_type_embeddings[types])
///   then each of the N BertLayers.
/// Parameters under Hugging Face's names (embeddings.word_embeddings.weight, ...,
/// encoder.layer.N.attention.self.query.weight, ...). The pooler (dense + tanh on [CLS], used by
/// next-sentence prediction, not by sentence embeddings) is not part of it: load_pretrained and
/// from_pretrained ignore pooler.* entries, and the int64 embeddings.position_ids buffer (0, 1,
/// 2, ...) that older checkpoints hold (pretrained_rules()). Inference only; a model is in
/// evaluation mode from the start, as transformers' from_pretrained returns it.
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
                       TensorView<const std::int64_t> token_type_ids, const HeadOptions<T>& heads);

    BertConfig config_;
    Generator rng_;  // draws the embeddings' initial weights
    Embedding<T> word_embeddings_, position_embeddings_, token_type_embeddings_;
    LayerNorm<T> embeddings_norm_;
    std::vector<BertLayer<T>> layers_;
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
    detail::plan_head_pruning(std::string(fn) + ": config.pruned_heads", c.pruned_heads,
                              c.num_hidden_layers, c.num_attention_heads, c.num_attention_heads,
                              {});
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
    return run(input_ids, padding_mask, token_type_ids, HeadOptions<T>{}).last_hidden_state;
}

template <class T>
ModelOutput<T> BertModel<T>::forward(TensorView<const std::int64_t> input_ids,
                                     TensorView<const bool> padding_mask,
                                     TensorView<const std::int64_t> token_type_ids,
                                     const HeadOptions<T>& heads) {
    return run(input_ids, padding_mask, token_type_ids, heads);
}

template <class T>
BertModel<T>& BertModel<T>::prune_heads(const HeadsToPrune& heads) {
    const std::string fn = std::string(kName) + "::prune_heads";
    const auto plan =
        detail::plan_head_pruning(fn, heads, config_.num_hidden_layers, config_.num_attention_heads,
                                  config_.num_attention_heads, config_.pruned_heads);
    if (plan.empty()) return *this;
    if (this->precision() != Precision::float32 || this->float_weights_released())
        throw std::logic_error(fn +
                               ": needs the float32 weights (the model computes in bf16 or has "
                               "released them); with_precision(Precision::float32) first");
    for (const auto& [layer, now] : plan)
        layers_[static_cast<std::size_t>(layer)].attention().prune_heads(now);
    detail::record_pruned_heads(config_.pruned_heads, heads);
    return *this;
}

template <class T>
ModelOutput<T> BertModel<T>::run(TensorView<const std::int64_t> input_ids,
                                 TensorView<const bool> padding_mask,
                                 TensorView<const std::int64_t> token_type_ids,
                                 const HeadOptions<T>& heads) {
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
    detail::check_model_head_mask(fn, heads.head_mask, heads_per_layer);

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
    for (std::size_t i = 0; i < n; ++i) {
        masks.head_mask = detail::layer_head_mask(heads.head_mask, static_cast<Index>(i));
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
    C(class, models::BertLayer<T>)              \
    C(class, models::BertModel<T>)
HEADWISE_COMPILED_TEMPLATES(HEADWISE_DETAIL_BERT_TEMPLATES);
