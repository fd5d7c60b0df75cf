// SPDX-License-Identifier: MIT
// Elementwise activations ReLU, GELU (exact erf form or tanh approximation) and SiLU, forward
// and backward.
// ops/: stateless kernels that write into buffers the caller provides (nothing allocated per
// call); tensor_ops/ holds the functions that return new tensors.
#pragma once

#include <cmath>        // std::erfc, std::exp, std::tanh, std::sqrt
#include <type_traits>  // std::is_same_v

#include "../config.hpp"
#include "detail/fast_erf.hpp"  // pick
#include "detail/gelu_float.hpp"
#include "detail/sigmoid.hpp"

namespace headwise::detail {
inline constexpr double kSqrtHalf = 0.70710678118654752440;       // 1 / √2
inline constexpr double kInvSqrtTwoPi = 0.39894228040143267794;   // 1 / √(2π)
inline constexpr double kSqrtTwoOverPi = 0.79788456080286535588;  // √(2/π)
inline constexpr double kGeluTanhCubic = 0.044715;

/// Φ(v) and e^{-v²/2} for GELU's exact form in double (std::erfc, std::exp); float has its own
/// vectorised kernel, detail::gelu_float and detail::gelu_float_derivative.
inline double gelu_normal_cdf(double v) noexcept {
    return 0.5 * std::erfc(-v * kSqrtHalf);  // not 1 + erf: keeps the left tail
}
inline double gelu_gauss(double v) noexcept { return std::exp(-0.5 * v * v); }

}  // namespace headwise::detail

namespace headwise::ops {

/// How GELU is computed, as torch.nn.GELU(approximate=...): "none" or "tanh".
enum class GeluApproximation { none, tanh };

/// y[i] = max(x[i], 0) over n elements; y may alias x.
template <class T>
void relu_forward(const T* x, Index n, T* y) {
    for (Index i = 0; i < n; ++i) y[i] = x[i] > T(0) ? x[i] : T(0);
}

/// dx[i] += dy[i] where x[i] > 0 (torch's subgradient 0 at x = 0).
template <class T>
void relu_backward(const T* x, const T* dy, Index n, T* dx) {
    for (Index i = 0; i < n; ++i)
        if (x[i] > T(0)) dx[i] += dy[i];
}

/// GELU(x) = x Φ(x) (Hendrycks and Gimpel 2016) with Φ the standard normal CDF,
/// Φ(x) = (1 + erf(x / √2)) / 2; or its tanh approximation
/// 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))). Evaluated in double; the exact form for float
/// by a vectorised kernel (detail::gelu_float), within 1 ulp of the correctly rounded result
/// (tested over every float).
/// The exact form gives the limits at ±inf (0 and +inf; torch gives NaN at -inf), NaN for NaN.
/// y may alias x.
template <class T>
void gelu_forward(const T* x, Index n, GeluApproximation approximate, T* y);

/// dx[i] += dy[i] GELU'(x[i]): Φ(x) + x φ(x) for the exact form (φ the normal density), the
/// derivative of the tanh formula for the approximation. The exact form's derivative has the
/// limits 0 and 1 at ±inf.
template <class T>
void gelu_backward(const T* x, const T* dy, Index n, GeluApproximation approximate, T* dx);

/// SiLU(x) = x σ(x) (the swish of Ramachandran et al. 2017 with β = 1; torch.nn.SiLU), evaluated
/// in double with a sigmoid that neither overflows nor loses its small values (detail::sigmoid):
/// finite for every finite x, and the limits at ±inf (+inf and 0). y may alias x.
template <class T>
void silu_forward(const T* x, Index n, T* y) {
    for (Index i = 0; i < n; ++i)
        y[i] = static_cast<T>(headwise::detail::silu(static_cast<double>(x[i])));
}

/// dx[i] += dy[i] SiLU'(x[i]), SiLU'(x) = σ(x) (1 + x (1 - σ(x))); finite for every finite x,
/// and the limits 1 and 0 at ±inf.
template <class T>
void silu_backward(const T* x, const T* dy, Index n, T* dx) {
    for (Index i = 0; i < n; ++i)
        dx[i] += static_cast<T>(static_cast<double>(dy[i]) *
                                headwise::detail::silu_derivative(static_cast<double>(x[i])));
}

// ---- definitions ----------------------------------------------------------------------------

template <class T>
void gelu_forward(const T* x, Index n, GeluApproximation approximate, T* y) {
    if (approximate == GeluApproximation::none) {
        if constexpr (std::is_same_v<T, float>) {
            for (Index i = 0; i < n; ++i) y[i] = headwise::detail::gelu_float(x[i]);
        } else {
            for (Index i = 0; i < n; ++i) {
                const double v = static_cast<double>(x[i]);
                const double cdf = headwise::detail::gelu_normal_cdf(v);
                y[i] = static_cast<T>(
                    headwise::detail::pick(cdf == 0.0, 0.0, v * cdf));  // not NaN at -inf
            }
        }
    } else {
        for (Index i = 0; i < n; ++i) {
            const double v = static_cast<double>(x[i]);
            const double inner = headwise::detail::kSqrtTwoOverPi *
                                 (v + headwise::detail::kGeluTanhCubic * v * v * v);
            y[i] = static_cast<T>(0.5 * v * (1.0 + std::tanh(inner)));
        }
    }
}

template <class T>
void gelu_backward(const T* x, const T* dy, Index n, GeluApproximation approximate, T* dx) {
    if (approximate == GeluApproximation::none) {
        if constexpr (std::is_same_v<T, float>) {
            for (Index i = 0; i < n; ++i)
                dx[i] += static_cast<float>(static_cast<double>(dy[i]) *
                                            headwise::detail::gelu_float_derivative(x[i]));
        } else {
            for (Index i = 0; i < n; ++i) {
                const double v = static_cast<double>(x[i]);
                const double cdf = headwise::detail::gelu_normal_cdf(v);
                const double pdf =
                    headwise::detail::kInvSqrtTwoPi * headwise::detail::gelu_gauss(v);
                const double d =
                    headwise::detail::pick(pdf == 0.0, cdf, cdf + v * pdf);  // ±inf: limits
                dx[i] += static_cast<T>(static_cast<double>(dy[i]) * d);
            }
        }
    } else {
        for (Index i = 0; i < n; ++i) {
            const double v = static_cast<double>(x[i]);
            const double inner = headwise::detail::kSqrtTwoOverPi *
                                 (v + headwise::detail::kGeluTanhCubic * v * v * v);
            const double t = std::tanh(inner);
            const double dinner = headwise::detail::kSqrtTwoOverPi *
                                  (1.0 + 3.0 * headwise::detail::kGeluTanhCubic * v * v);
            const double d = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * dinner;
            dx[i] += static_cast<T>(static_cast<double>(dy[i]) * d);
        }
    }
}

}  // namespace headwise::ops
