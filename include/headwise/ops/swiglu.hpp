// SPDX-License-Identifier: MIT
// The SwiGLU gate h = SiLU(g) ⊙ u (Shazeer 2020), forward and backward, elementwise.
// ops/: stateless kernels that write into buffers the caller provides (nothing allocated per
// call); tensor_ops/ holds the functions that return new tensors.
#pragma once

#include "../config.hpp"
#include "activation.hpp"

namespace headwise::ops {

/// h[i] = SiLU(g[i]) u[i] over n elements: the gated hidden layer of
/// FFN_SwiGLU(x) = (Swish_1(x W) ⊙ x V) W_2 (Shazeer 2020, Eq. 6), with g = x W the gate and
/// u = x V the value; Llama's MLP computes silu(gate_proj(x)) * up_proj(x). Evaluated in double
/// (SiLU as ops::silu_forward: finite for finite g, 0 for g = -inf). h may alias g or u.
template <class T>
void swiglu_forward(const T* g, const T* u, Index n, T* h);

/// Given g, u and dh (n elements each), ADDS dg[i] += dh[i] u[i] SiLU'(g[i]) and
/// du[i] += dh[i] SiLU(g[i]). dg and du must not alias the inputs.
template <class T>
void swiglu_backward(const T* g, const T* u, const T* dh, Index n, T* dg, T* du);

// ---- definitions ----------------------------------------------------------------------------

template <class T>
void swiglu_forward(const T* g, const T* u, Index n, T* h) {
    HEADWISE_STATIC_ASSERT_REAL(T);
    for (Index i = 0; i < n; ++i)
        h[i] = static_cast<T>(headwise::detail::silu(static_cast<double>(g[i])) *
                              static_cast<double>(u[i]));
}

template <class T>
void swiglu_backward(const T* g, const T* u, const T* dh, Index n, T* dg, T* du) {
    HEADWISE_STATIC_ASSERT_REAL(T);
    for (Index i = 0; i < n; ++i) {
        const double gi = static_cast<double>(g[i]), d = static_cast<double>(dh[i]);
        // h = SiLU(g) u: dh/du = SiLU(g), dh/dg = u SiLU'(g).
        du[i] += static_cast<T>(d * headwise::detail::silu(gi));
        dg[i] +=
            static_cast<T>(d * static_cast<double>(u[i]) * headwise::detail::silu_derivative(gi));
    }
}

}  // namespace headwise::ops
