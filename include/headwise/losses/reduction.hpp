// SPDX-License-Identifier: MIT
// What a loss returns (its value and its gradient) and how it reduces over elements.
#pragma once

#include "../tensor.hpp"

namespace headwise {

/// How a loss combines its per-element terms, as torch's `reduction` argument.
enum class Reduction {
    mean,  // the average (over the counted elements)
    sum,   // the sum
};

inline const char* to_string(Reduction r) noexcept { return r == Reduction::mean ? "mean" : "sum"; }

/// A loss value and the gradient of that value with respect to the loss's input (the logits or
/// predictions), ready to be passed to the backward of the layer that produced them. The value
/// is accumulated in double whatever T is.
template <class T>
struct LossResult {
    double value = 0.0;
    Tensor<T> grad;  // the input's shape
};

}  // namespace headwise
