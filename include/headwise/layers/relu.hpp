// SPDX-License-Identifier: MIT
// ReLU<T>: torch.nn.ReLU as a parameterless module, forward and backward.
#pragma once

#include "../config.hpp"
#include "../detail/compiled_templates.hpp"
#include "../error.hpp"
#include "../ops/activation.hpp"
#include "../tensor.hpp"
#include "module.hpp"

namespace headwise {

/// y = max(x, 0) elementwise, any shape. Backward takes the forward's input again (the
/// gradient passes where x > 0, as in torch).
template <class T>
class ReLU : public Module<ReLU<T>, T> {
    HEADWISE_STATIC_ASSERT_REAL(T);

public:
    static constexpr const char* kName = "headwise::ReLU";

    Tensor<T> forward(TensorView<const T> x) const {
        Tensor<T> y = Tensor<T>::uninitialized(x.shape());  // [...]
        ops::relu_forward(x.data(), x.numel(), y.data());
        return y;
    }
    /// dx = dy ⊙ [x > 0].
    Tensor<T> backward(TensorView<const T> x, TensorView<const T> dy) const {
        detail::check_shape("headwise::ReLU::backward", "grad_output", dy.shape(), x.shape());
        Tensor<T> dx(x.shape());  // [...], zero: the kernel accumulates
        ops::relu_backward(x.data(), dy.data(), x.numel(), dx.data());
        return dx;
    }

    /// No parameters (the module contract).
    template <class D>
    void declare(D&) {}
};

}  // namespace headwise

// Compiled once into headwise::compiled (detail/compiled_templates.hpp).
#define HEADWISE_DETAIL_RELU_TEMPLATES(C, F, T) C(class, ReLU<T>)
HEADWISE_COMPILED_TEMPLATES(HEADWISE_DETAIL_RELU_TEMPLATES);
