// SPDX-License-Identifier: MIT
// The one worker protocol of the benchmark programs that bench/run.py drives (bench_peers,
// bench_minilm, bench_llama): a loop over stdin lines, one answer line each, plus what the
// workers share (thread count, memory as the kernel reports it, medians, CPU time).
//
// The protocol (bench/common/worker.py speaks the same for the Python engines):
//   setup <id> <words...>  the program builds case <id> from the words, calls it once (warm-up)
//                          -> "ready <seconds of the warm-up call>"
//   run <id> <calls>       -> "time <median wall s> <median CPU s of the calling thread>"
//   peak <id>              -> "peak <kB>": the resident set one more call adds at its peak,
//                             above the process holding the case (its outputs released, freed
//                             heap handed back first, VmHWM reset through clear_refs)
//   output <id>            -> "output <words>": what the case's last call produced, as the
//                             program writes it (generated ids), or nothing
//   mem                    -> "mem <peak RSS kB (VmHWM)> <RSS kB when serve() started: the
//                             program's model, if any, loaded>"
//   info                   -> "info gemm=<cblas|eigen> openmp=<0|1> threads=<OpenMP's>
//                             blas_threads=<OpenBLAS's, 0 without it> <the program's own>"
//   free <id>              -> "freed"
//   quit
// An exception answers "error <what()>" and the worker goes on.
#pragma once

#include <headwise/detail/parallel.hpp>  // HEADWISE_PARALLEL, <omp.h> when set
#include <headwise/ops/gemm.hpp>         // HEADWISE_GEMM_CBLAS, <cblas.h> when set

#include <time.h>      // clock_gettime, CLOCK_THREAD_CPUTIME_ID
#include <algorithm>   // std::sort
#include <chrono>      // std::chrono::steady_clock
#include <cstdlib>     // std::atol
#include <exception>   // std::exception
#include <fstream>     // std::ifstream, std::ofstream
#include <functional>  // std::function
#include <iostream>    // std::cin, std::cout
#include <map>         // std::map
#include <memory>      // std::unique_ptr
#include <sstream>     // std::istringstream
#include <stdexcept>   // std::runtime_error
#include <string>      // std::string, std::getline
#include <vector>      // std::vector

#if defined(__GLIBC__)
#include <malloc.h>  // malloc_trim
#endif

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

/// Seconds of CPU time of the calling thread (where the one BLAS thread runs): figures that stay
/// comparable when other processes share the cores.
inline double cpu_now() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

/// One case of a worker: what `run` times, call after call.
class WorkerCase {
public:
    virtual ~WorkerCase() = default;
    /// One timed call.
    virtual void call() = 0;
    /// Drops what a call leaves behind, before `peak` measures one more call.
    virtual void release_outputs() {}
    /// The words `output` answers with.
    virtual std::string output() const { return {}; }
};

/// Builds a case from the words after "setup <id>".
using CaseFactory = std::function<std::unique_ptr<WorkerCase>(std::istringstream& words)>;

/// Answers the protocol above on stdin/stdout until "quit" or the end of input, on `threads`
/// threads; `info` is appended to the "info" line (the program's own key=value fields).
int serve(int threads, const CaseFactory& make_case, const std::string& info = {});

// ------------------------------------------------------------------------------------------------

namespace detail {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

inline WorkerCase& find_case(std::map<std::string, std::unique_ptr<WorkerCase>>& cases,
                             const std::string& id) {
    const auto it = cases.find(id);
    if (it == cases.end()) throw std::runtime_error("no case '" + id + "' (setup it first)");
    return *it->second;
}

inline std::string run_case(WorkerCase& c, int calls) {
    std::vector<double> wall, cpu;
    for (int i = 0; i < calls; ++i) {
        const auto t0 = Clock::now();
        const double c0 = cpu_now();
        c.call();
        wall.push_back(seconds_since(t0));
        cpu.push_back(cpu_now() - c0);
    }
    std::ostringstream out;
    out << "time " << median(wall) << ' ' << median(cpu);
    return out.str();
}

inline std::string peak_of(WorkerCase& c) {
    c.release_outputs();
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
    { std::ofstream("/proc/self/clear_refs") << "5"; }
    const long before = status_kb("VmRSS");
    c.call();
    return "peak " + std::to_string(status_kb("VmHWM") - before);
}

inline std::string build_info(const std::string& extra) {
    int blas_threads = 0;
#if HEADWISE_GEMM_CBLAS && defined(OPENBLAS_VERSION)
    blas_threads = openblas_get_num_threads();
#endif
    std::ostringstream out;
    out << "info gemm=" << headwise::ops::gemm_backend() << " openmp=" << HEADWISE_PARALLEL
        << " threads=" << headwise::detail::max_threads() << " blas_threads=" << blas_threads;
    if (!extra.empty()) out << ' ' << extra;
    return out.str();
}

}  // namespace detail

inline int serve(int threads, const CaseFactory& make_case, const std::string& info) {
    set_threads(threads);
    const long baseline = status_kb("VmRSS");
    std::map<std::string, std::unique_ptr<WorkerCase>> cases;
    std::string line;
    while (std::getline(std::cin, line)) {
        std::istringstream in(line);
        std::string cmd, id;
        in >> cmd >> id;
        if (cmd == "quit") break;
        std::string answer;
        try {
            if (cmd == "setup") {
                auto c = make_case(in);
                const auto t0 = detail::Clock::now();
                c->call();
                std::ostringstream out;
                out << "ready " << detail::seconds_since(t0);
                answer = out.str();
                cases[id] = std::move(c);
            } else if (cmd == "run") {
                int calls = 0;
                in >> calls;
                answer = detail::run_case(detail::find_case(cases, id), calls);
            } else if (cmd == "peak") {
                answer = detail::peak_of(detail::find_case(cases, id));
            } else if (cmd == "output") {
                answer = "output " + detail::find_case(cases, id).output();
            } else if (cmd == "mem") {
                answer =
                    "mem " + std::to_string(status_kb("VmHWM")) + " " + std::to_string(baseline);
            } else if (cmd == "info") {
                answer = detail::build_info(info);
            } else if (cmd == "free") {
                cases.erase(id);
                answer = "freed";
            } else {
                answer = "error unknown command '" + cmd + "'";
            }
        } catch (const std::exception& e) {
            answer = std::string("error ") + e.what();
        }
        std::cout << answer << std::endl;
    }
    return 0;
}

}  // namespace headwise_bench
