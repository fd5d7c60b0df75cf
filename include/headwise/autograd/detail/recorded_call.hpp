// SPDX-License-Identifier: MIT
// What the recorded functions of autograd/functions.hpp share: finding the tape, recording a call.
#pragma once

#include <memory>     // std::shared_ptr, std::make_shared
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string
#include <utility>    // std::move

#include "../../config.hpp"
#include "../../losses/reduction.hpp"
#include "../../shape.hpp"
#include "../../tensor.hpp"
#include "../tape.hpp"

namespace headwise::autograd::detail {

/// For the modules whose backward is `Tensor<T> backward(x, dy)`.
template <class T, class M>
Var<T> apply_on_input(const char* fn, M& m, const Var<T>& x, bool has_parameters) {
    Tape<T>& tape = Tape<T>::of(fn, "x", x);
    const bool rec = tape.begin_call(fn, {&x}, {"x"}, has_parameters);
    auto y = std::make_shared<Tensor<T>>(m.forward(x.value()));
    TensorView<const T> yv = *y;
    if (!rec) return tape.constant(std::move(y), yv);
    return tape.record(std::move(y), yv, [&tape, &m, x](TensorView<const T> dy) {
        tape.accumulate(x, m.backward(x.value(), dy));
    });
}

template <class T>
Tape<T>& tape_of(const char* fn, const char* argument, const Var<T>& v) {
    return Tape<T>::of(fn, argument, v);
}

/// Throws before a module in eval mode runs a forward that a recording tape could not
/// differentiate.
template <class M>
void check_training(const char* fn, const M& m, bool rec) {
    if (rec && !m.is_training())
        throw std::invalid_argument(std::string(fn) + ": m: " + M::kName +
                                    " is in eval mode, which saves nothing for backward; call "
                                    "train(), or run it on a tape in no-grad mode");
}

/// A loss as a one-element Var whose backward scales the loss's gradient by d loss.
template <class T>
Var<T> record_loss(Tape<T>& tape, bool rec, const Var<T>& input, LossResult<T>&& r) {
    auto y = std::make_shared<Tensor<T>>(Shape{});
    y->data()[0] = static_cast<T>(r.value);
    TensorView<const T> yv = *y;
    if (!rec) return tape.constant(std::move(y), yv);
    auto grad = std::make_shared<Tensor<T>>(std::move(r.grad));
    return tape.record(std::move(y), yv, [&tape, input, grad](TensorView<const T> dy) {
        Tensor<T> dx = Tensor<T>::uninitialized(grad->shape());
        // With the usual seed d loss = 1 the product is exact: the loss's own gradient.
        const T s = dy.data()[0];
        for (Index i = 0; i < dx.numel(); ++i) dx.data()[i] = s * grad->data()[i];
        tape.accumulate(input, std::move(dx));
    });
}

}  // namespace headwise::autograd::detail
