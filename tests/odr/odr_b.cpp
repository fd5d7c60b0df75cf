// SPDX-License-Identifier: MIT
// Second of two translation units that include the umbrella header (see main.cpp).
#include <headwise/headwise.hpp>

#include <cstddef>  // std::size_t

#include "attention_step.hpp"

std::size_t headwise_odr_b() {
    // The same MultiheadAttention<float> instantiation in both translation units.
    if (headwise_odr_attention_step() != 8) return 0;
    headwise::Tensor<double> x(headwise::Shape{4, 5});  // [4, 5]
    headwise::Tensor<float> y(headwise::Shape{2, 3});   // [2, 3], the same instantiation as odr_a
    return static_cast<std::size_t>(x.numel() + y.numel());
}
