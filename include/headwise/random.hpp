// SPDX-License-Identifier: MIT
// Explicit random generators and the few distributions the library draws from.
#pragma once

#include <cmath>    // std::sqrt, std::log, std::cos
#include <cstdint>  // std::uint64_t
#include <random>   // std::mt19937_64

namespace headwise {

/// The generator type used throughout: a standard 64-bit Mersenne twister, always passed
/// explicitly. There is no global generator anywhere in the library.
using Generator = std::mt19937_64;

/// Uniform double in [0, 1) from the top 53 bits of one draw. Written out (rather than
/// std::uniform_real_distribution) so that a seed gives the same numbers with every standard
/// library.
template <class Rng>
double uniform01(Rng& rng) {
    static_assert(Rng::max() - Rng::min() == ~std::uint64_t{0},
                  "headwise: pass a generator with 64 random bits per draw, e.g. std::mt19937_64");
    return static_cast<double>((rng() - Rng::min()) >> 11) * 0x1.0p-53;
}

/// One uniform double in [lo, hi) (the tensor factory of the same distribution is
/// uniform<T>(shape, lo, hi, rng) in tensor_ops/factories.hpp).
template <class Rng>
double uniform_scalar(Rng& rng, double lo, double hi) {
    return lo + (hi - lo) * uniform01(rng);
}

/// Standard normal draw by the Box-Muller transform (one draw per call; the sine partner is
/// discarded so the stream has no hidden state beyond the generator).
template <class Rng>
double normal(Rng& rng) {
    constexpr double kTwoPi = 6.283185307179586476925286766559;
    const double u1 = 1.0 - uniform01(rng);  // (0, 1]: log is finite
    const double u2 = uniform01(rng);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
}

/// Bernoulli(p) draw: true with probability p.
template <class Rng>
bool bernoulli(Rng& rng, double p) {
    return uniform01(rng) < p;
}

}  // namespace headwise
