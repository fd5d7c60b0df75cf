// SPDX-License-Identifier: MIT
// A number as error messages show it: the fewest significant digits that read back as the same
// value.
#pragma once

#include <cstdio>   // std::snprintf
#include <cstdlib>  // std::strtod
#include <limits>   // std::numeric_limits
#include <string>   // std::string

namespace headwise::detail {

/// `x` in the fewest significant digits that read back as the same T ("0.5", "1e+300",
/// "0.7071067811865475"), for messages.
template <class T>
std::string shortest_str(T x) {
    char text[32];
    for (int digits = 1; digits <= std::numeric_limits<T>::max_digits10; ++digits) {
        std::snprintf(text, sizeof text, "%.*g", digits, static_cast<double>(x));
        if (static_cast<T>(std::strtod(text, nullptr)) == x) break;
    }
    return text;
}

}  // namespace headwise::detail
