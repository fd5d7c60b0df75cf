// SPDX-License-Identifier: MIT
// Attention of a few new queries over many cached keys and values (incremental decoding), forward
// only, with no heap temporaries.
// ops/: stateless kernels that write into buffers the caller provides (nothing allocated per
// call); tensor_ops/ holds the functions that return new tensors.
#pragma once

#include <Eigen/Core>

#include <algorithm>  // std::min

#include "../config.hpp"
#include "../error.hpp"
#include "../tensor.hpp"
#include "gemm.hpp"
#include "score_mask.hpp"
#include "softmax.hpp"

namespace headwise::ops {

/// Keys per product in cached_attention_forward. A [R, D] x [D, c] product packs a D x c block of
/// the keys (and a c x Dv block of the values for P V); with c = 128 that block stays within
/// Eigen's stack allocation limit (128 KiB) for head dims up to 128 in double and 256 in float,
/// so no product allocates, whatever the cache length.
inline constexpr Index kCachedKeyChunk = 128;

/// The forward of attention_forward without dropout, for R query rows (R is small: one new token
/// of the G query heads sharing a key/value head, or a short chunk of one head's new tokens)
/// over S keys (Vaswani et al. 2017, Eq. 1):
///   S = scale * Q K^T + bias, masked scores = -inf     [R, S]
///   P = softmax_rows(S)                                [R, S]  (a row with no visible key is 0)
///   O = P V                                            [R, Dv]
/// The products run over the keys in chunks of kCachedKeyChunk (see there). `P` is scratch.
/// The scale multiplies the scores after the product rather than an operand of it, which would
/// make Eigen copy the operand into a temporary.
template <class T>
void cached_attention_forward(ConstMatrixRef<T> Q,  // [R, D]
                              ConstMatrixRef<T> K,  // [S, D]
                              ConstMatrixRef<T> V,  // [S, Dv]
                              const ScoreMask<T>& mask, T scale,
                              MatrixRef<T> P,   // [R, S] scratch: the probabilities
                              MatrixRef<T> O);  // [R, Dv] out

// ------------------------------------------------------------------------------------------------

template <class T>
void cached_attention_forward(ConstMatrixRef<T> Q, ConstMatrixRef<T> K, ConstMatrixRef<T> V,
                              const ScoreMask<T>& mask, T scale, MatrixRef<T> P, MatrixRef<T> O) {
    constexpr const char* fn = "headwise::ops::cached_attention_forward";
    const Index L = Q.rows(), D = Q.cols(), S = K.rows(), Dv = V.cols();
    headwise::detail::check_matrix(fn, "K", K, S, D);
    headwise::detail::check_matrix(fn, "V", V, S, Dv);
    headwise::detail::check_matrix(fn, "P", P, L, S);
    headwise::detail::check_matrix(fn, "O", O, L, Dv);
    headwise::detail::check_score_mask(fn, mask, S);
    // 1. Z = scale * Q K^T, chunk by chunk of keys, into P's storage.
    for (Index j = 0; j < S; j += kCachedKeyChunk) {
        const Index c = std::min(kCachedKeyChunk, S - j);
        gemm<T>(T(1), Q, Op::none, K.middleRows(j, c), Op::transpose, T(0), P.middleCols(j, c));
    }
    P *= scale;
    // 2. bias and masks; 3. P = softmax(Z), row by row.
    apply_score_mask(mask, P);
    softmax_forward<T>(P);
    // 4. O = P V, accumulated over the same chunks.
    O.setZero();
    for (Index j = 0; j < S; j += kCachedKeyChunk) {
        const Index c = std::min(kCachedKeyChunk, S - j);
        gemm<T>(T(1), P.middleCols(j, c), Op::none, V.middleRows(j, c), Op::none, T(1), O);
    }
}

}  // namespace headwise::ops
