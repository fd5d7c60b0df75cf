// SPDX-License-Identifier: MIT
// LayerNorm<T>: torch.nn.LayerNorm over the last axis, with an optional elementwise affine.
#pragma once

#include <cmath>   // std::isfinite
#include <string>  // std::string, std::to_string

#include "../config.hpp"
#include "../detail/compiled_templates.hpp"
#include "../error.hpp"
#include "../ops/layer_norm.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"
#include "module.hpp"

namespace headwise {

/// Layer normalisation (Ba et al. 2016) as torch.nn.LayerNorm(normalized_shape, eps,
/// elementwise_affine) with a one-axis normalized_shape: every row [..., C] of the input is
/// normalised to zero mean and unit biased variance, then scaled by weight [C] and shifted by
/// bias [C] (initialised to ones and zeros). Stateless between calls: backward takes the
/// forward's input again. Parameter names: "weight", "bias" (none without the affine).
template <class T>
class LayerNorm : public Module<LayerNorm<T>, T> {
    HEADWISE_STATIC_ASSERT_REAL(T);

public:
    static constexpr const char* kName = "headwise::LayerNorm";

    /// Throws std::invalid_argument unless normalized_shape > 0 and eps >= 0 (finite).
    explicit LayerNorm(Index normalized_shape, double eps = 1e-5, bool elementwise_affine = true);

    /// y[..., C] = (x - mean) / sqrt(var + eps) ⊙ weight + bias, per row.
    Tensor<T> forward(TensorView<const T> x) const;
    /// Given the forward's input x [..., C] and dy [..., C], returns dx and ADDS the weight and
    /// bias gradients.
    Tensor<T> backward(TensorView<const T> x, TensorView<const T> dy);
    /// The same, ADDING dx into the caller buffer dx [..., C] (e.g. a residual's gradient).
    void backward_into(TensorView<const T> x, TensorView<const T> dy, TensorView<T> dx);

    Index normalized_shape() const noexcept { return C_; }
    double eps() const noexcept { return eps_; }
    bool elementwise_affine() const noexcept { return affine_; }
    TensorView<T> weight() noexcept { return weight_.view(); }
    TensorView<const T> weight() const noexcept { return weight_.view(); }
    TensorView<T> bias() noexcept { return bias_.view(); }
    TensorView<const T> bias() const noexcept { return bias_.view(); }

    /// "weight" and "bias" [C] with the affine, else nothing (the module contract).
    template <class D>
    void declare(D& d) {
        if (!affine_) return;
        d.parameter("weight", weight_, grad_weight_);
        d.parameter("bias", bias_, grad_bias_);
    }

private:
    Index C_;
    double eps_;
    bool affine_;
    Tensor<T> weight_, bias_;            // [C] each, [0] without the affine
    Tensor<T> grad_weight_, grad_bias_;  // [C] each, [0] without the affine
};

// ---- definitions ----------------------------------------------------------------------------

template <class T>
LayerNorm<T>::LayerNorm(Index normalized_shape, double eps, bool elementwise_affine)
    : C_(normalized_shape),
      eps_(eps),
      affine_(elementwise_affine),
      weight_(Shape{elementwise_affine ? normalized_shape : 0}),
      bias_(Shape{elementwise_affine ? normalized_shape : 0}),
      grad_weight_(Shape{elementwise_affine ? normalized_shape : 0}),
      grad_bias_(Shape{elementwise_affine ? normalized_shape : 0}) {
    if (normalized_shape <= 0)
        throw_invalid_argument("headwise::LayerNorm::LayerNorm", "normalized_shape",
                               "must be positive", std::to_string(normalized_shape));
    if (!(eps >= 0.0) || !std::isfinite(eps))
        throw_invalid_argument("headwise::LayerNorm::LayerNorm", "eps",
                               "must be finite and non-negative", std::to_string(eps));
    weight_.fill(T(1));
}

template <class T>
Tensor<T> LayerNorm<T>::forward(TensorView<const T> x) const {
    detail::check_last_dim("headwise::LayerNorm::forward", "input", x.shape(), C_);
    Tensor<T> y = Tensor<T>::uninitialized(x.shape());  // [..., C], every element written
    ops::layer_norm_forward<T>(x.matrix(), affine_ ? weight_.data() : nullptr,
                               affine_ ? bias_.data() : nullptr, eps_, y.matrix());
    return y;
}

template <class T>
Tensor<T> LayerNorm<T>::backward(TensorView<const T> x, TensorView<const T> dy) {
    constexpr const char* fn = "headwise::LayerNorm::backward";
    detail::check_last_dim(fn, "input", x.shape(), C_);
    detail::check_shape(fn, "grad_output", dy.shape(), x.shape());
    Tensor<T> dx(x.shape());  // [..., C], zero: the kernel accumulates
    ops::layer_norm_backward<T>(x.matrix(), dy.matrix(), affine_ ? weight_.data() : nullptr, eps_,
                                dx.matrix(), affine_ ? grad_weight_.data() : nullptr,
                                affine_ ? grad_bias_.data() : nullptr);
    return dx;
}

template <class T>
void LayerNorm<T>::backward_into(TensorView<const T> x, TensorView<const T> dy, TensorView<T> dx) {
    constexpr const char* fn = "headwise::LayerNorm::backward_into";
    detail::check_last_dim(fn, "input", x.shape(), C_);
    detail::check_shape(fn, "grad_output", dy.shape(), x.shape());
    detail::check_shape(fn, "grad_input", dx.shape(), x.shape());
    ops::layer_norm_backward<T>(x.matrix(), dy.matrix(), affine_ ? weight_.data() : nullptr, eps_,
                                dx.matrix(), affine_ ? grad_weight_.data() : nullptr,
                                affine_ ? grad_bias_.data() : nullptr);
}

}  // namespace headwise

// Compiled once into headwise::compiled (detail/compiled_templates.hpp).
#define HEADWISE_DETAIL_LAYER_NORM_TEMPLATES(C, F, T) C(class, LayerNorm<T>)
HEADWISE_COMPILED_TEMPLATES(HEADWISE_DETAIL_LAYER_NORM_TEMPLATES);
