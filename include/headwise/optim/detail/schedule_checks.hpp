// SPDX-License-Identifier: MIT
// What a learning-rate schedule is, and the argument checks the schedules share
// (optim/schedules.hpp).
#pragma once

#include <cmath>        // std::isfinite
#include <string>       // std::to_string
#include <type_traits>  // std::enable_if_t, std::is_convertible_v, std::false_type
#include <utility>      // std::declval

#include "../../config.hpp"
#include "../../error.hpp"
#include "optimizer_state.hpp"

namespace headwise::detail {

/// Whether S is a schedule: a class with `double lr(double, Index) const` and kName.
template <class S, class = void>
struct is_schedule : std::false_type {};
template <class S>
struct is_schedule<
    S, std::enable_if_t<
           std::is_convertible_v<decltype(std::declval<const S&>().lr(0.0, Index{0})), double> &&
           std::is_convertible_v<decltype(S::kName), const char*>>> : std::true_type {};

/// Throws std::invalid_argument unless `value` is a valid factor or learning rate.
inline void check_finite_non_negative(const char* fn, const char* name, double value) {
    if (!(value >= 0.0) || !std::isfinite(value))
        throw_invalid_argument(fn, name, "must be finite and non-negative", exact_decimal(value));
}

inline void check_at_least(const char* fn, const char* name, Index value, Index least) {
    if (value < least)
        throw_invalid_argument(fn, name, "must be at least " + std::to_string(least),
                               std::to_string(value));
}

}  // namespace headwise::detail
