// SPDX-License-Identifier: MIT
// LayerScale<T>: a learnt per-channel scale y = x ⊙ gamma over the last axis (CaiT, DINOv2).
#pragma once

#include <algorithm>  // std::fill_n
#include <cmath>      // std::isfinite
#include <string>     // std::to_string

#include "../config.hpp"
#include "../detail/compiled_templates.hpp"
#include "../error.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"
#include "module.hpp"

namespace headwise {

/// LayerScale (Touvron et al. 2021, "Going deeper with image transformers"): every row
/// [..., C] of the input multiplied elementwise by a learnt vector gamma [C], initialised to
/// `init_values` (a small constant, e.g. 1e-5, so that each residual branch starts near zero).
/// Parameter name "gamma", as timm's LayerScale. Stateless between calls: backward takes the
/// forward's input again.
template <class T>
class LayerScale : public Module<LayerScale<T>, T> {
    HEADWISE_STATIC_ASSERT_REAL(T);

public:
    static constexpr const char* kName = "headwise::LayerScale";

    /// Throws std::invalid_argument unless dim > 0 and init_values is finite.
    explicit LayerScale(Index dim, double init_values = 1e-5)
        : C_(checked_dim(dim)), gamma_(Shape{C_}), grad_gamma_(Shape{C_}) {
        if (!std::isfinite(init_values))
            throw_invalid_argument("headwise::LayerScale::LayerScale", "init_values",
                                   "must be finite", std::to_string(init_values));
        std::fill_n(gamma_.data(), C_, static_cast<T>(init_values));
    }

    /// y[..., c] = x[..., c] gamma[c].
    Tensor<T> forward(TensorView<const T> x) const {
        detail::check_last_dim("headwise::LayerScale::forward", "input", x.shape(), C_);
        Tensor<T> y = Tensor<T>::uninitialized(x.shape());
        const Index rows = x.numel() / C_;
        for (Index r = 0; r < rows; ++r)
            for (Index c = 0; c < C_; ++c)
                y.data()[r * C_ + c] = x.data()[r * C_ + c] * gamma_.data()[c];
        return y;
    }

    /// Given the forward's input x [..., C] and dy [..., C]: returns dx = dy ⊙ gamma and ADDS
    /// sum over rows of dy ⊙ x to grad_gamma().
    Tensor<T> backward(TensorView<const T> x, TensorView<const T> dy) {
        constexpr const char* fn = "headwise::LayerScale::backward";
        detail::check_last_dim(fn, "input", x.shape(), C_);
        detail::check_shape(fn, "grad_output", dy.shape(), x.shape());
        Tensor<T> dx = Tensor<T>::uninitialized(x.shape());
        const Index rows = x.numel() / C_;
        const T* xs = x.data();
        const T* dys = dy.data();
        T* dxs = dx.data();
        T* dg = grad_gamma_.data();
        const T* g = gamma_.data();
        for (Index r = 0; r < rows; ++r)
            for (Index c = 0; c < C_; ++c) {
                const Index i = r * C_ + c;
                dxs[i] = dys[i] * g[c];
                dg[c] += dys[i] * xs[i];
            }
        return dx;
    }

    Index dim() const noexcept { return C_; }
    TensorView<T> gamma() noexcept { return gamma_.view(); }
    TensorView<const T> gamma() const noexcept { return gamma_.view(); }
    TensorView<T> grad_gamma() noexcept { return grad_gamma_.view(); }
    TensorView<const T> grad_gamma() const noexcept { return grad_gamma_.view(); }

    /// "gamma" [C] (the module contract).
    template <class D>
    void declare(D& d) {
        d.parameter("gamma", gamma_, grad_gamma_);
    }

private:
    static Index checked_dim(Index dim) {
        if (dim <= 0)
            throw_invalid_argument("headwise::LayerScale::LayerScale", "dim", "must be positive",
                                   std::to_string(dim));
        return dim;
    }

    Index C_;
    Tensor<T> gamma_;       // [C]
    Tensor<T> grad_gamma_;  // [C]
};

}  // namespace headwise

// Compiled once into headwise::compiled (detail/compiled_templates.hpp).
#define HEADWISE_DETAIL_LAYER_SCALE_TEMPLATES(C, F, T) C(class, LayerScale<T>)
HEADWISE_COMPILED_TEMPLATES(HEADWISE_DETAIL_LAYER_SCALE_TEMPLATES);
