// SPDX-License-Identifier: MIT
// The calls a Tape records: module forwards (any module, through module_traits), attention, add,
// reshape, concat_last, losses; tensor_functions.hpp adds slicing, reductions and products.
#pragma once

#include <algorithm>    // std::copy_n
#include <array>        // std::array
#include <cstddef>      // std::size_t
#include <cstdint>      // std::int64_t
#include <memory>       // std::shared_ptr, std::make_shared
#include <stdexcept>    // std::invalid_argument
#include <string>       // std::string, std::to_string
#include <tuple>        // std::tuple, std::forward_as_tuple
#include <type_traits>  // std::enable_if_t
#include <utility>      // std::forward, std::move, std::make_index_sequence
#include <vector>       // std::vector

#include "../config.hpp"
#include "../detail/compiled_templates.hpp"
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
#include "../layers/swiglu.hpp"
#include "../layers/transformer_decoder_layer.hpp"
#include "../layers/transformer_encoder_layer.hpp"
#include "../losses/cross_entropy.hpp"
#include "../losses/mse.hpp"
#include "../losses/reduction.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"
#include "../tensor_ops/concat.hpp"
#include "detail/apply_module.hpp"
#include "detail/recorded_call.hpp"
#include "module_traits.hpp"
#include "tape.hpp"
#include "tensor_functions.hpp"

namespace headwise::autograd {

// Each function runs the module's own forward, and when its tape records, saves what the
// module's own backward takes and records that backward; none computes a layer itself.

/// Records m's forward on the tape, for any module M that meets one of the backward conventions
/// of module_traits.hpp (no overload per module type):
///   on_input   Tensor<T> forward(x), Tensor<T> backward(x, dy): Linear, LayerNorm, RMSNorm,
///              GELU, ReLU, and any module like them; the call saves x.
///   record     R forward(x, extra...) with R::output, Tensor<T> backward(const R&, dy): Dropout,
///              SwiGLU, TransformerEncoderLayer (extra: its masks); the call saves R.
///   gradients  R forward(x_1, ..., x_N, extra...), G backward(const R&, dy), G's N fields
///              named by gradient_fields<G>: MultiheadAttention (query, key, value),
///              TransformerDecoderLayer (tgt, memory). apply(m, x, extra...) passes the one Var
///              x as every input (self-attention) and gives it the sum of their gradients;
///              apply(m, x_1, ..., x_N, extra...) gives each Var its own.
/// `extra` are the forward's non-tensor arguments (masks), passed as they are. Error messages
/// name the function "headwise::autograd::apply(Name)", Name being the last component of
/// M::kName, and the Var arguments x (and the gradient field names for N Vars). A call is
/// recorded when the tape records and an input is recorded or m has parameters
/// (m.parameter_count() > 0; a module without parameter_count() is taken to have some). A
/// module whose record holds saved activations (a member `saved`, as SwiGLUForward,
/// AttentionForward) must be in training mode on a recording tape (std::invalid_argument
/// otherwise: in eval mode it saves nothing for backward; record with a no-grad tape instead);
/// off the tape its activations are freed at once.
template <class M, class... Args, class Traits = detail::traits_for_t<M, Args...>,
          std::enable_if_t<Traits::convention != BackwardConvention::none, int> = 0>
Var<typename M::value_type> apply(M& m, const Var<typename M::value_type>& x, Args&&... args);

/// Rows of m's table for `indices` (copied); the tape is named since no Var comes in.
template <class T>
Var<T> apply(Embedding<T>& m, Tape<T>& tape, TensorView<const std::int64_t> indices);

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

template <class M, class... Args, class Traits,
          std::enable_if_t<Traits::convention != BackwardConvention::none, int>>
Var<typename M::value_type> apply(M& m, const Var<typename M::value_type>& x, Args&&... args) {
    using T = typename M::value_type;
    constexpr std::size_t vars = detail::split_vars<T, std::tuple<Args...>>::vars + 1;
    auto all = std::forward_as_tuple(x, std::forward<Args>(args)...);
    return detail::apply_split<Traits, vars>(
        detail::apply_name<M>(), m, std::move(all), std::make_index_sequence<vars>{},
        std::make_index_sequence<sizeof...(Args) + 1 - vars>{});
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
Var<T> attention(MultiheadAttention<T>& m, const Var<T>& query, const Var<T>& key,
                 const Var<T>& value, const AttentionMasks<T>& masks) {
    using Traits = module_traits<MultiheadAttention<T>, 3, const AttentionMasks<T>&>;
    const std::array<Var<T>, 3> x{query, key, value};
    return detail::apply_module<Traits>("headwise::autograd::attention", m, x,
                                        gradient_fields<AttentionGradients<T>>::names, masks);
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

// Compiled once into headwise::compiled (detail/compiled_templates.hpp).
#define HEADWISE_DETAIL_AUTOGRAD_FUNCTIONS_TEMPLATES(C, F, T)                                \
    F(autograd::Var<T>, autograd::add, (const autograd::Var<T>&, const autograd::Var<T>&))   \
    F(autograd::Var<T>, autograd::reshape, (const autograd::Var<T>&, const Shape&))          \
    F(autograd::Var<T>, autograd::concat_last, (const std::vector<autograd::Var<T>>&))       \
    F(autograd::Var<T>, autograd::cross_entropy,                                             \
      (const autograd::Var<T>&, TensorView<const std::int64_t>, const CrossEntropyOptions&)) \
    F(autograd::Var<T>, autograd::mse_loss,                                                  \
      (const autograd::Var<T>&, TensorView<const T>, Reduction))                             \
    F(autograd::Var<T>, autograd::attention,                                                 \
      (MultiheadAttention<T>&, const autograd::Var<T>&, const autograd::Var<T>&,             \
       const autograd::Var<T>&, const AttentionMasks<T>&))                                   \
    F(autograd::Var<T>, autograd::apply,                                                     \
      (Embedding<T>&, autograd::Tape<T>&, TensorView<const std::int64_t>))
HEADWISE_COMPILED_TEMPLATES(HEADWISE_DETAIL_AUTOGRAD_FUNCTIONS_TEMPLATES);
