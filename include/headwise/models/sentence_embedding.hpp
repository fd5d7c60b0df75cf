// SPDX-License-Identifier: MIT
// SentenceEmbedder<T>: a sentence-transformers model directory (BERT, pooling, normalisation) run
// from text to embeddings.
#pragma once

#include <algorithm>     // std::max, std::min, std::sort, std::stable_sort
#include <cmath>         // std::sqrt
#include <cstdint>       // std::int64_t
#include <filesystem>    // std::filesystem::exists, symlink_status
#include <functional>    // std::function
#include <limits>        // std::numeric_limits
#include <numeric>       // std::iota
#include <optional>      // std::optional
#include <stdexcept>     // std::runtime_error, std::invalid_argument
#include <string>        // std::string
#include <system_error>  // std::error_code
#include <utility>       // std::move
#include <vector>        // std::vector

#include "../config.hpp"
#include "../detail/compiled_templates.hpp"
#include "../error.hpp"
#include "../io/detail/json_file.hpp"
#include "../precision.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"
#include "../text/wordpiece.hpp"
#include "bert.hpp"

namespace headwise::models {

/// How token vectors become one sentence vector (sentence-transformers' Pooling modes).
enum class Pooling {
    mean,  // the mean over the tokens that are not padding
    cls,   // the first token's ([CLS])
    max,   // the elementwise maximum over the tokens that are not padding
};

/// What a sentence-transformers directory asks for after the transformer.
struct SentenceEmbeddingConfig {
    Pooling pooling = Pooling::mean;
    bool normalize = true;     // an L2 Normalize module follows the pooling
    Index max_seq_length = 0;  // ids per text, [CLS] and [SEP] included; 0: the tokenizer's

    /// Reads modules.json (a Transformer module at path "", a Pooling module whose
    /// <path>/config.json gives pooling_mode_*, an optional Normalize module),
    /// sentence_bert_config.json (max_seq_length) when present. Without modules.json: mean
    /// pooling and normalisation (all-MiniLM-L6-v2's). Throws std::runtime_error naming the file
    /// for a module type or pooling mode this does not compute (Dense, weighted mean, ...),
    /// do_lower_case true, or a malformed file.
    static SentenceEmbeddingConfig from_directory(const std::string& dir);
};

/// Pools hidden [B, L, E] over the tokens that padding [B, L] (true = padding; empty: none) does
/// not mark, as sentence-transformers' Pooling: mean = sum / max(count, 1e-9), max over the
/// kept tokens, cls = token 0. Returns [B, E].
template <class T>
Tensor<T> pool(TensorView<const T> hidden, TensorView<const bool> padding, Pooling mode);

/// Divides each row of x [B, E] by its L2 norm, or by 1e-12 when the norm is smaller, as
/// torch.nn.functional.normalize(p=2, dim=1).
template <class T>
void l2_normalize_rows(TensorView<T> x);

/// The gradient of sum(pool(hidden, padding, mode) ⊙ d_pooled) with respect to hidden [B, L, E],
/// for d_pooled [B, E] (with BertModel::forward_train and backward, the gradient of a loss over
/// sentence embeddings reaches the encoder's parameters and head gates): mean gives each kept
/// token d_pooled / max(count, 1e-9), cls token 0 d_pooled, max each feature's gradient to the
/// first kept token holding the maximum (torch's max picks one); padding tokens get 0. Throws
/// shape_error as pool, and for d_pooled of another shape than [B, E].
template <class T>
Tensor<T> pool_backward(TensorView<const T> hidden, TensorView<const bool> padding, Pooling mode,
                        TensorView<const T> d_pooled);

/// The gradient of sum(l2_normalize_rows(x) ⊙ dy) with respect to x [B, E] (x the rows before
/// normalising): (dy - y (y . dy)) / |x| with y = x / |x|, or dy / 1e-12 for a row whose norm
/// is below 1e-12 (the divisor is then a constant). Throws shape_error for x not [B, E] or dy of
/// another shape.
template <class T>
Tensor<T> l2_normalize_rows_backward(TensorView<const T> x, TensorView<const T> dy);

/// Text to sentence embeddings from a sentence-transformers model directory holding a BERT
/// (config.json, model.safetensors, vocab.txt, tokenizer_config.json, modules.json, ...):
/// tokenize (truncating to max_seq_length), run the encoder in batches, pool, normalise.
template <class T>
class SentenceEmbedder {
public:
    /// Throws std::runtime_error naming the file that is missing or malformed, and the files
    /// that disagree: max_seq_length (sentence_bert_config.json) above max_position_embeddings
    /// (config.json), more tokens in vocab.txt than config.json's vocab_size.
    static SentenceEmbedder from_directory(const std::string& dir,
                                           Projection projection = Projection::fused);

