// SPDX-License-Identifier: MIT
// The scalar types the numerical templates accept (HEADWISE_STATIC_ASSERT_REAL, config.hpp).
#pragma once

#include <type_traits>  // std::is_same_v

namespace headwise::detail {

template <class T>
inline constexpr bool is_real_scalar_v = std::is_same_v<T, float> || std::is_same_v<T, double>;

}  // namespace headwise::detail
