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

/// Relative tolerance of sums of K products computed in T against double: rounding errors grow
/// with the square root of the number of terms.
template <class T>
double dot_tolerance(Index K) {
    return Tol<T>::rel * std::sqrt(static_cast<double>(K) + 1.0);
}

}  // namespace headwise::test
