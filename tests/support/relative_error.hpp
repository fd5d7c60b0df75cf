// SPDX-License-Identifier: MIT
// relative_error: max |a - b| / max |b| over a whole tensor, the bf16 tests' measure.
#pragma once

#include <algorithm>  // std::max, std::sort
#include <cmath>      // std::abs
#include <vector>     // std::vector

#include <headwise/tensor.hpp>

#include "catch.hpp"

namespace headwise::test {

/// max |a - b| / max |b| (max |a - b| when b is all zeros): the relative error of a whole
/// tensor, as the bf16 tolerances of docs/precision.md are stated.
inline double relative_error(const Tensor<float>& a, const Tensor<float>& b) {
    REQUIRE(a.shape() == b.shape());
    double diff = 0, scale = 0;
    for (Index i = 0; i < a.numel(); ++i) {
        diff = std::max(diff, std::abs(static_cast<double>(a.data()[i]) - b.data()[i]));
        scale = std::max(scale, std::abs(static_cast<double>(b.data()[i])));
    }
    return scale == 0 ? diff : diff / scale;
}

/// The median of `values` (the mean of the middle two for an even count; 0 when empty).
inline double median(std::vector<double> values) {
    if (values.empty()) return 0;
    std::sort(values.begin(), values.end());
    const std::size_t n = values.size();
    return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace headwise::test
