// SPDX-License-Identifier: MIT
// Statistical check that a tensor looks like independent draws from U(-bound, bound).
#pragma once

#include <algorithm>  // std::min, std::max
#include <cmath>      // std::abs, std::sqrt
#include <sstream>    // std::ostringstream
#include <string>     // std::string

#include <headwise/tensor.hpp>

namespace headwise::test {

/// Empty when the n >= 10^4 values of `w` pass all of these, else the reason:
///  - every value lies in [-bound, bound] (bound rounded to T, as the values are);
///  - the smallest and largest values are within 0.2% of -bound and bound (for n = 10^4 each
///    fails by chance with probability 0.999^n < 5e-5);
///  - the mean is within 5 standard errors (bound / sqrt(3 n)) of 0;
///  - the variance is within 3.5% of bound^2 / 3. Var(v^2) = 4 bound^4 / 45 gives it a relative
///    standard error of 0.894 / sqrt(n), 0.9% at n = 10^4, so a chance failure is > 3.9 sigma
///    away, while a bound 10% off moves the variance by 19-21%.
template <class T>
std::string uniform_mismatch(TensorView<const T> w, double bound) {
    const Index n = w.numel();
    std::ostringstream why;
    if (n < 10000) {
        why << "too few values for the statistics: " << n;
        return why.str();
    }
    const T limit = static_cast<T>(bound);
    double lo = 0.0, hi = 0.0, sum = 0.0, sum_sq = 0.0;
    for (Index i = 0; i < n; ++i) {
        const T v = w[i];
        if (std::abs(v) > limit) {
            why << "value " << v << " at " << i << " outside [-" << bound << ", " << bound << "]";
            return why.str();
        }
        lo = std::min(lo, static_cast<double>(v));
        hi = std::max(hi, static_cast<double>(v));
        sum += static_cast<double>(v);
        sum_sq += static_cast<double>(v) * static_cast<double>(v);
    }
    const double mean = sum / static_cast<double>(n);
    const double var = sum_sq / static_cast<double>(n) - mean * mean;
    const double expected_var = bound * bound / 3.0;
    if (hi < 0.998 * bound || lo > -0.998 * bound)
        why << "range [" << lo << ", " << hi << "] does not reach +-" << bound;
    else if (std::abs(mean) > 5.0 * bound / std::sqrt(3.0 * static_cast<double>(n)))
        why << "mean " << mean << " too far from 0 for bound " << bound;
    else if (std::abs(var / expected_var - 1.0) > 0.035)
        why << "variance " << var << " differs from bound^2 / 3 = " << expected_var << " by "
            << 100.0 * (var / expected_var - 1.0) << "%";
    return why.str();
}

}  // namespace headwise::test
