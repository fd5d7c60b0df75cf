// SPDX-License-Identifier: MIT
// RMSNorm<T>: torch.nn.RMSNorm and Hugging Face's LlamaRMSNorm over the last axis.
#pragma once

#include <cmath>   // std::isfinite
#include <string>  // std::string, std::to_string

#include "../config.hpp"
#include "../detail/compiled_templates.hpp"
#include "../error.hpp"
#include "../ops/rms_norm.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"
#include "module.hpp"

namespace headwise {

/// Root-mean-square layer normalisation (Zhang and Sennrich 2019) as
/// torch.nn.RMSNorm(normalized_shape, eps, elementwise_affine) with a one-axis normalized_shape,
/// and as transformers' LlamaRMSNorm (weight * normalised): every row [..., C] of the input is
/// divided by sqrt(mean(x^2) + eps), then scaled by weight [C] (initialised to ones). No
/// centring and no bias. The mean is computed in T (LlamaRMSNorm's float32 for T = float; see
/// ops::rms_norm_forward). Stateless between calls: backward takes the forward's input again.
/// Parameter name: "weight" (none without the affine), so a Llama checkpoint's
/// input_layernorm.weight, post_attention_layernorm.weight and norm.weight load as they are.
template <class T>
class RMSNorm : public Module<RMSNorm<T>, T> {
    HEADWISE_STATIC_ASSERT_REAL(T);

public:
    static constexpr const char* kName = "headwise::RMSNorm";

    /// Throws std::invalid_argument unless normalized_shape > 0 and eps >= 0 (finite). The
    /// default eps is Llama's rms_norm_eps (torch's eps=None means the dtype's epsilon instead).
    explicit RMSNorm(Index normalized_shape, double eps = 1e-6, bool elementwise_affine = true);

    /// y[..., C] = x / sqrt(mean(x^2) + eps) ⊙ weight, per row.
    Tensor<T> forward(TensorView<const T> x) const;
    /// Given the forward's input x [..., C] and dy [..., C], returns dx and ADDS the weight
    /// gradient.
    Tensor<T> backward(TensorView<const T> x, TensorView<const T> dy);
    /// The same, ADDING dx into the caller buffer dx [..., C] (e.g. a residual's gradient).
    void backward_into(TensorView<const T> x, TensorView<const T> dy, TensorView<T> dx);

    Index normalized_shape() const noexcept { return C_; }
    double eps() const noexcept { return eps_; }
    bool elementwise_affine() const noexcept { return affine_; }
    TensorView<T> weight() noexcept { return weight_.view(); }
    TensorView<const T> weight() const noexcept { return weight_.view(); }
    TensorView<T> grad_weight() noexcept { return grad_weight_.view(); }
    TensorView<const T> grad_weight() const noexcept { return grad_weight_.view(); }

    /// "weight" [C] with the affine, else nothing (the module contract).
    template <class D>
    void declare(D& d) {
        if (affine_) d.parameter("weight", weight_, grad_weight_);
    }

private:
    Index C_;
    double eps_;
    bool affine_;
    Tensor<T> weight_;       // [C], [0] without the affine
    Tensor<T> grad_weight_;  // [C], [0] without the affine
};

// ---- definitions ----------------------------------------------------------------------------

template <class T>
RMSNorm<T>::RMSNorm(Index normalized_shape, double eps, bool elementwise_affine)
    : C_(normalized_shape),
      eps_(eps),
      affine_(elementwise_affine),
      weight_(Shape{elementwise_affine && normalized_shape > 0 ? normalized_shape : 0}),
      grad_weight_(Shape{elementwise_affine && normalized_shape > 0 ? normalized_shape : 0}) {
    constexpr const char* fn = "headwise::RMSNorm::RMSNorm";
    if (normalized_shape <= 0)
        throw_invalid_argument(fn, "normalized_shape", "must be positive",
                               std::to_string(normalized_shape));
    if (!(eps >= 0.0) || !std::isfinite(eps))
        throw_invalid_argument(fn, "eps", "must be finite and non-negative", std::to_string(eps));
    weight_.fill(T(1));
}

template <class T>
Tensor<T> RMSNorm<T>::forward(TensorView<const T> x) const {
    detail::check_last_dim("headwise::RMSNorm::forward", "input", x.shape(), C_);
    Tensor<T> y = Tensor<T>::uninitialized(x.shape());  // [..., C], every element written
    ops::rms_norm_forward<T>(x.matrix(), affine_ ? weight_.data() : nullptr, eps_, y.matrix());
    return y;
}

template <class T>
Tensor<T> RMSNorm<T>::backward(TensorView<const T> x, TensorView<const T> dy) {
    constexpr const char* fn = "headwise::RMSNorm::backward";
    detail::check_last_dim(fn, "input", x.shape(), C_);
    detail::check_shape(fn, "grad_output", dy.shape(), x.shape());
    Tensor<T> dx(x.shape());  // [..., C], zero: the kernel accumulates
    ops::rms_norm_backward<T>(x.matrix(), dy.matrix(), affine_ ? weight_.data() : nullptr, eps_,
                              dx.matrix(), affine_ ? grad_weight_.data() : nullptr);
    return dx;
}

template <class T>
void RMSNorm<T>::backward_into(TensorView<const T> x, TensorView<const T> dy, TensorView<T> dx) {
    constexpr const char* fn = "headwise::RMSNorm::backward_into";
    detail::check_last_dim(fn, "input", x.shape(), C_);
    detail::check_shape(fn, "grad_output", dy.shape(), x.shape());
    detail::check_shape(fn, "grad_input", dx.shape(), x.shape());
    ops::rms_norm_backward<T>(x.matrix(), dy.matrix(), affine_ ? weight_.data() : nullptr, eps_,
                              dx.matrix(), affine_ ? grad_weight_.data() : nullptr);
}

}  // namespace headwise

// Compiled once into headwise::compiled (detail/compiled_templates.hpp).
#define HEADWISE_DETAIL_RMS_NORM_TEMPLATES(C, F, T) C(class, RMSNorm<T>)
HEADWISE_COMPILED_TEMPLATES(HEADWISE_DETAIL_RMS_NORM_TEMPLATES);
