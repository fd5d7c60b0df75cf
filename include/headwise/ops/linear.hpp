// SPDX-License-Identifier: MIT
// Linear kernels Y = X W^T + b, forward and backward, on caller-provided row-major matrices.
// ops/: stateless kernels that write into buffers the caller provides (nothing allocated per
// call); tensor_ops/ holds the functions that return new tensors.
#pragma once

#include <Eigen/Core>

#include <algorithm>  // std::max

#include "../config.hpp"
#include "../detail/parallel.hpp"
#include "../error.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"
#include "gemm.hpp"

// Conventions of these kernels (llm.c style):
//  - Every matrix is a row-major Eigen::Ref (ConstMatrixRef / MatrixRef from tensor.hpp), so a
//    whole tensor (x.matrix()) or a strided column block (x.column_block(h * D, D)) goes in
//    without a copy. T is not deduced from a Map: call as linear_forward<T>(...).
//  - Nothing here allocates. The forward output Y is overwritten.
//  - Gradients ACCUMULATE: dX, dW and db receive +=, never =. The caller zeroes them once before
//    the first backward, so a weight used several times (or an input feeding several branches)
//    sums its gradient contributions without extra buffers.
//  - Every product goes through ops::gemm (gemm.hpp), so the backend (Eigen or a CBLAS) and
//    the threading rules are those of gemm. Outputs must not overlap the inputs.
//  - Shapes are checked in every build; a mismatch throws shape_error naming the argument.
//
// The backward pass is three independent kernels, so a caller computes only the gradients it
// needs (no dX for the first layer, no db without bias); linear_backward runs all of them.

