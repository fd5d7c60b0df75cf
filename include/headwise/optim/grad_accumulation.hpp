// SPDX-License-Identifier: MIT
// Gradient accumulation over micro-batches: the pattern, and scale_grad to weight what was summed.
#pragma once

#include <cmath>   // std::isfinite
#include <vector>  // std::vector

#include "../config.hpp"
#include "../error.hpp"
#include "../layers/module.hpp"
#include "detail/optimizer_state.hpp"

namespace headwise {

// Every backward ADDS into the parameters' gradients until zero_grad(), so a batch too large for
// memory can be split into k micro-batches whose backwards run one after the other: the gradient
// after the last is the sum of theirs. With a loss that averages over its batch
// (Reduction::mean), the full batch's mean is the micro-batches' means weighted by n_i / N (n_i
// rows in micro-batch i, N in all; 1 / k for equal sizes), so each micro-batch's loss gradient
// is scaled by that before its backward, as torch's `(loss / k).backward()`:
//
//   opt.zero_grad();
//   for (Index i = 0; i < k; ++i) {                        // rows [i m, (i + 1) m) of x, target
//       const auto x_i = headwise::view(x.data() + i * m * E, {m, E});          // [m, E]
//       const auto t_i = headwise::view(target.data() + i * m * O, {m, O});     // [m, O]
//       const Tensor<T> y_i = model.forward(x_i);
//       headwise::LossResult<T> loss = headwise::mse_loss<T>(y_i, t_i);
//       loss.grad *= T(1) / T(k);                          // tensor_ops/elementwise.hpp
//       model.backward(x_i, loss.grad);                    // adds
//   }
//   headwise::clip_grad_norm(opt.parameters(), 1.0);       // the full gradient's norm
//   opt.step();
//   sched.step();                                          // once per optimiser step
//
// or backward the unscaled gradients and call scale_grad(opt.parameters(), 1.0 / k) once before
// clipping. Either gives the full batch's gradient, and so its optimiser step, up to the rounding
// of sums taken in another order. A loss with Reduction::sum needs no scaling. Dropout draws other
// masks for the micro-batches than for one full batch, so with dropout the two runs differ as two
// draws do.

/// Multiplies every parameter's gradient by `factor` (in double, rounded to T), e.g. 1 / k after
/// accumulating k micro-batches' unscaled gradients. Throws std::invalid_argument for a factor
/// that is not finite, before any gradient changes.
template <class T>
void scale_grad(const std::vector<Parameter<T>>& parameters, double factor) {
    if (!std::isfinite(factor))
        throw_invalid_argument("headwise::scale_grad", "factor", "must be finite",
                               detail::exact_decimal(factor));
    for (const Parameter<T>& p : parameters)
        for (Index j = 0; j < p.grad.numel(); ++j)
            p.grad[j] = static_cast<T>(static_cast<double>(p.grad[j]) * factor);
}

}  // namespace headwise
