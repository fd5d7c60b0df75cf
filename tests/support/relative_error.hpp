// SPDX-License-Identifier: MIT
// relative_error: max |a - b| / max |b| over a whole tensor, the bf16 tests' measure.
#pragma once

#include <algorithm>  // std::max, std::sort
#include <cmath>      // std::abs
#include <vector>     // std::vector

#include <headwise/tensor.hpp>

#include "catch.hpp"

namespace headwise::test {

/// max |a - b| / max |b| over n values (max |a - b| when b is all zeros): the relative error of a
/// whole tensor, as the bf16 tolerances of docs/precision.md are stated.
inline double relative_error(const float* a, const float* b, Index n) {
    double diff = 0, scale = 0;
    for (Index i = 0; i < n; ++i) {
        diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
        scale = std::max(scale, std::abs(static_cast<double>(b[i])));
    }
    return scale == 0 ? diff : diff / scale;
}

/// The same over two tensors (or views) of one shape.
inline double relative_error(TensorView<const float> a, TensorView<const float> b) {
    REQUIRE(a.shape() == b.shape());
    return relative_error(a.data(), b.data(), a.numel());
}

/// The median of `values` (the mean of the middle two for an even count; 0 when empty).
inline double median(std::vector<double> values) {
    if (values.empty()) return 0;
    std::sort(values.begin(), values.end());
    const std::size_t n = values.size();
    return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace headwise::test
