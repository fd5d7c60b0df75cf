// SPDX-License-Identifier: MIT
// One row's root-mean-square normalisation factor, in T, safe from overflow and underflow.
#pragma once

#include <algorithm>  // std::max
#include <cmath>      // std::abs, std::sqrt, std::isfinite, std::ilogb, std::ldexp
#include <limits>     // std::numeric_limits

#include "../../config.hpp"

namespace headwise::detail {

/// The normalisation of one row x[0, C): xhat[c] = (x[c] / scale) * r, where
/// 1 / sqrt(mean(x^2) + eps) = r / scale. The sum of squares runs in T, as Hugging Face's
/// LlamaRMSNorm sums in float32 (for T = float the same arithmetic). `scale` is 1 unless that
/// plain sum leaves the normal range of T: when x^2 overflows (|x| beyond about 1e19 in float)
/// or, with eps = 0, underflows, the row is divided by the largest power of two not above its
/// largest |x| first. Dividing by a power of two is exact, so xhat stays what the plain formula
/// gives wherever that formula is finite, and is the right finite value where it is not (no 0 from
/// an infinite sum, no inf from a vanished one). A row holding inf or NaN, and a zero row with
/// eps = 0, keep the plain formula and its NaN (inf · 0, 0 · inf), as torch does.
template <class T>
void rms_norm_row(const T* x, Index C, double eps, T& scale, T& r) {
    const T eps_T = static_cast<T>(eps);
    const T inv_C = T(1) / static_cast<T>(C);
    T ss = T(0);
    for (Index c = 0; c < C; ++c) ss += x[c] * x[c];
    const T denominator = ss * inv_C + eps_T;  // mean(x^2) + eps
    scale = T(1);
    if (std::isfinite(denominator) && denominator >= std::numeric_limits<T>::min()) {
        r = T(1) / std::sqrt(denominator);
        return;
    }
    T amax = T(0);
    for (Index c = 0; c < C; ++c) amax = std::max(amax, std::abs(x[c]));
    if (!std::isfinite(amax) || amax == T(0)) {  // inf or NaN in the row, or a zero row, eps 0
        r = T(1) / std::sqrt(denominator);
        return;
    }
    // mean(x^2) + eps = scale^2 (mean((x / scale)^2) + eps / scale^2), each term in range.
    scale = std::ldexp(T(1), std::ilogb(amax));
    ss = T(0);
    for (Index c = 0; c < C; ++c) {
        const T v = x[c] / scale;
        ss += v * v;
    }
    r = T(1) / std::sqrt(ss * inv_C + eps_T / scale / scale);
}

}  // namespace headwise::detail
