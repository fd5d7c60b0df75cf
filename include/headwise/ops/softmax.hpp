// SPDX-License-Identifier: MIT
// Row softmax with -infinity as the mask value, forward and backward, on caller-provided matrices.
// ops/: stateless kernels that write into buffers the caller provides (nothing allocated per
// call); tensor_ops/ holds the functions that return new tensors.
#pragma once

#include <Eigen/Core>

#include <cmath>   // std::isnan
#include <limits>  // std::numeric_limits

#include "../config.hpp"
#include "../error.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"
#include "detail/softmax_rows.hpp"

// Conventions:
//  - Rows are independent: P[i, :] = softmax(S[i, :]). Matrices are row-major Eigen::Refs
//    (ConstMatrixRef / MatrixRef from tensor.hpp); call as softmax_forward<T>(...).
//  - An entry equal to -infinity is masked: it gets probability exactly 0. Masks (boolean or
//    additive) become -infinity in S before the softmax; there is no magic large negative value.
//  - A row whose entries are all -infinity (a query that may attend to nothing) gives an all-zero
//    row, not NaN, and its gradient is zero.
//  - NaN in, NaN out: a row holding a NaN (or +infinity, whose exp(s - max) is exp(inf - inf))
//    becomes all NaN, as in PyTorch; it is never turned into a finite row.
//  - Both kernels WRITE their output (=), unlike the linear kernels, which accumulate: the softmax
//    input gradient is an intermediate of attention, never a parameter gradient, and writing lets
//    it replace dP in place (dS and dP the same buffer) instead of needing a zeroed [L, S] buffer.
//  - Output and input may be the very same matrix (in place); they must not partially overlap.

namespace headwise::ops {

/// P[R, C] = softmax of each row of S[R, C].
template <class T>
void softmax_forward(ConstMatrixRef<T> S, MatrixRef<T> P);

/// In place: S[R, C] becomes softmax of each of its rows.
template <class T>
void softmax_forward(MatrixRef<T> S);

/// dS[i, j] = P[i, j] (dP[i, j] - sum_k dP[i, k] P[i, k]) for P[R, C], forward's output, and
/// dP[R, C], the gradient of the loss with respect to P. Written, not accumulated; dS may be the
/// same matrix as dP.
template <class T>
void softmax_backward(ConstMatrixRef<T> P, ConstMatrixRef<T> dP, MatrixRef<T> dS);

// ---- definitions ----------------------------------------------------------------------------

template <class T>
void softmax_forward(ConstMatrixRef<T> S, MatrixRef<T> P) {
    HEADWISE_STATIC_ASSERT_REAL(T);
    // S [R, C], P [R, C]
    detail::check_shape("headwise::ops::softmax_forward", "P", Shape{P.rows(), P.cols()},
                        Shape{S.rows(), S.cols()});
    const Index R = S.rows(), C = S.cols();
    if (C == 0) return;
    constexpr T kMasked = -std::numeric_limits<T>::infinity();

    for (Index i = 0; i < R; ++i) {
        const T* s = S.data() + i * S.outerStride();  // row i, contiguous
        T* p = P.data() + i * P.outerStride();
        // Softmax is invariant to shifting a row by a constant, so subtract the row max m:
        // exp(s - m) <= 1 cannot overflow (exp(89) already overflows float), and the largest
        // entry contributes exp(0) = 1, so the denominator is >= 1 and never underflows to 0.
        // row_max is NaN when any score is: Eigen's default maxCoeff() skips a NaN unless it
        // comes first, and the row would then come out finite, hiding it.
        const T m = detail::row_max(s, C);
        if (std::isnan(m) || m == -kMasked) {  // NaN in, NaN out (torch: the whole row NaN)
            P.row(i).setConstant(std::numeric_limits<T>::quiet_NaN());
            continue;
        }
        if (m == kMasked) {  // every key masked: attend to nothing
            P.row(i).setZero();
            continue;
        }
        // exp(s - m), exactly 0 for masked entries (-inf) and wherever s - m is below the
        // smallest normal exponent (softmax_rows.hpp), summed in the same pass.
        const T sum = detail::exp_shifted_sum(s, m, p, C);  // >= 1
        P.row(i) *= T(1) / sum;
    }
}

template <class T>
void softmax_forward(MatrixRef<T> S) {
    softmax_forward<T>(ConstMatrixRef<T>(S), S);
}

template <class T>
void softmax_backward(ConstMatrixRef<T> P, ConstMatrixRef<T> dP, MatrixRef<T> dS) {
    HEADWISE_STATIC_ASSERT_REAL(T);
    constexpr const char* fn = "headwise::ops::softmax_backward";
    // P [R, C], dP [R, C], dS [R, C]
    const Shape shape{P.rows(), P.cols()};
    detail::check_shape(fn, "dP", Shape{dP.rows(), dP.cols()}, shape);
    detail::check_shape(fn, "dS", Shape{dS.rows(), dS.cols()}, shape);

    // Differentiates "P.row(i) *= 1 / sum" and "P.row(i) = exp(S.row(i) - m)" together: the
    // Jacobian of p = softmax(s) is diag(p) - p p^T, so ds = p ∘ dp - p (p · dp). The max shift
    // m has zero gradient (shift invariance). Masked entries and fully masked rows have p = 0
    // and therefore get ds = 0.
    for (Index i = 0; i < P.rows(); ++i) {
        const T dot = dP.row(i).dot(P.row(i));  // sum_k dP[i, k] P[i, k]
        dS.row(i) = P.row(i).array() * (dP.row(i).array() - dot);
    }
}

}  // namespace headwise::ops
