// SPDX-License-Identifier: MIT
// parallel_for over independent work items: OpenMP threads when built with HEADWISE_USE_OPENMP.
#pragma once

#include "../config.hpp"

#if defined(HEADWISE_USE_OPENMP) && HEADWISE_USE_OPENMP && defined(_OPENMP)
#include <omp.h>  // omp_get_max_threads, omp_get_thread_num
#define HEADWISE_PARALLEL 1
#else
#define HEADWISE_PARALLEL 0
#endif

namespace headwise::detail {

/// Number of threads parallel_for may use: OpenMP's maximum when headwise is built with
/// HEADWISE_USE_OPENMP (and the compiler's OpenMP flag), else 1.
inline int max_threads() noexcept {
#if HEADWISE_PARALLEL
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/// Calls f(i, thread) for i in [0, n), where `thread` in [0, max_threads()) names the calling
/// thread, so that f can use per-thread scratch. Items must be independent: they may run in any
/// order and at the same time.
template <class F>
void parallel_for(Index n, F&& f) {
#if HEADWISE_PARALLEL
#pragma omp parallel for schedule(static)
    for (Index i = 0; i < n; ++i) f(i, omp_get_thread_num());
#else
    for (Index i = 0; i < n; ++i) f(i, 0);
#endif
}

}  // namespace headwise::detail
