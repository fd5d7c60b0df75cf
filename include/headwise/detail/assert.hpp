// SPDX-License-Identifier: MIT
// What HEADWISE_ASSERT (config.hpp) calls when an internal invariant fails.
#pragma once

#include <cstdio>   // std::fprintf
#include <cstdlib>  // std::abort

namespace headwise::detail {

[[noreturn]] inline void assert_fail(const char* expr, const char* file, int line) {
    std::fprintf(stderr, "headwise: internal assertion failed: %s (%s:%d)\n", expr, file, line);
    std::abort();
}

}  // namespace headwise::detail
