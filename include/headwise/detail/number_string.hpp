// SPDX-License-Identifier: MIT
// A double as a message shows it (the shortest of std::ostream's default format).
#pragma once

#include <sstream>  // std::ostringstream
#include <string>   // std::string

namespace headwise::detail {

inline std::string number_string(double value) {
    std::ostringstream os;
    os << value;
    return os.str();
}

}  // namespace headwise::detail
