// SPDX-License-Identifier: MIT
// check_precision: the argument checks of every module's with_precision, and the error of a call
// that needs float weights released by with_precision(Precision::bf16, FloatWeights::release).
#pragma once

#include <stdexcept>    // std::logic_error
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::is_same_v

#include "../error.hpp"
#include "../precision.hpp"

namespace headwise::detail {

/// Throws std::logic_error "<function>: the float weights were released by
/// with_precision(Precision::bf16, FloatWeights::release); <need>".
[[noreturn]] inline void throw_float_weights_released(const std::string& function,
                                                      const std::string& need) {
    throw std::logic_error(function +
                           ": the float weights were released by with_precision(Precision::bf16, "
                           "FloatWeights::release); " +
                           need);
}

/// When `released`: throw_float_weights_released(function, need + how to get them back). Builds
/// no string otherwise, so that accessors may call it on every use.
inline void check_float_weights(const char* function, bool released, const char* need) {
    if (released)
        throw_float_weights_released(
            function, std::string(need) +
                          " (with_precision(Precision::float32) brings them back, widened from "
                          "bf16)");
}

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

/// The same, and std::invalid_argument unless `float_weights` is a FloatWeights enumerator;
/// then, when the module's float weights are released (`released`), std::logic_error for
/// Precision::bf16 with FloatWeights::keep (the float weights it would keep are gone). All
/// before anything changes.
template <class T>
void check_precision(const char* function, Precision precision, FloatWeights float_weights,
                     bool released) {
    check_precision<T>(function, precision);
    if (float_weights != FloatWeights::keep && float_weights != FloatWeights::release)
        throw_invalid_argument(function, "float_weights",
                               "FloatWeights::keep or FloatWeights::release",
                               std::to_string(static_cast<int>(float_weights)));
    if (released && precision == Precision::bf16 && float_weights == FloatWeights::keep)
        throw_float_weights_released(function,
                                     "FloatWeights::keep needs them (call "
                                     "with_precision(Precision::float32) first to train again)");
}

}  // namespace headwise::detail
