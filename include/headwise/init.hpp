// SPDX-License-Identifier: MIT
// PyTorch-compatible parameter initialisers (torch.nn.init) drawing from an explicit generator.
#pragma once

#include <algorithm>  // std::fill_n
#include <cmath>      // std::sqrt
#include <string>     // std::string

#include "config.hpp"
#include "detail/number_string.hpp"
#include "detail/weight_fans.hpp"
#include "error.hpp"
#include "random.hpp"
#include "shape.hpp"
#include "tensor.hpp"

namespace headwise {

/// Fan-in and fan-out of a weight, as torch.nn.init._calculate_fan_in_and_fan_out computes them.
struct Fans {
    Index in;
    Index out;
};

/// Fans of a weight of shape [out, in, k...]: in * prod(k) and out * prod(k). For the [out, in]
/// weight of a linear layer, {in, out}. Throws shape_error for rank < 2 (PyTorch refuses too).
inline Fans fan_in_and_fan_out(const Shape& shape);

/// Fills `w` with U(lo, hi): one draw per element, row-major, so a seed gives the same tensor on
/// every platform. Values are drawn in double from [lo, hi) and rounded to T. Throws
/// std::invalid_argument unless lo <= hi.
template <class T, class Rng>
void uniform_(TensorView<T> w, double lo, double hi, Rng& rng);

/// He et al. 2015 initialisation, mode fan_in, leaky_relu gain: U(-bound, bound) with
/// bound = gain * sqrt(3 / fan_in), gain = sqrt(2 / (1 + a^2)). PyTorch's nn.Linear uses
/// a = sqrt(5), which gives bound = 1 / sqrt(in_features).
template <class T, class Rng>
void kaiming_uniform_(TensorView<T> w, double a, Rng& rng);

/// Glorot & Bengio 2010 initialisation: U(-bound, bound), bound = gain * sqrt(6 / (fan_in +
/// fan_out)). nn.MultiheadAttention applies it to the whole packed in_proj_weight [3E, E]
/// (fan_out = 3E, fan_in = E), or to each of q/k/v_proj_weight when they are separate.
template <class T, class Rng>
void xavier_uniform_(TensorView<T> w, Rng& rng, double gain = 1.0);

/// Sets every element of `w` to `value` (rounded to T).
template <class T>
void constant_(TensorView<T> w, double value);

/// Sets every element of `w` to zero.
template <class T>
void zeros_(TensorView<T> w);

// Owning tensors: the same, without spelling out the view (template deduction does not see the
// Tensor -> TensorView conversion).
template <class T, class Rng>
void uniform_(Tensor<T>& w, double lo, double hi, Rng& rng) {
    uniform_(w.view(), lo, hi, rng);
}
template <class T, class Rng>
void kaiming_uniform_(Tensor<T>& w, double a, Rng& rng) {
    kaiming_uniform_(w.view(), a, rng);
}
template <class T, class Rng>
void xavier_uniform_(Tensor<T>& w, Rng& rng, double gain = 1.0) {
    xavier_uniform_(w.view(), rng, gain);
}
template <class T>
void constant_(Tensor<T>& w, double value) {
    constant_(w.view(), value);
}
template <class T>
void zeros_(Tensor<T>& w) {
    zeros_(w.view());
}

// ---- definitions ----------------------------------------------------------------------------

inline Fans fan_in_and_fan_out(const Shape& shape) {
    const auto [in, out] = detail::weight_fans("headwise::fan_in_and_fan_out", shape);
    return Fans{in, out};
}

template <class T, class Rng>
void uniform_(TensorView<T> w, double lo, double hi, Rng& rng) {
    HEADWISE_STATIC_ASSERT_REAL(T);
    if (!(lo <= hi))  // also rejects NaN
        throw_invalid_argument("headwise::uniform_", "hi",
                               "must be >= lo = " + detail::shortest_str(lo),
                               detail::shortest_str(hi));
    T* data = w.data();
    for (Index i = 0; i < w.numel(); ++i) data[i] = static_cast<T>(uniform_scalar(rng, lo, hi));
}

template <class T, class Rng>
void kaiming_uniform_(TensorView<T> w, double a, Rng& rng) {
    const auto [fan_in, fan_out] = detail::weight_fans("headwise::kaiming_uniform_", w.shape());
    if (w.numel() == 0) return;  // nothing to draw; fan_in may be 0
    // Var(w) = gain^2 / fan_in keeps the forward activations' variance constant (He et al. 2015,
    // Eq. 10); U(-bound, bound) has variance bound^2 / 3.
    const double gain = std::sqrt(2.0 / (1.0 + a * a));
    const double bound = gain * std::sqrt(3.0 / static_cast<double>(fan_in));
    uniform_(w, -bound, bound, rng);
}

template <class T, class Rng>
void xavier_uniform_(TensorView<T> w, Rng& rng, double gain) {
    const auto [fan_in, fan_out] = detail::weight_fans("headwise::xavier_uniform_", w.shape());
    if (w.numel() == 0) return;
    // Var(w) = gain^2 * 2 / (fan_in + fan_out) balances forward and backward variance (Glorot &
    // Bengio 2010, Eq. 12); U(-bound, bound) has variance bound^2 / 3.
    const double bound = gain * std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
    uniform_(w, -bound, bound, rng);
}

template <class T>
void constant_(TensorView<T> w, double value) {
    HEADWISE_STATIC_ASSERT_REAL(T);
    std::fill_n(w.data(), w.numel(), static_cast<T>(value));
}

template <class T>
void zeros_(TensorView<T> w) {
    constant_(w, 0.0);
}

}  // namespace headwise
