// SPDX-License-Identifier: MIT
// Links two translation units that both include <headwise/headwise.hpp>: a header that defines a
// non-inline function or variable makes this program fail to link.
#include <cstddef>   // std::size_t
#include <iostream>  // std::cerr

std::size_t headwise_odr_a();
std::size_t headwise_odr_b();

int main() {
    const std::size_t a = headwise_odr_a();
    const std::size_t b = headwise_odr_b();
    if (a != 6 || b != 26) {
        std::cerr << "headwise_odr_test: expected 6 and 26 elements, got " << a << " and " << b
                  << '\n';
        return 1;
    }
    return 0;
}
