// SPDX-License-Identifier: MIT
// First of two translation units that include the umbrella header (see main.cpp).
#include <headwise/headwise.hpp>

#include <cstddef>  // std::size_t

std::size_t headwise_odr_a() {
    headwise::Tensor<float> x(headwise::Shape{2, 3});  // [2, 3]
    return static_cast<std::size_t>(x.numel());
}
