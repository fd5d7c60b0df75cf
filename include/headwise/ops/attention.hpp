// SPDX-License-Identifier: MIT
// Scaled dot-product attention for one (batch, head) slice: forward and backward kernels.
// ops/: stateless kernels that write into buffers the caller provides (nothing allocated per
// call); tensor_ops/ holds the functions that return new tensors.
#pragma once

#include <Eigen/Core>

#include <cstdint>  // std::uint64_t

#include "../config.hpp"
#include "../error.hpp"
#include "../tensor.hpp"
#include "dropout.hpp"
#include "gemm.hpp"
#include "score_mask.hpp"
#include "softmax.hpp"

namespace headwise::ops {

/// Forward of one slice (Vaswani et al. 2017, Eq. 1) of L queries over S keys, with Z the scores:
///   Z = scale * Q K^T + bias, masked scores = -inf     [L, S]
///   P = softmax_rows(Z)                                [L, S]  (a row with no visible key is 0)
///   A = dropout(P)                                     [L, S]  (A is P when dropout is off)
///   O = A V                                            [L, Dv]
/// Writes P (kept for backward and for the returned weights), A when dropout is active (into
/// `A`, which may be any scratch when it is not) and O. Q, K, V may be strided column blocks.
/// Every shape is checked first, in every build: a mismatch throws shape_error naming the
/// argument (std::invalid_argument for a mask that cannot cover S keys).
template <class T>
void attention_forward(ConstMatrixRef<T> Q,  // [L, D]
                       ConstMatrixRef<T> K,  // [S, D]
                       ConstMatrixRef<T> V,  // [S, Dv]
                       const ScoreMask<T>& mask, T scale, const Dropout& dropout,
                       std::uint64_t dropout_stream,
                       MatrixRef<T> P,   // [L, S] out
                       MatrixRef<T> A,   // [L, S] out when dropout.active(), else unused
                       MatrixRef<T> O);  // [L, Dv] out

/// Backward of one slice, given forward's P. Walks forward's steps in reverse; every gradient
/// is *added* to (dQ, dK, dV are not cleared). `scratch` is an [L, S] buffer.
///   dV += A^T dO                       from O = A V
///   dA  = dO V^T                       from O = A V
///   dP  = dropout(dA)  (same mask)     from A = dropout(P)
///   dZ  = P ⊙ (dP - rowsum(dP ⊙ P))    from P = softmax(Z)
///   dQ += scale dZ K,  dK += scale dZ^T Q   from Z = scale Q K^T + bias
template <class T>
void attention_backward(ConstMatrixRef<T> Q,  // [L, D]
                        ConstMatrixRef<T> K,  // [S, D]
                        ConstMatrixRef<T> V,  // [S, Dv]
                        ConstMatrixRef<T> P,  // [L, S] forward's softmax output
                        T scale, const Dropout& dropout, std::uint64_t dropout_stream,
                        ConstMatrixRef<T> dO,  // [L, Dv]
                        MatrixRef<T> scratch,  // [L, S]
                        MatrixRef<T> dQ,       // [L, D]  +=
                        MatrixRef<T> dK,       // [S, D]  +=
                        MatrixRef<T> dV);      // [S, Dv] +=

// ------------------------------------------------------------------------------------------------

template <class T>
void attention_forward(ConstMatrixRef<T> Q, ConstMatrixRef<T> K, ConstMatrixRef<T> V,
                       const ScoreMask<T>& mask, T scale, const Dropout& dropout,
                       std::uint64_t dropout_stream, MatrixRef<T> P, MatrixRef<T> A,
                       MatrixRef<T> O) {
    constexpr const char* fn = "headwise::ops::attention_forward";
    const Index L = Q.rows(), D = Q.cols(), S = K.rows(), Dv = V.cols();
    headwise::detail::check_matrix(fn, "K", K, S, D);
    headwise::detail::check_matrix(fn, "V", V, S, Dv);
    headwise::detail::check_matrix(fn, "P", P, L, S);
    if (dropout.active()) headwise::detail::check_matrix(fn, "A", A, L, S);
    headwise::detail::check_matrix(fn, "O", O, L, Dv);
    headwise::detail::check_score_mask(fn, mask, S);
    // 1. Z = scale * Q K^T, into P's storage.
    gemm<T>(scale, Q, Op::none, K, Op::transpose, T(0), P);
    // 2. bias and masks.
    apply_score_mask(mask, P);
    // 3. P = softmax(Z), row by row.
    softmax_forward<T>(P, P);
    // 4. A = dropout(P); 5. O = A V.
    if (dropout.active()) {
        dropout_apply(dropout, dropout_stream, P, A);
        gemm<T>(T(1), A, Op::none, V, Op::none, T(0), O);
    } else {
        gemm<T>(T(1), P, Op::none, V, Op::none, T(0), O);
    }
}

template <class T>
void attention_backward(ConstMatrixRef<T> Q, ConstMatrixRef<T> K, ConstMatrixRef<T> V,
                        ConstMatrixRef<T> P, T scale, const Dropout& dropout,
                        std::uint64_t dropout_stream, ConstMatrixRef<T> dO, MatrixRef<T> scratch,
                        MatrixRef<T> dQ, MatrixRef<T> dK, MatrixRef<T> dV) {
    constexpr const char* fn = "headwise::ops::attention_backward";
    const Index L = Q.rows(), D = Q.cols(), S = K.rows(), Dv = V.cols();
    headwise::detail::check_matrix(fn, "K", K, S, D);
    headwise::detail::check_matrix(fn, "V", V, S, Dv);
    headwise::detail::check_matrix(fn, "P", P, L, S);
    headwise::detail::check_matrix(fn, "dO", dO, L, Dv);
    headwise::detail::check_matrix(fn, "scratch", scratch, L, S);
    headwise::detail::check_matrix(fn, "dQ", dQ, L, D);
    headwise::detail::check_matrix(fn, "dK", dK, S, D);
    headwise::detail::check_matrix(fn, "dV", dV, S, Dv);
    // 5. O = A V  ->  dV += A^T dO, dA = dO V^T.
    if (dropout.active()) {
        dropout_apply(dropout, dropout_stream, P, scratch);  // A, regenerated from the seed
        gemm<T>(T(1), scratch, Op::transpose, dO, Op::none, T(1), dV);
    } else {
        gemm<T>(T(1), P, Op::transpose, dO, Op::none, T(1), dV);
    }
    gemm<T>(T(1), dO, Op::none, V, Op::transpose, T(0), scratch);  // dA  [L, S]
    // 4. A = dropout(P)  ->  dP = dA ⊙ M / (1 - p), the same mask.
    if (dropout.active()) dropout_apply(dropout, dropout_stream, scratch, scratch);
    // 3. P = softmax(Z)  ->  dZ = P ⊙ (dP - rowsum(dP ⊙ P)); masked and fully masked entries
    //    have P = 0 and so get no gradient.
    softmax_backward<T>(P, scratch, scratch);
    // 2. the additive bias and the masks pass gradients through unchanged or not at all.
    // 1. Z = scale Q K^T  ->  dQ += scale dZ K,  dK += scale dZ^T Q.
    gemm<T>(scale, scratch, Op::none, K, Op::none, T(1), dQ);
    gemm<T>(scale, scratch, Op::transpose, Q, Op::none, T(1), dK);
}

}  // namespace headwise::ops
