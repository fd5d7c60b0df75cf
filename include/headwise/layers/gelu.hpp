// SPDX-License-Identifier: MIT
// GELU<T>: torch.nn.GELU (exact erf form, or the tanh approximation) as a parameterless module.
#pragma once

#include "../config.hpp"
#include "../detail/compiled_templates.hpp"
#include "../error.hpp"
#include "../ops/activation.hpp"
#include "../tensor.hpp"
#include "module.hpp"

namespace headwise {

using ops::GeluApproximation;

/// y = x Φ(x) elementwise (Φ the standard normal CDF), or with
/// GeluApproximation::tanh torch's approximate="tanh" formula. Any shape. Backward takes the
/// forward's input again.
template <class T>
class GELU : public Module<GELU<T>, T> {
    HEADWISE_STATIC_ASSERT_REAL(T);

public:
    static constexpr const char* kName = "headwise::GELU";

    explicit GELU(GeluApproximation approximate = GeluApproximation::none) noexcept
        : approximate_(approximate) {}

    Tensor<T> forward(TensorView<const T> x) const {
        Tensor<T> y = Tensor<T>::uninitialized(x.shape());  // [...]
        ops::gelu_forward(x.data(), x.numel(), approximate_, y.data());
        return y;
    }
    /// dx = dy ⊙ GELU'(x).
    Tensor<T> backward(TensorView<const T> x, TensorView<const T> dy) const {
        detail::check_shape("headwise::GELU::backward", "grad_output", dy.shape(), x.shape());
        Tensor<T> dx(x.shape());  // [...], zero: the kernel accumulates
        ops::gelu_backward(x.data(), dy.data(), x.numel(), approximate_, dx.data());
        return dx;
    }

    GeluApproximation approximate() const noexcept { return approximate_; }

    /// No parameters (the module contract).
    template <class D>
    void declare(D&) {}

private:
    GeluApproximation approximate_;
};

}  // namespace headwise

// Compiled once into headwise::compiled (detail/compiled_templates.hpp).
#define HEADWISE_DETAIL_GELU_TEMPLATES(C, F, T) C(class, GELU<T>)
HEADWISE_COMPILED_TEMPLATES(HEADWISE_DETAIL_GELU_TEMPLATES);
