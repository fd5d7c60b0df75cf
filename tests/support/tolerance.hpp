// SPDX-License-Identifier: MIT
// Per-scalar comparison tolerances of the tests, kept in one place.
#pragma once

#include <cmath>  // std::sqrt

#include <headwise/config.hpp>

namespace headwise::test {

/// Relative tolerance of a result computed in T against a reference computed in double: a few
/// units of T's rounding error, so a wrong formula fails while reordered sums pass.
template <class T>
struct Tol;

template <>
struct Tol<float> {
    static constexpr double rel = 1e-5;
    static constexpr double abs = 1e-6;  // floor for values that should be (near) zero
};

template <>
struct Tol<double> {
    static constexpr double rel = 1e-12;
    static constexpr double abs = 1e-14;  // floor for values that should be (near) zero
};

/// Largest scaled difference (match.hpp's HEADWISE_CHECK_CLOSE) between a result computed in T
/// and a golden file from PyTorch, which computed in float64: the one bound of every golden test
/// (attention, grouped-query attention, the encoder layer), over outputs, weights and every
/// gradient. In double only the order of rounding separates the two; float carries its own
/// rounding (about 6e-8 per operation) through a few dozen operations, and is held to the same
/// bound as every other float test.
template <class T>
inline constexpr double kGoldenTolerance = Tol<T>::rel;

/// Relative tolerance of sums of K products computed in T against double: rounding errors grow
/// with the square root of the number of terms.
template <class T>
double dot_tolerance(Index K) {
    return Tol<T>::rel * std::sqrt(static_cast<double>(K) + 1.0);
}

}  // namespace headwise::test
