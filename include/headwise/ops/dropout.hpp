// SPDX-License-Identifier: MIT
// Dropout as a pure function of a seed: forward and backward regenerate the same keep-mask.
#pragma once

#include <cstdint>  // std::uint64_t

#include "../config.hpp"
#include "../random.hpp"

namespace headwise::ops {

/// Inverted dropout with probability `p` whose keep-mask is a pure function of `seed`, so that
/// backward regenerates forward's mask instead of storing it (one bit per weight would cost
/// B*H*L*S bits per call). A Dropout with p == 0 is the identity.
struct Dropout {
    double p = 0.0;
    std::uint64_t seed = 0;

    bool active() const noexcept { return p > 0.0; }

    /// Mixes (seed, stream) into a well-spread generator seed (SplitMix64 finaliser, Steele et al.
    /// 2014), so that slice (b, h) of a call gets an independent stream that does not depend on
    /// which thread, or which projection, computes it.
    static std::uint64_t stream_seed(std::uint64_t seed, std::uint64_t stream) noexcept {
        std::uint64_t z = seed + 0x9E3779B97F4A7C15ull * (stream + 1);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
};

/// Y = X ⊙ M / (1 - p) with M ~ Bernoulli(1 - p) drawn row-major from stream `stream` of
/// `dropout`. Y may alias X. A dropped NaN stays NaN (NaN * 0), as in PyTorch. `Matrix` is any
/// Eigen row-major matrix expression with direct access.
template <class MatrixIn, class MatrixOut>
void dropout_apply(const Dropout& dropout, std::uint64_t stream, const MatrixIn& X, MatrixOut&& Y) {
    HEADWISE_ASSERT(X.rows() == Y.rows() && X.cols() == Y.cols());
    using T = typename std::decay_t<MatrixOut>::Scalar;
    Generator rng(Dropout::stream_seed(dropout.seed, stream));
    const T scale = static_cast<T>(1.0 / (1.0 - dropout.p));
    for (Index i = 0; i < X.rows(); ++i)
        for (Index j = 0; j < X.cols(); ++j)
            Y(i, j) = X(i, j) * (bernoulli(rng, dropout.p) ? T(0) : scale);  // NaN stays NaN
}

}  // namespace headwise::ops
