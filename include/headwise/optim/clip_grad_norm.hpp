// SPDX-License-Identifier: MIT
// clip_grad_norm: rescales gradients so that their global norm is at most max_norm.
#pragma once

#include <algorithm>  // std::min
#include <cmath>      // std::abs, std::pow, std::isinf, std::isnan
#include <string>     // std::to_string
#include <vector>     // std::vector

#include "../config.hpp"
#include "../error.hpp"
#include "../layers/module.hpp"

namespace headwise {

/// As torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type): the total norm is the
/// norm_type-norm of the vector of every parameter's gradient norm (the norm of all gradients
/// concatenated; norm_type = infinity gives the largest |g|); every gradient is then multiplied
/// by min(1, max_norm / (total + 1e-6)). Returns the total norm before clipping. Norms are
/// accumulated in double. As in torch, a NaN gradient makes the total NaN (for every norm_type)
/// and every gradient NaN; an infinite one makes the total +inf and every gradient 0 (the
/// infinite entries NaN, inf * 0). Throws std::invalid_argument for a negative or NaN max_norm
/// or a norm_type that is not positive.
template <class T>
double clip_grad_norm(const std::vector<Parameter<T>>& parameters, double max_norm,
                      double norm_type = 2.0) {
    constexpr const char* fn = "headwise::clip_grad_norm";
    if (!(max_norm >= 0.0))
        throw_invalid_argument(fn, "max_norm", "must be non-negative", std::to_string(max_norm));
    if (!(norm_type > 0.0))
        throw_invalid_argument(fn, "norm_type", "must be positive (or infinity)",
                               std::to_string(norm_type));
    const bool inf = std::isinf(norm_type);
    double total = 0.0;
    for (const Parameter<T>& p : parameters) {
        double norm = 0.0;  // max |g|, or Σ |g|^norm_type
        for (Index j = 0; j < p.grad.numel(); ++j) {
            const double a = std::abs(static_cast<double>(p.grad[j]));
            // std::max(norm, NaN) would keep norm: a NaN gradient must make the norm NaN.
            norm = inf ? (a > norm || std::isnan(a) ? a : norm) : norm + std::pow(a, norm_type);
        }
        total = inf ? (norm > total || std::isnan(norm) ? norm : total) : total + norm;
    }
    if (!inf) total = std::pow(total, 1.0 / norm_type);
    // A NaN total gives a NaN coefficient (std::min(1.0, NaN) would give 1), so that every
    // gradient becomes NaN, as in torch, instead of passing through unclipped.
    const double ratio = max_norm / (total + 1e-6);
    const double coef = std::isnan(ratio) ? ratio : std::min(1.0, ratio);
    if (!(coef >= 1.0))
        for (const Parameter<T>& p : parameters)
            for (Index j = 0; j < p.grad.numel(); ++j)
                p.grad[j] = static_cast<T>(static_cast<double>(p.grad[j]) * coef);
    return total;
}

}  // namespace headwise
