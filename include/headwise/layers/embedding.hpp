// SPDX-License-Identifier: MIT
// Embedding<T>: torch.nn.Embedding (a learnt lookup table) with padding_idx, forward and backward.
#pragma once

#include <algorithm>    // std::copy_n, std::fill_n
#include <cstdint>      // std::int64_t
#include <optional>     // std::optional
#include <stdexcept>    // std::out_of_range
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::conditional_t, std::is_const_v
#include <utility>      // std::move
#include <vector>       // std::vector

#include "../config.hpp"
#include "../detail/compiled_templates.hpp"
#include "../detail/precision_check.hpp"
#include "../error.hpp"
#include "../init.hpp"
#include "../random.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"
#include "module.hpp"
#include "uninitialized.hpp"
#include "weight_matrix.hpp"

namespace headwise {

/// A lookup table as torch.nn.Embedding(num_embeddings, embedding_dim, padding_idx): indices
/// [...] (std::int64_t) -> rows of weight [num_embeddings, embedding_dim], output
/// [..., embedding_dim]. Initialised N(0, 1) with the padding row zero; the padding row gets no
/// gradient (it stays what it is). A negative padding_idx counts from the end, as in torch.
/// Parameter name: "weight". The table is a WeightMatrix marked as a table (is_table()): the
/// precision and weight-type switches leave it float; a model loaded from a GGUF file may keep
/// it in the file's type (take_stored: lookups then dequantize their rows, exactly, and the
/// table is inference-only), and a model whose output layer is tied to it multiplies by
/// table() in its format.
template <class T>
class Embedding : public Module<Embedding<T>, T> {
    HEADWISE_STATIC_ASSERT_REAL(T);

public:
    static constexpr const char* kName = "headwise::Embedding";

    /// Throws std::invalid_argument unless both sizes are positive and padding_idx (if given)
    /// lies in [-num_embeddings, num_embeddings).
    template <class Rng>
    Embedding(Index num_embeddings, Index embedding_dim, std::optional<Index> padding_idx,
              Rng& rng);
    /// The same shape with the table unwritten (load it before use; the padding row is not
    /// zeroed either) and the gradient allocated on first use (see headwise::uninitialized):
    /// for a model that loads its weights from a checkpoint.
    Embedding(Index num_embeddings, Index embedding_dim, std::optional<Index> padding_idx,
              uninitialized_t);

    /// out[..., :] = weight[indices[...], :]. Throws std::out_of_range naming the position of an
    /// index outside [0, num_embeddings), before writing anything; shape_error for indices of
    /// rank Shape::kMaxRank (the output has one axis more).
    Tensor<T> forward(TensorView<const std::int64_t> indices) const;
    /// The checks forward makes, with its messages, without looking anything up (a caller that
    /// looks the indices up in parts checks them all first).
    void check_forward(TensorView<const std::int64_t> indices) const {
        constexpr const char* fn = "headwise::Embedding::forward";
        static_cast<void>(output_shape(fn, indices.shape(), embedding_dim()));
        check_indices(fn, indices);
    }
    /// ADDS dy[..., :] into row indices[...] of the weight gradient (padding rows skipped).
    void backward(TensorView<const std::int64_t> indices, TensorView<const T> dy);

    Index num_embeddings() const noexcept { return table_.shape()[0]; }
    Index embedding_dim() const noexcept { return table_.shape()[1]; }
    std::optional<Index> padding_idx() const noexcept { return padding_idx_; }
    /// The float table. weight(), grad_weight() and take_weight() throw std::logic_error naming
    /// themselves when the table is stored in a file's type with its float values freed.
    TensorView<T> weight() {
        check_float("headwise::Embedding::weight");
        return table_.value().view();
    }
    TensorView<const T> weight() const {
        check_float("headwise::Embedding::weight");
        return table_.value().view();
    }
    /// The table's holder, in whatever format it is (float, or a file's type): what a tied
    /// output layer multiplies by (WeightMatrix::forward).
    const WeightMatrix<T>& table() const noexcept { return table_; }
    /// Replaces the weight by `w`, moved in without a copy (for a loader that owns the
    /// checkpoint's tensors). Throws shape_error naming the function and the argument, before
    /// any change, unless `w` has the weight's shape. Views of the old weight no longer refer
    /// to the layer's.
    void take_weight(Tensor<T>&& w) {
        check_float("headwise::Embedding::take_weight");
        detail::check_shape("headwise::Embedding::take_weight", "weight", w.shape(),
                            table_.shape());
        table_.replace(std::move(w));
    }
    /// The weight's gradient; on an embedding constructed uninitialized, the first call that
    /// needs it (this, parameters(), backward) allocates it, which is not safe concurrently
    /// with another such first call.
    TensorView<T> grad_weight() {
        check_float("headwise::Embedding::grad_weight");
        return table_.grad().view();
    }
    TensorView<const T> grad_weight() const {
        check_float("headwise::Embedding::grad_weight");
        return const_cast<WeightMatrix<T>&>(table_).grad().view();
    }
    /// Whether the gradient buffer exists (always, unless constructed uninitialized and not yet
    /// asked for it).
    bool has_grad_buffers() const noexcept { return table_.has_grad(); }

    /// "weight" [num_embeddings, embedding_dim] (the module contract).
    template <class D>
    void declare(D& d) {
        d.parameter("weight", table_);
    }

private:
    static Shape checked_shape(Index num_embeddings, Index embedding_dim) {
        constexpr const char* fn = "headwise::Embedding::Embedding";
        if (num_embeddings <= 0)
            throw_invalid_argument(fn, "num_embeddings", "must be positive",
                                   std::to_string(num_embeddings));
        if (embedding_dim <= 0)
            throw_invalid_argument(fn, "embedding_dim", "must be positive",
                                   std::to_string(embedding_dim));
        return Shape{num_embeddings, embedding_dim};
    }

