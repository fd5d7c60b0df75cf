// SPDX-License-Identifier: MIT
// What the peers' worker programs (bench_minilm, bench_peers, bench_llama) share: their thread
// count, their memory as the kernel reports it, and medians.
#pragma once

#include <headwise/detail/parallel.hpp>  // HEADWISE_PARALLEL, <omp.h> when set
#include <headwise/ops/gemm.hpp>         // HEADWISE_GEMM_CBLAS, <cblas.h> when set

#include <algorithm>  // std::sort
#include <cstdlib>    // std::atol
#include <fstream>    // std::ifstream
#include <string>     // std::string, std::getline
#include <vector>     // std::vector

namespace headwise_bench {

/// A field of /proc/self/status in kB: "VmRSS" (now) or "VmHWM" (peak); -1 where there is none.
/// A worker's peak is VmHWM rather than ru_maxrss, which a process inherits from the one that
/// forked it.
inline long status_kb(const std::string& field) {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line))
        if (line.compare(0, field.size() + 1, field + ":") == 0)
            return std::atol(line.c_str() + field.size() + 1);
    return -1;
}

/// Runs the program on `n` threads: in an OpenMP build, headwise's OpenMP threads with OpenBLAS
/// at one thread per call (one threading runtime at a time, see docs/performance.md); otherwise
/// OpenBLAS's own threads, which parallelise each GEMM.
inline void set_threads(int n) {
#if HEADWISE_PARALLEL
    omp_set_num_threads(n);
#if HEADWISE_GEMM_CBLAS && defined(OPENBLAS_VERSION)
    openblas_set_num_threads(1);
#endif
#elif HEADWISE_GEMM_CBLAS && defined(OPENBLAS_VERSION)
    openblas_set_num_threads(n);
#endif
    static_cast<void>(n);
}

/// The median of `v` (the mean of the middle two for an even count).
inline double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace headwise_bench
