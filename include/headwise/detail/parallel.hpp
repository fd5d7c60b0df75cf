// SPDX-License-Identifier: MIT
// parallel_for over independent work items: OpenMP threads when built with HEADWISE_USE_OPENMP.
#pragma once

#include <algorithm>  // std::max, std::min

#include "../config.hpp"

#if defined(HEADWISE_USE_OPENMP) && HEADWISE_USE_OPENMP && defined(_OPENMP)
#include <omp.h>  // omp_get_max_threads, omp_get_thread_num, omp_get_num_threads, omp_in_parallel
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

/// Multiply-adds (M N K) below which a matrix product runs on one thread: starting and joining
/// threads costs more than they save there. Measured with OpenBLAS 0.3.21 on the 2-core machine
/// of docs/prepared_weights.md (minimum of 40 x 5 calls, cblas_sgemm X W^T): all-MiniLM-L6-v2's
/// products at 12 tokens (1.8 M to 7.1 M) took 3.0-3.3x as long on two threads as on one, those
/// at 32 tokens and more (18.9 M and up) 1.03-1.05x; the same rule holds for oneDNN's products
/// (ops/prepared_gemm.hpp). ops::gemm keeps the CBLAS at one thread below it (a build without
/// OpenMP, where OpenBLAS threads each product itself).
inline constexpr double kSerialProductMacs = 16.0 * (1 << 20);

/// Elements a pass over memory (a bias broadcast, a column sum) must have per thread before it
/// is split over threads: below that, starting the threads costs more than the pass.
inline constexpr Index kParallelGrain = Index{1} << 16;

/// Calls f(first, count) on consecutive blocks that cover [0, n): one block per thread when every
/// thread gets at least `grain` items and the caller is not inside a parallel region already
/// (so a pass over memory around a GEMM uses the threads the GEMM uses, never more), else
/// f(0, n) on the calling thread.
template <class F>
void parallel_blocks(Index n, Index grain, F&& f) {
#if HEADWISE_PARALLEL
    const Index most = n / std::max<Index>(grain, 1);
    const int threads =
        omp_in_parallel() ? 1 : static_cast<int>(std::min<Index>(omp_get_max_threads(), most));
    if (threads > 1) {
#pragma omp parallel num_threads(threads)
        {
            const Index t = omp_get_thread_num(), nt = omp_get_num_threads();
            const Index first = n * t / nt, last = n * (t + 1) / nt;
            if (last > first) f(first, last - first);
        }
        return;
    }
#else
    static_cast<void>(grain);
#endif
    f(Index{0}, n);
}

}  // namespace headwise::detail
