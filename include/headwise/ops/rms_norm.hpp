// SPDX-License-Identifier: MIT
// Root-mean-square normalisation over the last axis (Zhang and Sennrich 2019): forward and
// backward kernels.
// ops/: stateless kernels that write into buffers the caller provides (nothing allocated per
// call); tensor_ops/ holds the functions that return new tensors.
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "../tensor.hpp"
#include "detail/rms_norm_row.hpp"

namespace headwise::ops {

/// Y[n, :] = X[n, :] / sqrt(mean(X[n, :]^2) + eps) ⊙ gamma for every row n of X [N, C]
/// (Zhang and Sennrich 2019, Eq. 4, without the bias; torch.nn.RMSNorm, Hugging Face's
/// LlamaRMSNorm). gamma ([C]) may be null (no elementwise affine). The mean is computed in T
/// (see detail::rms_norm_row). Y may alias X.
template <class T>
void rms_norm_forward(ConstMatrixRef<T> X, const T* gamma, double eps, MatrixRef<T> Y);

/// Given X [N, C] and dY [N, C], ADDS dX = r (dXhat - Xhat mean(dXhat ⊙ Xhat)) with
/// dXhat = dY ⊙ gamma, r = 1 / sqrt(mean(X^2) + eps) and Xhat = X r, into dX, and
/// sum_n dY ⊙ Xhat into dgamma (skipped when null). r is recomputed from X: no saved state.
template <class T>
void rms_norm_backward(ConstMatrixRef<T> X, ConstMatrixRef<T> dY, const T* gamma, double eps,
                       MatrixRef<T> dX, T* dgamma);

// ---- definitions ----------------------------------------------------------------------------

template <class T>
void rms_norm_forward(ConstMatrixRef<T> X, const T* gamma, double eps, MatrixRef<T> Y) {
    HEADWISE_STATIC_ASSERT_REAL(T);
    headwise::detail::check_matrix("headwise::ops::rms_norm_forward", "Y", Y, X.rows(), X.cols());
    // X [N, C], gamma [C], Y [N, C]
    const Index N = X.rows(), C = X.cols();
    for (Index n = 0; n < N; ++n) {
        const T* x = X.data() + n * X.outerStride();
        T scale = T(1), r = T(1);
        headwise::detail::rms_norm_row(x, C, eps, scale, r);
        // y = xhat ⊙ gamma, xhat = x / rms(x); every x[c] is read before Y(n, c) is written.
        for (Index c = 0; c < C; ++c) {
            const T xhat = x[c] / scale * r;
            Y(n, c) = gamma ? xhat * gamma[c] : xhat;
        }
    }
}

template <class T>
void rms_norm_backward(ConstMatrixRef<T> X, ConstMatrixRef<T> dY, const T* gamma, double eps,
                       MatrixRef<T> dX, T* dgamma) {
    HEADWISE_STATIC_ASSERT_REAL(T);
    constexpr const char* fn = "headwise::ops::rms_norm_backward";
    headwise::detail::check_matrix(fn, "dY", dY, X.rows(), X.cols());
    headwise::detail::check_matrix(fn, "dX", dX, X.rows(), X.cols());
    // X [N, C], dY [N, C], gamma [C], dX [N, C], dgamma [C]
    const Index N = X.rows(), C = X.cols();
    const T inv_C = T(1) / static_cast<T>(C);
    for (Index n = 0; n < N; ++n) {
        const T* x = X.data() + n * X.outerStride();
        T scale = T(1), r = T(1);
        headwise::detail::rms_norm_row(x, C, eps, scale, r);
        // y = xhat ⊙ gamma: dgamma += dy ⊙ xhat, dxhat = dy ⊙ gamma.
        T sum_dxhat_xhat = T(0);
        for (Index c = 0; c < C; ++c) {
            const T xhat = x[c] / scale * r;
            const T dxhat = gamma ? dY(n, c) * gamma[c] : dY(n, c);
            sum_dxhat_xhat += dxhat * xhat;
            if (dgamma) dgamma[c] += dY(n, c) * xhat;
        }
        // xhat = x r with r = (mean(x^2) + eps)^(-1/2), dr/dx = -r^3 x / C:
        // dx = r dxhat - r^3 x mean(dxhat ⊙ x) = r (dxhat - xhat mean(dxhat ⊙ xhat)).
        const T m = sum_dxhat_xhat * inv_C;
        for (Index c = 0; c < C; ++c) {
            const T xhat = x[c] / scale * r;
            const T dxhat = gamma ? dY(n, c) * gamma[c] : dY(n, c);
            dX(n, c) += (dxhat - xhat * m) * r / scale;
        }
    }
}

}  // namespace headwise::ops
