// SPDX-License-Identifier: MIT
// Index type, debug assertions and the scalar-type check shared by every header.
#pragma once

#include <cstddef>  // std::ptrdiff_t

#include "detail/assert.hpp"
#include "detail/scalar_traits.hpp"

namespace headwise {

/// Signed index used for every size and coordinate (the type Eigen uses).
using Index = std::ptrdiff_t;

/// Bytes of alignment of every tensor allocation: one cache line, one AVX-512 register.
inline constexpr std::size_t kTensorAlignment = 64;

}  // namespace headwise

/// Checks an internal invariant in debug builds; compiled out under NDEBUG. Argument and shape
/// checks at public boundaries never use this: they throw, in release builds too.
#ifdef NDEBUG
#define HEADWISE_ASSERT(expr) static_cast<void>(0)
#else
#define HEADWISE_ASSERT(expr) \
    ((expr) ? static_cast<void>(0) : ::headwise::detail::assert_fail(#expr, __FILE__, __LINE__))
#endif

/// Rejects scalar types other than float and double with a sentence a user can act on.
#define HEADWISE_STATIC_ASSERT_REAL(T)                                                        \
    static_assert(::headwise::detail::is_real_scalar_v<T>,                                    \
                  "headwise: this type is defined for float and double only; instantiate it " \
                  "with float or double")