    SentenceEmbedder(text::BertTokenizer tokenizer, BertModel<T> model,
                     SentenceEmbeddingConfig config)
        : tokenizer_(std::move(tokenizer)), model_(std::move(model)), config_(config) {}

    /// The embeddings [N, E] of `texts`, in their order. Texts are run `batch_size` at a time,
    /// sorted by length so that a batch holds little padding (the result does not depend on
    /// how texts are batched beyond float rounding). `progress(done, total)`, when given, is
    /// called after each batch.
    Tensor<T> encode(const std::vector<std::string>& texts, Index batch_size = 32,
                     const std::function<void(Index, Index)>& progress = {});
    /// The pooled, normalised embeddings [B, E] of an encoded batch.
    Tensor<T> embed_batch(const text::BertBatch& batch);

    const text::BertTokenizer& tokenizer() const noexcept { return tokenizer_; }
    /// Precision::bf16 (float embedders only; inference): the encoder's products in bf16, as
    /// BertModel::with_precision; tokenising, pooling and normalising are unchanged. Throws
    /// std::invalid_argument (naming BertModel::with_precision) for bf16 on a double embedder
    /// or a value that is no Precision enumerator, changing nothing. FloatWeights::release (with
    /// bf16) frees the encoder's float weight matrices for half their bytes, as
    /// BertModel::with_precision: encode and embed_batch give the embeddings of keep bit for
    /// bit, and what needs the float weights (model().state_dict(), ...) throws
    /// std::logic_error.
    SentenceEmbedder& with_precision(Precision precision,
                                     FloatWeights float_weights = FloatWeights::keep) {
        model_.with_precision(precision, float_weights);
        return *this;
    }
    Precision precision() const noexcept { return model_.precision(); }
    /// Prepared float weights for the encoder's products (BertModel::with_prepared_weights: the
    /// weights held in the layout of the kernel that multiplies them, oneDNN's, prepared once);
    /// a no-op for double embedders and builds without oneDNN. The embeddings differ from the
    /// plain products' by float rounding only.
    SentenceEmbedder& with_prepared_weights(bool on = true) {
        model_.with_prepared_weights(on);
        return *this;
    }
    /// Whether the encoder's products read prepared weights.
    bool prepared_weights() const { return model_.prepared_weights(); }
    /// Whether the encoder's float weights are released.
    bool float_weights_released() const { return model_.float_weights_released(); }
    BertModel<T>& model() noexcept { return model_; }
    const SentenceEmbeddingConfig& config() const noexcept { return config_; }
    Index dimension() const noexcept { return model_.config().hidden_size; }

private:
    text::BertTokenizer tokenizer_;
    BertModel<T> model_;
    SentenceEmbeddingConfig config_;
};

// ---- definitions ----------------------------------------------------------------------------

inline SentenceEmbeddingConfig SentenceEmbeddingConfig::from_directory(const std::string& dir) {
    constexpr const char* fn = "headwise::models::SentenceEmbeddingConfig::from_directory";
    constexpr std::size_t kMaxModulePath = 4096;  // PATH_MAX on Linux
    const std::string base = dir.empty() || dir.back() == '/' ? dir : dir + "/";
    // Whether there is an entry at all: whatever it is, reading it then says what it is (opening
    // a FIFO to find out would wait for a writer).
    auto exists = [](const std::string& path) {
        std::error_code ec;
        return std::filesystem::exists(std::filesystem::symlink_status(path, ec));
    };
    SentenceEmbeddingConfig c;
    const std::string bert_config = base + "sentence_bert_config.json";
    if (exists(bert_config)) {
        const nlohmann::json j = headwise::detail::read_json_file(fn, bert_config);
        if (const auto it = j.find("max_seq_length"); it != j.end() && !it->is_null()) {
            if (!it->is_number_integer() || it->get<std::int64_t>() < 2)
                throw std::runtime_error(std::string(fn) + ": " + bert_config +
                                         ": max_seq_length: expected an integer >= 2, got " +
                                         headwise::detail::describe_json(*it));
            c.max_seq_length = static_cast<Index>(it->get<std::int64_t>());
        }
        if (const auto it = j.find("do_lower_case"); it != j.end() && *it == true)
            throw std::runtime_error(std::string(fn) + ": " + bert_config +
                                     ": do_lower_case: true is not supported (Python's "
                                     "str.lower() before tokenization)");
    }
    const std::string modules = base + "modules.json";
    if (!exists(modules)) return c;
    const nlohmann::json j = headwise::detail::read_json_value(fn, modules);
    if (!j.is_array())
        throw std::runtime_error(std::string(fn) + ": " + modules +
                                 ": expected a JSON array of modules, got " +
                                 headwise::detail::describe_json(j));
    bool transformer = false, pooling = false;
    c.normalize = false;
    for (const nlohmann::json& m : j) {
        if (!m.is_object() || !m.contains("type") || !m["type"].is_string())
            throw std::runtime_error(
                std::string(fn) + ": " + modules +
                ": a module without a string \"type\": " + headwise::detail::describe_json(m));
        const std::string type = m["type"].get<std::string>();
        const std::string path =
            m.contains("path") && m["path"].is_string() ? m["path"].get<std::string>() : "";
        // The path becomes part of a file name, and so of messages: bounded as a path is.
        if (path.size() > kMaxModulePath)
            throw std::runtime_error(std::string(fn) + ": " + modules + ": module path " +
                                     headwise::detail::quote_bounded(path) + ": expected at most " +
                                     std::to_string(kMaxModulePath) + " bytes");
        if (type == "sentence_transformers.models.Transformer") {
            transformer = true;
        } else if (type == "sentence_transformers.models.Pooling") {
            pooling = true;
            const std::string pool_config = base + (path.empty() ? "" : path + "/") + "config.json";
            const nlohmann::json p = headwise::detail::read_json_file(fn, pool_config);
            auto on = [&](const char* key) {
                const auto it = p.find(key);
                return it != p.end() && *it == true;
            };
            int modes = 0;
            if (on("pooling_mode_mean_tokens")) c.pooling = Pooling::mean, ++modes;
            if (on("pooling_mode_cls_token")) c.pooling = Pooling::cls, ++modes;
            if (on("pooling_mode_max_tokens")) c.pooling = Pooling::max, ++modes;
            for (const char* other : {"pooling_mode_mean_sqrt_len_tokens",
                                      "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken"})
                if (on(other))
                    throw std::runtime_error(std::string(fn) + ": " + pool_config + ": " + other +
                                             " is not supported (mean, cls and max tokens are)");
            if (const auto it = p.find("pooling_mode"); modes == 0 && it != p.end()) {
                if (*it == "mean")
                    c.pooling = Pooling::mean, ++modes;
                else if (*it == "cls")
                    c.pooling = Pooling::cls, ++modes;
                else if (*it == "max")
                    c.pooling = Pooling::max, ++modes;
            }
            if (modes != 1)
                throw std::runtime_error(std::string(fn) + ": " + pool_config +
                                         ": expected exactly one of pooling_mode_mean_tokens, "
                                         "pooling_mode_cls_token, pooling_mode_max_tokens, got " +
                                         std::to_string(modes));
        } else if (type == "sentence_transformers.models.Normalize") {
            c.normalize = true;
        } else {
            throw std::runtime_error(std::string(fn) + ": " + modules + ": module type " +
                                     headwise::detail::quote_bounded(type) +
                                     " is not supported (Transformer, Pooling, Normalize are)");
        }
    }
    if (!transformer || !pooling)
        throw std::runtime_error(std::string(fn) + ": " + modules +
                                 ": expected a Transformer and a Pooling module");
    return c;
}

template <class T>
Tensor<T> pool(TensorView<const T> hidden, TensorView<const bool> padding, Pooling mode) {
    constexpr const char* fn = "headwise::models::pool";
    if (hidden.rank() != 3) throw shape_error(fn, "hidden", "[B, L, E]", hidden.shape());
    const Index B = hidden.size(0), L = hidden.size(1), E = hidden.size(2);
    const bool padded = padding.data() != nullptr && padding.numel() > 0;
    if (padded) headwise::detail::check_shape(fn, "padding", padding.shape(), Shape{B, L});
    Tensor<T> out(Shape{B, E});  // [B, E]
    for (Index b = 0; b < B; ++b) {
        T* o = out.data() + b * E;  // [E]
        auto kept = [&](Index t) { return !padded || !padding.data()[b * L + t]; };
        if (mode == Pooling::cls) {
            std::copy_n(hidden.data() + b * L * E, E, o);
        } else if (mode == Pooling::max) {
            // sentence-transformers sets padding tokens to -1e9 before the maximum.
            std::fill_n(o, E, T(-1e9));
            for (Index t = 0; t < L; ++t) {
                const T* h = hidden.data() + (b * L + t) * E;  // [E]
                for (Index e = 0; e < E; ++e) o[e] = std::max(o[e], kept(t) ? h[e] : T(-1e9));
            }
        } else {
            // Sum in double: a sentence may hold hundreds of tokens.
            std::vector<double> sum(static_cast<std::size_t>(E), 0.0);
            double count = 0;
            for (Index t = 0; t < L; ++t) {
                if (!kept(t)) continue;
                const T* h = hidden.data() + (b * L + t) * E;  // [E]
                for (Index e = 0; e < E; ++e) sum[static_cast<std::size_t>(e)] += h[e];
                count += 1;
            }
            const double n = std::max(count, 1e-9);
            for (Index e = 0; e < E; ++e)
                o[e] = static_cast<T>(sum[static_cast<std::size_t>(e)] / n);
        }
    }
    return out;
}

template <class T>
void l2_normalize_rows(TensorView<T> x) {
    if (x.rank() != 2)
        throw shape_error("headwise::models::l2_normalize_rows", "x", "[B, E]", x.shape());
    const Index B = x.size(0), E = x.size(1);
    for (Index b = 0; b < B; ++b) {
        T* row = x.data() + b * E;  // [E]
        double sq = 0;
        for (Index e = 0; e < E; ++e) sq += static_cast<double>(row[e]) * row[e];
        const double norm = std::max(std::sqrt(sq), 1e-12);
        for (Index e = 0; e < E; ++e) row[e] = static_cast<T>(row[e] / norm);
    }
}

template <class T>
Tensor<T> pool_backward(TensorView<const T> hidden, TensorView<const bool> padding, Pooling mode,
                        TensorView<const T> d_pooled) {
    constexpr const char* fn = "headwise::models::pool_backward";
    if (hidden.rank() != 3) throw shape_error(fn, "hidden", "[B, L, E]", hidden.shape());
    const Index B = hidden.size(0), L = hidden.size(1), E = hidden.size(2);
    const bool padded = padding.data() != nullptr && padding.numel() > 0;
    if (padded) headwise::detail::check_shape(fn, "padding", padding.shape(), Shape{B, L});
    headwise::detail::check_shape(fn, "d_pooled", d_pooled.shape(), Shape{B, E});
    Tensor<T> dh(hidden.shape());  // [B, L, E], zero where no gradient goes
    for (Index b = 0; b < B; ++b) {
        const T* d = d_pooled.data() + b * E;  // [E]
        auto kept = [&](Index t) { return !padded || !padding.data()[b * L + t]; };
        if (mode == Pooling::cls) {
            std::copy_n(d, E, dh.data() + b * L * E);
        } else if (mode == Pooling::max) {
            // pool's maximum, feature by feature: the first kept token that holds it.
            for (Index e = 0; e < E; ++e) {
                Index at = -1;
                for (Index t = 0; t < L; ++t)
                    if (kept(t) && (at < 0 || hidden.data()[(b * L + t) * E + e] >
                                                  hidden.data()[(b * L + at) * E + e]))
                        at = t;
                if (at >= 0) dh.data()[(b * L + at) * E + e] = d[e];
            }
        } else {
            double count = 0;
            for (Index t = 0; t < L; ++t) count += kept(t) ? 1 : 0;
            const double n = std::max(count, 1e-9);
            for (Index t = 0; t < L; ++t) {
                if (!kept(t)) continue;
                T* row = dh.data() + (b * L + t) * E;  // [E]
                for (Index e = 0; e < E; ++e) row[e] = static_cast<T>(d[e] / n);
            }
        }
    }
    return dh;
}

template <class T>
Tensor<T> l2_normalize_rows_backward(TensorView<const T> x, TensorView<const T> dy) {
    constexpr const char* fn = "headwise::models::l2_normalize_rows_backward";
    if (x.rank() != 2) throw shape_error(fn, "x", "[B, E]", x.shape());
    headwise::detail::check_shape(fn, "dy", dy.shape(), x.shape());
    const Index B = x.size(0), E = x.size(1);
    Tensor<T> dx(x.shape());  // [B, E]
    for (Index b = 0; b < B; ++b) {
        const T* row = x.data() + b * E;  // [E]
        const T* d = dy.data() + b * E;   // [E]
        T* out = dx.data() + b * E;       // [E]
        double sq = 0;
        for (Index e = 0; e < E; ++e) sq += static_cast<double>(row[e]) * row[e];
        const double norm = std::sqrt(sq);
        if (norm < 1e-12) {  // y = x / 1e-12: a constant divisor
            for (Index e = 0; e < E; ++e) out[e] = static_cast<T>(d[e] / 1e-12);
            continue;
        }
        // y = x / |x|: dx = (dy - y (y . dy)) / |x|.
        double ydy = 0;
        for (Index e = 0; e < E; ++e) ydy += static_cast<double>(row[e]) / norm * d[e];
        for (Index e = 0; e < E; ++e) out[e] = static_cast<T>((d[e] - row[e] / norm * ydy) / norm);
    }
    return dx;
}

template <class T>
SentenceEmbedder<T> SentenceEmbedder<T>::from_directory(const std::string& dir,
                                                        Projection projection) {
    constexpr const char* fn = "headwise::models::SentenceEmbedder::from_directory";
    const std::string base = dir.empty() || dir.back() == '/' ? dir : dir + "/";
    SentenceEmbeddingConfig config = SentenceEmbeddingConfig::from_directory(dir);
    BertModel<T> model = BertModel<T>::from_pretrained(dir, projection);
    // The files must agree with one another here, not at the first text long enough or holding
    // a word rare enough to find out (the encoder's error then names no file).
    const BertConfig& bert = model.config();
    if (config.max_seq_length > bert.max_position_embeddings)
        throw std::runtime_error(std::string(fn) + ": " + base +
                                 "sentence_bert_config.json: max_seq_length is " +
                                 std::to_string(config.max_seq_length) + ", but " + base +
                                 "config.json: max_position_embeddings is " +
                                 std::to_string(bert.max_position_embeddings));
    // sentence-transformers: max_seq_length from its config, else the smaller of the tokenizer's
    // and the model's limits.
    std::optional<Index> max_length;
    if (config.max_seq_length > 0) max_length = config.max_seq_length;
    text::BertTokenizer tokenizer = text::BertTokenizer::from_directory(dir, max_length);
    if (tokenizer.vocab_size() > bert.vocab_size)
        throw std::runtime_error(std::string(fn) + ": " + base + "vocab.txt: holds " +
                                 std::to_string(tokenizer.vocab_size()) + " tokens, but " + base +
                                 "config.json: vocab_size is " + std::to_string(bert.vocab_size) +
                                 " (every token id must be below it)");
    if (!max_length) {
        const Index limit = std::min(tokenizer.options().max_length, bert.max_position_embeddings);
        text::BertTokenizerOptions o = tokenizer.options();
        o.max_length = limit;
        tokenizer = text::BertTokenizer(text::read_vocab(base + "vocab.txt"), o);
    }
    config.max_seq_length = tokenizer.options().max_length;
    return SentenceEmbedder(std::move(tokenizer), std::move(model), config);
}

template <class T>
Tensor<T> SentenceEmbedder<T>::embed_batch(const text::BertBatch& batch) {
    const Tensor<T> hidden = model_.forward(batch.input_ids, batch.padding_mask);  // [B, L, E]
    Tensor<T> pooled = pool<T>(hidden, batch.padding_mask, config_.pooling);       // [B, E]
    if (config_.normalize) l2_normalize_rows<T>(pooled);
    return pooled;
}

template <class T>
Tensor<T> SentenceEmbedder<T>::encode(const std::vector<std::string>& texts, Index batch_size,
                                      const std::function<void(Index, Index)>& progress) {
    if (batch_size < 1)
        throw_invalid_argument("headwise::models::SentenceEmbedder::encode", "batch_size",
                               "must be positive", std::to_string(batch_size));
    const Index N = static_cast<Index>(texts.size()), E = dimension();
    std::vector<std::vector<std::int64_t>> ids(texts.size());
    for (std::size_t i = 0; i < texts.size(); ++i) ids[i] = tokenizer_.encode(texts[i]);
    // Longest first, as sentence-transformers orders a batch run.
    std::vector<std::size_t> order(texts.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return ids[a].size() > ids[b].size(); });
    Tensor<T> out(Shape{N, E});  // [N, E]
    for (Index first = 0; first < N; first += batch_size) {
        const Index count = std::min(batch_size, N - first);
        Index L = 0;
        for (Index i = 0; i < count; ++i)
            L = std::max<Index>(
                L, static_cast<Index>(ids[order[static_cast<std::size_t>(first + i)]].size()));
        text::BertBatch batch;
        batch.input_ids = Tensor<std::int64_t>(Shape{count, L});
        batch.padding_mask = Tensor<bool>(Shape{count, L});
        for (Index i = 0; i < count; ++i) {
            const std::vector<std::int64_t>& row = ids[order[static_cast<std::size_t>(first + i)]];
            for (Index t = 0; t < L; ++t) {
                const bool pad = t >= static_cast<Index>(row.size());
                batch.input_ids.data()[i * L + t] =
                    pad ? tokenizer_.pad_id() : row[static_cast<std::size_t>(t)];
                batch.padding_mask.data()[i * L + t] = pad;
            }
            batch.lengths.push_back(static_cast<Index>(row.size()));
        }
        const Tensor<T> e = embed_batch(batch);  // [count, E]
        for (Index i = 0; i < count; ++i)
            std::copy_n(
                e.data() + i * E, E,
                out.data() + static_cast<Index>(order[static_cast<std::size_t>(first + i)]) * E);
        if (progress) progress(first + count, N);
    }
    return out;
}

}  // namespace headwise::models

// Compiled once into headwise::compiled (detail/compiled_templates.hpp).
#define HEADWISE_DETAIL_SENTENCE_EMBEDDING_TEMPLATES(C, F, T) C(class, models::SentenceEmbedder<T>)
HEADWISE_COMPILED_TEMPLATES(HEADWISE_DETAIL_SENTENCE_EMBEDDING_TEMPLATES);
