// SPDX-License-Identifier: MIT
// The logistic sigmoid and SiLU with its derivative in double, finite wherever their limits are.
#pragma once

#include <cmath>  // std::abs, std::exp

namespace headwise::detail {

/// The logistic sigmoid σ(v) = 1 / (1 + e^-v), from e^-|v| (in [0, 1], so nothing overflows):
/// 1 / (1 + e^-v) for v >= 0 and e^v / (1 + e^v) for v < 0, each accurate to rounding, so that
/// σ(-40) is 4.2e-18 and not 1 - 1 = 0. σ(±inf) = 1 and 0; NaN stays NaN.
inline double sigmoid(double v) noexcept {
    const double e = std::exp(-std::abs(v));  // [0, 1]
    return v >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

/// SiLU(v) = v σ(v). Where σ(v) underflows to 0 (v below about -745, -inf included) the limit
/// v e^v -> 0 is returned, not the product -inf · 0 = NaN; SiLU(+inf) = +inf.
inline double silu(double v) noexcept {
    const double s = sigmoid(v);
    return s == 0.0 ? 0.0 : v * s;
}

/// SiLU'(v) = σ(v) + v σ(v) σ(-v), with σ(v) σ(-v) = e^-|v| / (1 + e^-|v|)^2 (no 1 - σ
/// cancellation). Where e^-|v| underflows to 0 (|v| beyond about 745, ±inf included) the
/// second term's limit 0 is used instead of ±inf · 0: SiLU' -> 1 at +inf, 0 at -inf.
inline double silu_derivative(double v) noexcept {
    const double e = std::exp(-std::abs(v));  // [0, 1]
    const double s = v >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
    const double s_s = e / ((1.0 + e) * (1.0 + e));  // σ(v) σ(-v)
    return s_s == 0.0 ? s : s + v * s_s;
}

}  // namespace headwise::detail