namespace headwise::ops {

/// Y[N, out] = X[N, in] W[out, in]^T + b[out]; b may be nullptr (no bias).
template <class T>
void linear_forward(ConstMatrixRef<T> X, ConstMatrixRef<T> W, const T* b, MatrixRef<T> Y);

/// dX[N, in] += dY[N, out] W[out, in]
template <class T>
void linear_backward_input(ConstMatrixRef<T> dY, ConstMatrixRef<T> W, MatrixRef<T> dX);

/// dW[out, in] += dY[N, out]^T X[N, in]
template <class T>
void linear_backward_weight(ConstMatrixRef<T> dY, ConstMatrixRef<T> X, MatrixRef<T> dW);

/// db[out] += sum over n of dY[n, :]
template <class T>
void linear_backward_bias(ConstMatrixRef<T> dY, T* db);

/// All three gradients of linear_forward: dX += dY W, dW += dY^T X, and db += sum_n dY unless
/// db is nullptr.
template <class T>
void linear_backward(ConstMatrixRef<T> X, ConstMatrixRef<T> W, ConstMatrixRef<T> dY,
                     MatrixRef<T> dX, MatrixRef<T> dW, T* db);

// ---- definitions ----------------------------------------------------------------------------

template <class T>
void linear_forward(ConstMatrixRef<T> X, ConstMatrixRef<T> W, const T* b, MatrixRef<T> Y) {
    HEADWISE_STATIC_ASSERT_REAL(T);
    constexpr const char* fn = "headwise::ops::linear_forward";
    // X [N, in], W [out, in], b [out], Y [N, out]
    const Index N = X.rows(), in = X.cols(), out = W.rows();
    detail::check_shape(fn, "W", Shape{W.rows(), W.cols()}, Shape{out, in});
    detail::check_shape(fn, "Y", Shape{Y.rows(), Y.cols()}, Shape{N, out});

    // y_n = W x_n + b. The bias initialises Y and the GEMM accumulates onto it (beta = 1), so
    // the bias costs no pass over Y of its own: without it the GEMM would zero-fill Y instead.
    if (b != nullptr) {
        const Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>> bias(b, out);  // [out]
        detail::parallel_blocks(
            N, std::max<Index>(1, detail::kParallelGrain / std::max<Index>(out, 1)),
            [&](Index first, Index rows) { Y.middleRows(first, rows).rowwise() = bias; });
        gemm<T>(T(1), X, Op::none, W, Op::transpose, T(1), Y);
    } else {
        gemm<T>(T(1), X, Op::none, W, Op::transpose, T(0), Y);
    }
}

template <class T>
void linear_backward_input(ConstMatrixRef<T> dY, ConstMatrixRef<T> W, MatrixRef<T> dX) {
    HEADWISE_STATIC_ASSERT_REAL(T);
    constexpr const char* fn = "headwise::ops::linear_backward_input";
    // dY [N, out], W [out, in], dX [N, in]
    const Index N = dY.rows(), out = W.rows(), in = W.cols();
    detail::check_shape(fn, "dY", Shape{dY.rows(), dY.cols()}, Shape{N, out});
    detail::check_shape(fn, "dX", Shape{dX.rows(), dX.cols()}, Shape{N, in});

    // Y = X W^T  =>  dX = dY W
    gemm<T>(T(1), dY, Op::none, W, Op::none, T(1), dX);
}

template <class T>
void linear_backward_weight(ConstMatrixRef<T> dY, ConstMatrixRef<T> X, MatrixRef<T> dW) {
    HEADWISE_STATIC_ASSERT_REAL(T);
    constexpr const char* fn = "headwise::ops::linear_backward_weight";
    // dY [N, out], X [N, in], dW [out, in]
    const Index N = dY.rows(), out = dY.cols(), in = X.cols();
    detail::check_shape(fn, "X", Shape{X.rows(), X.cols()}, Shape{N, in});
    detail::check_shape(fn, "dW", Shape{dW.rows(), dW.cols()}, Shape{out, in});

    // Y = X W^T  =>  dW = dY^T X (a sum over the N rows)
    gemm<T>(T(1), dY, Op::transpose, X, Op::none, T(1), dW);
}

template <class T>
void linear_backward_bias(ConstMatrixRef<T> dY, T* db) {
    HEADWISE_STATIC_ASSERT_REAL(T);
    // dY [N, out], db [out]
    HEADWISE_ASSERT(db != nullptr || dY.cols() == 0);
    Eigen::Map<Eigen::Matrix<T, 1, Eigen::Dynamic>> db_row(db, dY.cols());  // [out]

    // Y = ... + b (broadcast over rows)  =>  db = sum_n dY[n, :]; row by row, each row contiguous.
    // With OpenMP, each thread sums its own columns.
    const Index N = dY.rows();
    detail::parallel_blocks(dY.cols(),
                            std::max<Index>(16, detail::kParallelGrain / std::max<Index>(N, 1)),
                            [&](Index first, Index cols) {
                                for (Index n = 0; n < N; ++n)
                                    db_row.segment(first, cols) += dY.row(n).segment(first, cols);
                            });
}

template <class T>
void linear_backward(ConstMatrixRef<T> X, ConstMatrixRef<T> W, ConstMatrixRef<T> dY,
                     MatrixRef<T> dX, MatrixRef<T> dW, T* db) {
    HEADWISE_STATIC_ASSERT_REAL(T);
    constexpr const char* fn = "headwise::ops::linear_backward";
    // X [N, in], W [out, in], dY [N, out], dX [N, in], dW [out, in], db [out]
    const Index N = X.rows(), in = X.cols(), out = W.rows();
    // Every shape is checked before any gradient is touched.
    detail::check_shape(fn, "W", Shape{W.rows(), W.cols()}, Shape{out, in});
    detail::check_shape(fn, "dY", Shape{dY.rows(), dY.cols()}, Shape{N, out});
    detail::check_shape(fn, "dX", Shape{dX.rows(), dX.cols()}, Shape{N, in});
    detail::check_shape(fn, "dW", Shape{dW.rows(), dW.cols()}, Shape{out, in});

    // Forward's steps in reverse: "gemm(X, W^T) onto Y", then "Y.rowwise() = b".
    linear_backward_input<T>(dY, W, dX);
    linear_backward_weight<T>(dY, X, dW);
    if (db != nullptr) linear_backward_bias<T>(dY, db);
}

}  // namespace headwise::ops