    /// padding_idx checked against num_embeddings and made non-negative, as torch does.
    static std::optional<Index> checked_padding_idx(Index num_embeddings,
                                                    std::optional<Index> padding_idx) {
        if (!padding_idx) return std::nullopt;
        const Index p = *padding_idx;
        if (p < -num_embeddings || p >= num_embeddings)
            throw_invalid_argument("headwise::Embedding::Embedding", "padding_idx",
                                   "must be in [-" + std::to_string(num_embeddings) + ", " +
                                       std::to_string(num_embeddings) + ")",
                                   std::to_string(p));
        return p < 0 ? p + num_embeddings : p;
    }

    /// The output shape [..., E] of indices [...]; throws shape_error naming `fn` when the indices
    /// have the largest rank, so that the output would have one axis too many.
    static Shape output_shape(const char* fn, const Shape& indices, Index E) {
        constexpr int max_rank = Shape::kMaxRank - 1;
        if (indices.rank() > max_rank)
            throw shape_error(
                fn, "indices",
                "of rank at most " + std::to_string(max_rank) +
                    " (the output adds the embedding axis, and a tensor has at most " +
                    std::to_string(Shape::kMaxRank) + ")",
                indices);
        std::vector<Index> dims = indices.to_vector();
        dims.push_back(E);
        return Shape(dims);
    }
    void check_indices(const char* fn, TensorView<const std::int64_t> indices) const;
    /// Throws std::logic_error naming `function` when the float table is freed (stored).
    void check_float(const char* function) const {
        detail::check_float_weights(function, table_.released(),
                                    "this call needs the float table (it is stored in a GGUF "
                                    "type: inference only)");
    }
    static WeightMatrix<T> as_table(WeightMatrix<T>&& w) {
        w.set_table(true);
        return std::move(w);
    }

    std::optional<Index> padding_idx_;  // normalised to [0, num_embeddings)
    // [num_embeddings, embedding_dim], its gradient (allocated on first use for an embedding
    // constructed uninitialized) and its format.
    WeightMatrix<T> table_;
};

// ---- definitions ----------------------------------------------------------------------------

template <class T>
template <class Rng>
Embedding<T>::Embedding(Index num_embeddings, Index embedding_dim, std::optional<Index> padding_idx,
                        Rng& rng)
    : table_(as_table(WeightMatrix<T>(checked_shape(num_embeddings, embedding_dim)))) {
    padding_idx_ = checked_padding_idx(num_embeddings, padding_idx);
    Tensor<T>& w = table_.value();
    for (Index i = 0; i < w.numel(); ++i) w.data()[i] = static_cast<T>(normal(rng));
    if (padding_idx_) std::fill_n(w.data() + *padding_idx_ * embedding_dim, embedding_dim, T(0));
}

template <class T>
Embedding<T>::Embedding(Index num_embeddings, Index embedding_dim, std::optional<Index> padding_idx,
                        uninitialized_t)
    : table_(
          as_table(WeightMatrix<T>::uninitialized(checked_shape(num_embeddings, embedding_dim)))) {
    padding_idx_ = checked_padding_idx(num_embeddings, padding_idx);
}

template <class T>
void Embedding<T>::check_indices(const char* fn, TensorView<const std::int64_t> indices) const {
    const Index n = num_embeddings();
    for (Index i = 0; i < indices.numel(); ++i) {
        const std::int64_t v = indices[i];
        if (v < 0 || v >= n)
            throw std::out_of_range(std::string(fn) + ": indices: entry " + std::to_string(i) +
                                    " (flat) is " + std::to_string(v) +
                                    ", expected an index in [0, " + std::to_string(n) + ")");
    }
}

template <class T>
Tensor<T> Embedding<T>::forward(TensorView<const std::int64_t> indices) const {
    constexpr const char* fn = "headwise::Embedding::forward";
    const Index E = embedding_dim();
    check_forward(indices);
    const Shape s = output_shape(fn, indices.shape(), E);
    Tensor<T> out = Tensor<T>::uninitialized(s);  // [..., E]
    for (Index i = 0; i < indices.numel(); ++i)
        table_.row(static_cast<Index>(indices[i]), out.data() + i * E);
    return out;
}

template <class T>
void Embedding<T>::backward(TensorView<const std::int64_t> indices, TensorView<const T> dy) {
    constexpr const char* fn = "headwise::Embedding::backward";
    const Index E = embedding_dim();
    const Shape s = output_shape(fn, indices.shape(), E);
    detail::check_shape(fn, "grad_output", dy.shape(), s);
    table_.check_trainable(fn);
    check_float(fn);
    check_indices(fn, indices);
    Tensor<T>& grad = table_.grad();
    for (Index i = 0; i < indices.numel(); ++i) {
        const Index row = static_cast<Index>(indices[i]);
        if (padding_idx_ && row == *padding_idx_) continue;
        T* g = grad.data() + row * E;    // [E]
        const T* d = dy.data() + i * E;  // [E]
        for (Index e = 0; e < E; ++e) g[e] += d[e];
    }
}

}  // namespace headwise

// Compiled once into headwise::compiled (detail/compiled_templates.hpp).
#define HEADWISE_DETAIL_EMBEDDING_TEMPLATES(C, F, T) C(class, Embedding<T>)
HEADWISE_COMPILED_TEMPLATES(HEADWISE_DETAIL_EMBEDDING_TEMPLATES);
