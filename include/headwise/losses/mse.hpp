// SPDX-License-Identifier: MIT
// Mean squared error (torch.nn.functional.mse_loss) and its gradient.
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "../tensor.hpp"
#include "reduction.hpp"

namespace headwise {

/// Σ (input - target)² over every element, divided by the element count for Reduction::mean,
/// as torch.nn.functional.mse_loss; returns the value and d value / d input =
/// 2 (input - target) (/ count). Shapes must be equal (no broadcasting); an empty input gives 0.
template <class T>
LossResult<T> mse_loss(TensorView<const T> input, TensorView<const T> target,
                       Reduction reduction = Reduction::mean) {
    HEADWISE_STATIC_ASSERT_REAL(T);
    detail::check_shape("headwise::mse_loss", "target", target.shape(), input.shape());
    LossResult<T> result;
    result.grad = Tensor<T>(input.shape());  // [...]
    const Index n = input.numel();
    if (n == 0) return result;
    const double scale = reduction == Reduction::mean ? 1.0 / static_cast<double>(n) : 1.0;
    double total = 0.0;
    for (Index i = 0; i < n; ++i) {
        const double d = static_cast<double>(input[i]) - static_cast<double>(target[i]);
        total += d * d;
        result.grad.data()[i] = static_cast<T>(2.0 * d * scale);
    }
    result.value = total * scale;
    return result;
}

}  // namespace headwise
