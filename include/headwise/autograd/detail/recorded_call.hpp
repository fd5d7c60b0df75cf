// SPDX-License-Identifier: MIT
// What the recorded functions of autograd/functions.hpp share: finding the tape, recording a call.
#pragma once

#include <memory>       // std::shared_ptr, std::make_shared
#include <stdexcept>    // std::invalid_argument
#include <string>       // std::string
#include <type_traits>  // std::false_type, std::true_type, std::void_t
#include <utility>      // std::move

#include "../../config.hpp"
#include "../../losses/reduction.hpp"
#include "../../shape.hpp"
#include "../../tensor.hpp"
#include "../tape.hpp"

namespace headwise::autograd::detail {

template <class M, class = void>
struct has_kname : std::false_type {};
template <class M>
struct has_kname<M, std::void_t<decltype(std::string(M::kName))>> : std::true_type {};

/// M::kName ("headwise::Linear"), or "module" for a module without one.
template <class M>
const char* module_name() {
    if constexpr (has_kname<M>::value)
        return M::kName;
    else
        return "module";
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
        throw std::invalid_argument(std::string(fn) + ": m: " + module_name<M>() +
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
