// SPDX-License-Identifier: MIT
// Layer normalisation over the last axis (Ba et al. 2016): forward and backward kernels.
// ops/: stateless kernels that write into buffers the caller provides (nothing allocated per
// call); tensor_ops/ holds the functions that return new tensors.
#pragma once

#include <cmath>  // std::sqrt

#include "../config.hpp"
#include "../error.hpp"
#include "../tensor.hpp"

namespace headwise::detail {

/// Mean and 1 / sqrt(var + eps) of one row of length C (two passes: no cancellation).
template <class T>
void layer_norm_moments(const T* x, Index C, double eps, double& mean, double& rstd) {
    double sum = 0.0;
    for (Index c = 0; c < C; ++c) sum += static_cast<double>(x[c]);
    mean = sum / static_cast<double>(C);
    double ss = 0.0;
    for (Index c = 0; c < C; ++c) {
        const double d = static_cast<double>(x[c]) - mean;
        ss += d * d;
    }
    rstd = 1.0 / std::sqrt(ss / static_cast<double>(C) + eps);
}

}  // namespace headwise::detail

namespace headwise::ops {

/// Y[n, :] = (X[n, :] - mean) * rstd ⊙ gamma + beta for every row n of X [N, C], where mean and
/// var are the row's mean and biased variance and rstd = 1 / sqrt(var + eps). gamma and beta
/// ([C]) may be null (no elementwise affine). Sums run in double, so float rows of any length
/// keep float's precision. Y may alias X.
template <class T>
void layer_norm_forward(ConstMatrixRef<T> X, const T* gamma, const T* beta, double eps,
                        MatrixRef<T> Y);

/// Given X [N, C] and dY [N, C], ADDS dX = rstd (dXhat - mean(dXhat) - Xhat mean(dXhat ⊙ Xhat))
/// with dXhat = dY ⊙ gamma into dX, and sum_n dY ⊙ Xhat into dgamma, sum_n dY into dbeta (each
/// skipped when null). Mean and rstd are recomputed from X: 2 C flops per row, no saved state.
template <class T>
void layer_norm_backward(ConstMatrixRef<T> X, ConstMatrixRef<T> dY, const T* gamma, double eps,
                         MatrixRef<T> dX, T* dgamma, T* dbeta);

// ---- definitions ----------------------------------------------------------------------------

template <class T>
void layer_norm_forward(ConstMatrixRef<T> X, const T* gamma, const T* beta, double eps,
                        MatrixRef<T> Y) {
    headwise::detail::check_matrix("headwise::ops::layer_norm_forward", "Y", Y, X.rows(), X.cols());
    const Index N = X.rows(), C = X.cols();
    for (Index n = 0; n < N; ++n) {
        double mean = 0.0, rstd = 0.0;
        headwise::detail::layer_norm_moments(X.data() + n * X.outerStride(), C, eps, mean, rstd);
        for (Index c = 0; c < C; ++c) {
            const double xhat = (static_cast<double>(X(n, c)) - mean) * rstd;
            double y = xhat;
            if (gamma) y *= static_cast<double>(gamma[c]);
            if (beta) y += static_cast<double>(beta[c]);
            Y(n, c) = static_cast<T>(y);
        }
    }
}

template <class T>
void layer_norm_backward(ConstMatrixRef<T> X, ConstMatrixRef<T> dY, const T* gamma, double eps,
                         MatrixRef<T> dX, T* dgamma, T* dbeta) {
    constexpr const char* fn = "headwise::ops::layer_norm_backward";
    headwise::detail::check_matrix(fn, "dY", dY, X.rows(), X.cols());
    headwise::detail::check_matrix(fn, "dX", dX, X.rows(), X.cols());
    const Index N = X.rows(), C = X.cols();
    const double inv_C = 1.0 / static_cast<double>(C);
    for (Index n = 0; n < N; ++n) {
        double mean = 0.0, rstd = 0.0;
        headwise::detail::layer_norm_moments(X.data() + n * X.outerStride(), C, eps, mean, rstd);
        // y = xhat ⊙ gamma + beta: dgamma += dy ⊙ xhat, dbeta += dy, dxhat = dy ⊙ gamma.
        double sum_dxhat = 0.0, sum_dxhat_xhat = 0.0;
        for (Index c = 0; c < C; ++c) {
            const double xhat = (static_cast<double>(X(n, c)) - mean) * rstd;
            const double dy = static_cast<double>(dY(n, c));
            const double dxhat = gamma ? dy * static_cast<double>(gamma[c]) : dy;
            sum_dxhat += dxhat;
            sum_dxhat_xhat += dxhat * xhat;
            if (dgamma) dgamma[c] += static_cast<T>(dy * xhat);
            if (dbeta) dbeta[c] += static_cast<T>(dy);
        }
        // xhat = (x - mean) rstd, through mean and var: the row-centred projection of dxhat.
        const double m1 = sum_dxhat * inv_C, m2 = sum_dxhat_xhat * inv_C;
        for (Index c = 0; c < C; ++c) {
            const double xhat = (static_cast<double>(X(n, c)) - mean) * rstd;
            const double dy = static_cast<double>(dY(n, c));
            const double dxhat = gamma ? dy * static_cast<double>(gamma[c]) : dy;
            dX(n, c) += static_cast<T>(rstd * (dxhat - m1 - xhat * m2));
        }
    }
}

}  // namespace headwise::ops
