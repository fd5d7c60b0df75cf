// SPDX-License-Identifier: MIT
// check_precision: the argument check of every composite module's with_precision.
#pragma once

#include <string>       // std::to_string
#include <type_traits>  // std::is_same_v

#include "../error.hpp"
#include "../precision.hpp"

namespace headwise::detail {

/// Throws std::invalid_argument naming `function` and its argument "precision" unless
/// `precision` is a Precision enumerator and, for Precision::bf16, T is float (bf16 is for float
/// modules). A module made of others calls it before switching any of them, so that a refused
/// switch changes nothing.
template <class T>
void check_precision(const char* function, Precision precision) {
    if (precision != Precision::float32 && precision != Precision::bf16)
        throw_invalid_argument(function, "precision", "Precision::float32 or Precision::bf16",
                               std::to_string(static_cast<int>(precision)));
    if (precision == Precision::bf16 && !std::is_same_v<T, float>)
        throw_invalid_argument(function, "precision", "Precision::float32 for a double module",
                               "Precision::bf16 (bf16 is for float modules)");
}

}  // namespace headwise::detail
