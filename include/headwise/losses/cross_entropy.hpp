// SPDX-License-Identifier: MIT
// Cross-entropy over logits (torch.nn.functional.cross_entropy) with ignore_index and label
// smoothing, and its gradient.
#pragma once

#include <algorithm>  // std::max
#include <cmath>      // std::exp, std::log, std::isfinite
#include <cstdint>    // std::int64_t
#include <stdexcept>  // std::out_of_range
#include <string>     // std::string, std::to_string

#include "../config.hpp"
#include "../error.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"
#include "reduction.hpp"

namespace headwise {

/// The options of torch.nn.functional.cross_entropy that headwise supports.
struct CrossEntropyOptions {
    std::int64_t ignore_index = -100;  // targets equal to it add nothing and are not counted
    double label_smoothing = 0.0;      // in [0, 1]: the target distribution is
                                       // (1 - ε) onehot(t) + ε / C
    Reduction reduction = Reduction::mean;
};

/// Cross-entropy of logits [N, C] against class indices targets [N] (std::int64_t), as
/// torch.nn.functional.cross_entropy: per counted row n with target t,
///   l_n = (1 - ε) (-log p_t) + ε Σ_c (-log p_c) / C,   p = softmax(logits[n, :]),
/// reduced by sum or by mean over the rows whose target is not ignore_index. Returns the value
/// and d value / d logits [N, C] = scale (p - (1 - ε) onehot(t) - ε / C) on counted rows and 0 on
/// ignored ones (scale 1, or 1 / count for the mean). log p is formed as x - max - log Σ exp(x -
/// max), so large logits neither overflow nor lose the small probabilities.
/// A -inf logit is a class of probability 0: its gradient entry is 0 - target weight, and it
/// makes the loss +inf only where it carries weight (its own row's target, or any class once
/// ε > 0). So logits [0, -inf, 1] with target 0 give torch's finite 1.3133, with target 1 +inf.
/// A row with no finite logit, or with a +inf one, gives NaN, as in torch.
/// Unlike torch, which gives NaN (0 * inf) for ε = 1 and a -inf target logit, the loss there is
/// +inf, its value at every ε < 1; and a mean over no counted row (0 / 0 = NaN in torch) is 0
/// with a zero gradient.
/// Throws shape_error for mismatched shapes, std::invalid_argument for label_smoothing outside
/// [0, 1], std::out_of_range naming the row of a target outside [0, C) that is not ignore_index.
template <class T>
LossResult<T> cross_entropy(TensorView<const T> logits, TensorView<const std::int64_t> targets,
                            const CrossEntropyOptions& options = {});

// ---- definitions ----------------------------------------------------------------------------

template <class T>
LossResult<T> cross_entropy(TensorView<const T> logits, TensorView<const std::int64_t> targets,
                            const CrossEntropyOptions& options) {
    HEADWISE_STATIC_ASSERT_REAL(T);
    constexpr const char* fn = "headwise::cross_entropy";
    if (logits.rank() != 2 || logits.shape()[1] == 0)
        throw shape_error(fn, "logits", "[N, C] with C > 0", logits.shape());
    const Index N = logits.shape()[0], C = logits.shape()[1];
    detail::check_shape(fn, "targets", targets.shape(), Shape{N});
    const double eps = options.label_smoothing;
    if (!(eps >= 0.0 && eps <= 1.0))
        throw_invalid_argument(fn, "options.label_smoothing", "must be in [0, 1]",
                               std::to_string(eps));
    Index count = 0;
    for (Index n = 0; n < N; ++n) {
        const std::int64_t t = targets[n];
        if (t == options.ignore_index) continue;
        if (t < 0 || t >= C)
            throw std::out_of_range(std::string(fn) + ": targets: entry " + std::to_string(n) +
                                    " is " + std::to_string(t) + ", expected a class in [0, " +
                                    std::to_string(C) + ") or ignore_index " +
                                    std::to_string(options.ignore_index));
        ++count;
    }

    LossResult<T> result;
    result.grad = Tensor<T>(logits.shape());  // [N, C], zero on ignored rows
    if (count == 0) return result;
    const double scale =
        options.reduction == Reduction::mean ? 1.0 / static_cast<double>(count) : 1.0;
    const double inv_C = 1.0 / static_cast<double>(C);
    double total = 0.0;
    for (Index n = 0; n < N; ++n) {
        const std::int64_t t = targets[n];
        if (t == options.ignore_index) continue;
        const T* x = logits.data() + n * C;  // [C]
        T* dx = result.grad.data() + n * C;  // [C]
        // log p_c = x_c - m - log Σ exp(x - m); subtracting the row max m keeps exp <= 1.
        double m = static_cast<double>(x[0]);
        for (Index c = 1; c < C; ++c) m = std::max(m, static_cast<double>(x[c]));
        double z = 0.0;
        for (Index c = 0; c < C; ++c) z += std::exp(static_cast<double>(x[c]) - m);
        const double log_z = m + std::log(z);
        double sum_neg_logp = 0.0;
        for (Index c = 0; c < C; ++c) sum_neg_logp += log_z - static_cast<double>(x[c]);
        const double nll = log_z - static_cast<double>(x[t]);
        // A term of weight 0 is left out, not multiplied by 0: -log p of a -inf logit is +inf,
        // and 0 * inf would turn a finite loss into NaN.
        if (eps < 1.0) total += (1.0 - eps) * nll;
        if (eps > 0.0) total += eps * sum_neg_logp * inv_C;
        for (Index c = 0; c < C; ++c) {
            const double p = std::exp(static_cast<double>(x[c]) - log_z);
            const double target = (c == t ? 1.0 - eps : 0.0) + eps * inv_C;
            dx[c] = static_cast<T>(scale * (p - target));
        }
    }
    result.value = total * scale;
    return result;
}

}  // namespace headwise
