// SPDX-License-Identifier: MIT
// The calls a Tape records: module forwards, attention, add, reshape, concat_last, losses.
#pragma once

#include <algorithm>  // std::copy_n
#include <cstddef>    // std::size_t
#include <cstdint>    // std::int64_t
#include <memory>     // std::shared_ptr, std::make_shared
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string, std::to_string
#include <utility>    // std::move
#include <vector>     // std::vector

#include "../config.hpp"
#include "../error.hpp"
#include "../layers/attention/multihead_attention.hpp"
#include "../layers/attention/options.hpp"
#include "../layers/dropout.hpp"
#include "../layers/embedding.hpp"
#include "../layers/gelu.hpp"
#include "../layers/layer_norm.hpp"
#include "../layers/linear.hpp"
#include "../layers/relu.hpp"
#include "../layers/rms_norm.hpp"
#include "../layers/transformer_encoder_layer.hpp"
#include "../losses/cross_entropy.hpp"
#include "../losses/mse.hpp"
#include "../losses/reduction.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"
#include "../tensor_ops/concat.hpp"
#include "detail/recorded_call.hpp"
#include "tape.hpp"

namespace headwise::autograd {

// Each function runs the module's own forward, and when its tape records, saves what the
// module's own backward takes and records that backward; none computes a layer itself.

/// y = m.forward(x) for the modules whose backward takes the forward's input again: Linear,
/// LayerNorm, RMSNorm, GELU, ReLU.
template <class T>
Var<T> apply(Linear<T>& m, const Var<T>& x);
template <class T>
Var<T> apply(LayerNorm<T>& m, const Var<T>& x);
template <class T>
Var<T> apply(RMSNorm<T>& m, const Var<T>& x);
template <class T>
Var<T> apply(GELU<T>& m, const Var<T>& x);
template <class T>
Var<T> apply(ReLU<T>& m, const Var<T>& x);
/// Dropout (its mask is drawn again by backward, nothing stored).
template <class T>
Var<T> apply(Dropout<T>& m, const Var<T>& x);
/// Rows of m's table for `indices` (copied); the tape is named since no Var comes in.
template <class T>
Var<T> apply(Embedding<T>& m, Tape<T>& tape, TensorView<const std::int64_t> indices);
/// One encoder layer; on a recording tape the layer must be in training mode (in eval mode it
/// saves nothing for backward: record with a no-grad tape instead).
template <class T>
Var<T> apply(TransformerEncoderLayer<T>& m, const Var<T>& x, const AttentionMasks<T>& masks = {});
/// Self-attention m(x, x, x, masks).output; x's gradient is query + key + value. The same
/// training-mode rule as the encoder layer.
template <class T>
Var<T> apply(MultiheadAttention<T>& m, const Var<T>& x, const AttentionMasks<T>& masks = {});

/// Attention of `query` over `key` and `value` (cross-attention, or any call with distinct
/// arguments): m(query, key, value, masks).output, each argument getting its own gradient (summed
/// when one Var is passed twice). The same training-mode rule.
template <class T>
Var<T> attention(MultiheadAttention<T>& m, const Var<T>& query, const Var<T>& key,
                 const Var<T>& value, const AttentionMasks<T>& masks = {});

/// a + b (same shapes; shape_error otherwise). A Var used twice gets both gradients summed.
template <class T>
Var<T> add(const Var<T>& a, const Var<T>& b);
template <class T>
Var<T> operator+(const Var<T>& a, const Var<T>& b) {
    return add(a, b);
}
/// The same elements under `shape` (same numel; no copy).
template <class T>
Var<T> reshape(const Var<T>& x, const Shape& shape);
/// The parts joined along the last axis (headwise::concat's rules).
template <class T>
Var<T> concat_last(const std::vector<Var<T>>& parts);

/// The losses of include/headwise/losses as one-element Vars (shape []), ready for backward.
template <class T>
Var<T> cross_entropy(const Var<T>& logits, TensorView<const std::int64_t> targets,
                     const CrossEntropyOptions& options = {});
template <class T>
Var<T> mse_loss(const Var<T>& input, TensorView<const T> target,
                Reduction reduction = Reduction::mean);

// ---- definitions ----------------------------------------------------------------------------

template <class T>
Var<T> apply(Linear<T>& m, const Var<T>& x) {
    return detail::apply_on_input("headwise::autograd::apply(Linear)", m, x, true);
}
template <class T>
Var<T> apply(LayerNorm<T>& m, const Var<T>& x) {
    return detail::apply_on_input("headwise::autograd::apply(LayerNorm)", m, x, true);
}
template <class T>
Var<T> apply(RMSNorm<T>& m, const Var<T>& x) {
    return detail::apply_on_input("headwise::autograd::apply(RMSNorm)", m, x, true);
}
template <class T>
Var<T> apply(GELU<T>& m, const Var<T>& x) {
    return detail::apply_on_input("headwise::autograd::apply(GELU)", m, x, false);
}
template <class T>
Var<T> apply(ReLU<T>& m, const Var<T>& x) {
    return detail::apply_on_input("headwise::autograd::apply(ReLU)", m, x, false);
}

template <class T>
Var<T> apply(Dropout<T>& m, const Var<T>& x) {
    constexpr const char* fn = "headwise::autograd::apply(Dropout)";
    Tape<T>& tape = detail::tape_of(fn, "x", x);
    const bool rec = tape.begin_call(fn, {&x}, {"x"}, false);
    auto f = std::make_shared<DropoutForward<T>>(m.forward(x.value()));
    TensorView<const T> yv = f->output;
    if (!rec) return tape.constant(std::move(f), yv);
    // The record is kept whole (backward checks dy against its output), the Var viewing it.
    std::shared_ptr<const DropoutForward<T>> saved = f;
    return tape.record(std::move(f), yv, [&tape, &m, x, saved](TensorView<const T> dy) {
        tape.accumulate(x, m.backward(*saved, dy));
    });
}

template <class T>
Var<T> apply(Embedding<T>& m, Tape<T>& tape, TensorView<const std::int64_t> indices) {
    constexpr const char* fn = "headwise::autograd::apply(Embedding)";
    const bool rec = tape.begin_call(fn, {}, {}, true);
    auto y = std::make_shared<Tensor<T>>(m.forward(indices));
    TensorView<const T> yv = *y;
    if (!rec) return tape.constant(std::move(y), yv);
    auto ids = std::make_shared<Tensor<std::int64_t>>(indices.shape());
    std::copy_n(indices.data(), indices.numel(), ids->data());
    return tape.record(std::move(y), yv,
                       [&m, ids](TensorView<const T> dy) { m.backward(*ids, dy); });
}

template <class T>
Var<T> apply(TransformerEncoderLayer<T>& m, const Var<T>& x, const AttentionMasks<T>& masks) {
    constexpr const char* fn = "headwise::autograd::apply(TransformerEncoderLayer)";
    Tape<T>& tape = detail::tape_of(fn, "x", x);
    const bool rec = tape.begin_call(fn, {&x}, {"x"}, true);
    detail::check_training(fn, m, rec);
    auto f = std::make_shared<TransformerEncoderLayerForward<T>>(m.forward(x.value(), masks));
    TensorView<const T> yv = f->output;
    if (!rec) {
        f->saved.reset();  // a training-mode forward's activations: not needed
        return tape.constant(std::move(f), yv);
    }
    std::shared_ptr<const TransformerEncoderLayerForward<T>> saved = f;
    return tape.record(std::move(f), yv, [&tape, &m, x, saved](TensorView<const T> dy) {
        tape.accumulate(x, m.backward(*saved, dy));
    });
}

template <class T>
Var<T> apply(MultiheadAttention<T>& m, const Var<T>& x, const AttentionMasks<T>& masks) {
    constexpr const char* fn = "headwise::autograd::apply(MultiheadAttention)";
    Tape<T>& tape = detail::tape_of(fn, "x", x);
    const bool rec = tape.begin_call(fn, {&x}, {"x"}, true);
    detail::check_training(fn, m, rec);
    auto f =
        std::make_shared<AttentionForward<T>>(m.forward(x.value(), x.value(), x.value(), masks));
    TensorView<const T> yv = f->output;
    if (!rec) {
        f->saved.reset();
        return tape.constant(std::move(f), yv);
    }
    std::shared_ptr<const AttentionForward<T>> saved = f;
    return tape.record(std::move(f), yv, [&tape, &m, x, saved](TensorView<const T> dy) {
        // The encoder layer's order of the sum: query + (key + value); no sum when x is data.
        AttentionGradients<T> g = m.backward(*saved, dy);
        if (!x.recorded()) return;
        g.query.matrix() += g.key.matrix() + g.value.matrix();
        tape.accumulate(x, std::move(g.query));
    });
}

template <class T>
Var<T> attention(MultiheadAttention<T>& m, const Var<T>& query, const Var<T>& key,
                 const Var<T>& value, const AttentionMasks<T>& masks) {
    constexpr const char* fn = "headwise::autograd::attention";
    Tape<T>& tape = detail::tape_of(fn, "query", query);
    const bool rec = tape.begin_call(fn, {&query, &key, &value}, {"query", "key", "value"}, true);
    detail::check_training(fn, m, rec);
    auto f = std::make_shared<AttentionForward<T>>(
        m.forward(query.value(), key.value(), value.value(), masks));
    TensorView<const T> yv = f->output;
    if (!rec) {
        f->saved.reset();
        return tape.constant(std::move(f), yv);
    }
    std::shared_ptr<const AttentionForward<T>> saved = f;
    return tape.record(std::move(f), yv,
                       [&tape, &m, query, key, value, saved](TensorView<const T> dy) {
                           AttentionGradients<T> g = m.backward(*saved, dy);
                           tape.accumulate(query, std::move(g.query));
                           tape.accumulate(key, std::move(g.key));
                           tape.accumulate(value, std::move(g.value));
                       });
}

template <class T>
Var<T> add(const Var<T>& a, const Var<T>& b) {
    constexpr const char* fn = "headwise::autograd::add";
    Tape<T>& tape = detail::tape_of(fn, "a", a);
    if (b.shape() != a.shape()) throw shape_error(fn, "b", a.shape().str(), b.shape());
    const bool rec = tape.begin_call(fn, {&a, &b}, {"a", "b"}, false);
    auto y = std::make_shared<Tensor<T>>(Tensor<T>::uninitialized(a.shape()));
    TensorView<const T> yv = *y;
    const Index n = a.numel();
    for (Index i = 0; i < n; ++i) y->data()[i] = a.value().data()[i] + b.value().data()[i];
    if (!rec) return tape.constant(std::move(y), yv);
    return tape.record(std::move(y), yv, [&tape, a, b](TensorView<const T> dy) {
        // d(a + b) = dy for each; a Var passed as both gets 2 dy through accumulate.
        Tensor<T> da(dy.shape()), db(dy.shape());
        std::copy_n(dy.data(), dy.numel(), da.data());
        std::copy_n(dy.data(), dy.numel(), db.data());
        tape.accumulate(a, std::move(da));
        tape.accumulate(b, std::move(db));
    });
}

template <class T>
Var<T> reshape(const Var<T>& x, const Shape& shape) {
    constexpr const char* fn = "headwise::autograd::reshape";
    Tape<T>& tape = detail::tape_of(fn, "x", x);
    if (shape.numel() != x.numel())
        throw shape_error(fn, "shape", "as many elements as " + x.shape().str(), shape);
    const bool rec = tape.begin_call(fn, {&x}, {"x"}, false);
    // The same storage, viewed under the new shape; kept alive through x's owner.
    auto owner = std::make_shared<Var<T>>(x);
    TensorView<const T> yv(x.value().data(), shape);
    if (!rec) return tape.constant(std::move(owner), yv);
    const Shape from = x.shape();
    return tape.record(std::move(owner), yv, [&tape, x, from](TensorView<const T> dy) {
        Tensor<T> dx = Tensor<T>::uninitialized(from);
        std::copy_n(dy.data(), dy.numel(), dx.data());
        tape.accumulate(x, std::move(dx));
    });
}

template <class T>
Var<T> concat_last(const std::vector<Var<T>>& parts) {
    constexpr const char* fn = "headwise::autograd::concat_last";
    if (parts.empty()) throw_invalid_argument(fn, "parts", "must hold at least one Var", "0");
    Tape<T>& tape = detail::tape_of(fn, "parts[0]", parts[0]);
    std::vector<const Var<T>*> inputs;
    std::vector<std::string> name_store;
    std::vector<const char*> names;
    std::vector<TensorView<const T>> views;
    for (std::size_t i = 0; i < parts.size(); ++i) {
        inputs.push_back(&parts[i]);
        name_store.push_back("parts[" + std::to_string(i) + "]");
        views.push_back(parts[i].value());
    }
    for (const std::string& s : name_store) names.push_back(s.c_str());
    const bool rec = tape.begin_call(fn, inputs.data(), names.data(), inputs.size(), false);
    auto y = std::make_shared<Tensor<T>>(concat<T>(views, -1));  // checks the shapes
    TensorView<const T> yv = *y;
    if (!rec) return tape.constant(std::move(y), yv);
    std::vector<Index> sizes;
    for (const Var<T>& p : parts) sizes.push_back(p.shape().back());
    return tape.record(std::move(y), yv, [&tape, parts, sizes](TensorView<const T> dy) {
        std::vector<Tensor<T>> pieces = split(dy, sizes, -1);
        for (std::size_t i = 0; i < parts.size(); ++i)
            tape.accumulate(parts[i], std::move(pieces[i]));
    });
}

template <class T>
Var<T> cross_entropy(const Var<T>& logits, TensorView<const std::int64_t> targets,
                     const CrossEntropyOptions& options) {
    constexpr const char* fn = "headwise::autograd::cross_entropy";
    Tape<T>& tape = detail::tape_of(fn, "logits", logits);
    const bool rec = tape.begin_call(fn, {&logits}, {"logits"}, false);
    return detail::record_loss(tape, rec, logits,
                               headwise::cross_entropy<T>(logits.value(), targets, options));
}

template <class T>
Var<T> mse_loss(const Var<T>& input, TensorView<const T> target, Reduction reduction) {
    constexpr const char* fn = "headwise::autograd::mse_loss";
    Tape<T>& tape = detail::tape_of(fn, "input", input);
    const bool rec = tape.begin_call(fn, {&input}, {"input"}, false);
    return detail::record_loss(tape, rec, input,
                               headwise::mse_loss<T>(input.value(), target, reduction));
}

}  // namespace headwise::autograd
