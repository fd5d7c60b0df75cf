// SPDX-License-Identifier: MIT
// Whether a random engine states its state size (the standard engines do), for random.hpp.
#pragma once

#include <type_traits>  // std::false_type, std::true_type, std::void_t

namespace headwise::detail {

/// True for engines with a `state_size` member (std::mersenne_twister_engine).
template <class Rng, class = void>
struct has_state_size : std::false_type {};
template <class Rng>
struct has_state_size<Rng, std::void_t<decltype(Rng::state_size)>> : std::true_type {};

}  // namespace headwise::detail
