// SPDX-License-Identifier: MIT
// A program outside headwise that includes the umbrella header, as a user would.
#include <headwise/headwise.hpp>

#include <iostream>  // std::cout

int main() {
    headwise::Tensor<float> x(headwise::Shape{2, 3});  // [2, 3], zero-filled
    std::cout << "headwise " << HEADWISE_VERSION_STRING << ": Tensor<float> " << x.shape() << " {";
    for (headwise::Index i = 0; i < x.numel(); ++i)
        std::cout << (i == 0 ? "" : ", ") << x.data()[i];
    std::cout << "}\n";
    return x.numel() == 6 ? 0 : 1;
}
