// SPDX-License-Identifier: MIT
// Dropout as a pure function of a seed: forward and backward regenerate the same keep-mask.
// ops/: stateless kernels that write into buffers the caller provides (nothing allocated per
// call); tensor_ops/ holds the functions that return new tensors.
#pragma once

#include <cstdint>      // std::uint32_t, std::uint64_t
#include <type_traits>  // std::decay_t

#include "../config.hpp"

namespace headwise::ops {

/// Inverted dropout with probability `p` whose keep-mask is a pure function of `seed`, so that
/// backward regenerates forward's mask instead of storing it (one bit per weight would cost
/// B*H*L*S bits per call). A Dropout with p == 0 is the identity.
///
/// The mask is counter-based: whether entry (i, j) of stream `stream` is kept depends on
/// (seed, stream, i, j) alone, not on the order in which entries are visited. So a kernel that
/// walks an [L, S] slice tile by tile (ops/blocked_attention.hpp) drops exactly the entries that
/// one pass over the whole slice (ops/attention.hpp) drops.
struct Dropout {
    double p = 0.0;
    std::uint64_t seed = 0;

    bool active() const noexcept { return p > 0.0; }

    /// Mixes (seed, stream) into a well-spread generator seed (SplitMix64 finaliser, Steele et al.
    /// 2014), so that slice (b, h) of a call gets an independent stream that does not depend on
    /// which thread, or which projection, computes it.
    static std::uint64_t stream_seed(std::uint64_t seed, std::uint64_t stream) noexcept {
        return mix64(seed + 0x9E3779B97F4A7C15ull * (stream + 1));
    }

    /// The key of row `i` of stream `key` (a stream_seed): the i-th output of SplitMix64 seeded
    /// with `key`, itself a counter-based generator (output n = mix64(key + n * golden gamma)).
    static std::uint64_t row_key(std::uint64_t key, Index i) noexcept {
        return mix64(key + 0x9E3779B97F4A7C15ull * (static_cast<std::uint64_t>(i) + 1));
    }

    /// 32 uniform bits for column `j` of the row with key `row`: MurmurHash3's 32-bit finaliser
    /// (Appleby 2008), a bijection with full avalanche, applied to a Weyl sequence in j mixed
    /// with the row key. 32-bit arithmetic, so that a loop over a row vectorises.
    static std::uint32_t column_bits(std::uint64_t row, Index j) noexcept {
        std::uint32_t x =
            static_cast<std::uint32_t>(row) ^
            (static_cast<std::uint32_t>(j) * 0x9E3779B9u + static_cast<std::uint32_t>(row >> 32));
        x ^= x >> 16;
        x *= 0x85EBCA6Bu;
        x ^= x >> 13;
        x *= 0xC2B2AE35u;
        x ^= x >> 16;
        return x;
    }

    /// Entries whose column_bits fall below this are dropped: round(p 2^32), so that
    /// P(drop) = p to within 2^-33.
    std::uint64_t threshold() const noexcept {
        return static_cast<std::uint64_t>(p * 4294967296.0 + 0.5);
    }

    static std::uint64_t mix64(std::uint64_t z) noexcept {
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
};

/// Y = X ⊙ M / (1 - p) with M ~ Bernoulli(1 - p), entry (i, j) of X being entry
/// (row0 + i, col0 + j) of stream `stream` of `dropout`. Y may alias X. A dropped NaN stays NaN
/// (NaN * 0), as in PyTorch. `MatrixIn`, `MatrixOut` are Eigen row-major matrix expressions with
/// direct access.
template <class MatrixIn, class MatrixOut>
void dropout_apply(const Dropout& dropout, std::uint64_t stream, Index row0, Index col0,
                   const MatrixIn& X, MatrixOut&& Y) {
    HEADWISE_ASSERT(X.rows() == Y.rows() && X.cols() == Y.cols());
    using T = typename std::decay_t<MatrixOut>::Scalar;
    const std::uint64_t key = Dropout::stream_seed(dropout.seed, stream);
    const std::uint64_t threshold = dropout.threshold();
    const T scale = static_cast<T>(1.0 / (1.0 - dropout.p));
    for (Index i = 0; i < X.rows(); ++i) {
        const std::uint64_t row = Dropout::row_key(key, row0 + i);
        for (Index j = 0; j < X.cols(); ++j)
            Y(i, j) = X(i, j) * (Dropout::column_bits(row, col0 + j) < threshold ? T(0) : scale);
    }
}

/// dropout_apply on a whole slice: entry (i, j) of X is entry (i, j) of the stream.
template <class MatrixIn, class MatrixOut>
void dropout_apply(const Dropout& dropout, std::uint64_t stream, const MatrixIn& X, MatrixOut&& Y) {
    dropout_apply(dropout, stream, 0, 0, X, Y);
}

}  // namespace headwise::ops
