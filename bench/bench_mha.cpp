// SPDX-License-Identifier: MIT
// MultiheadAttention forward and backward per projection, against the machine's limits.
//
// Three kinds of cases, all in this one program so that their figures come from one run:
//   mha/<operation>/<projection>/<scalar>/B:_/L:_/E:_/H:_   the layer, self-attention (q = k = v)
//   roofline/gemm_qkv/<scalar>/B:_/L:_/E:_                  Y[B L, 3E] = X[B L, E] W[3E, E]^T,
//                                                           the fused projection as one bare
//                                                           ops::gemm (the backend this program
//                                                           is built with): what the layer can
//                                                           reach
//   roofline/gemm_separate/<scalar>/B:_/L:_/E:_             the same products as 3 GEMMs,
//   roofline/gemm_per_head/<scalar>/B:_/L:_/E:_/H:_         and as 3H GEMMs of [D, E] blocks:
//                                                           the projections alone, no attention
//   roofline/fma_peak/<scalar>                              independent FMAs in registers, one
//                                                           core: what the machine can reach
//   mha_threads/<operation>/fused/<scalar>/B:_/L:_/E:_/H:_/T:_   with more than one thread
//                                                           (OpenMP's, or OpenBLAS's): the layer
//                                                           on T = 1, 2, ... threads, by wall
//                                                           time, cases interleaved: what a
//                                                           second thread is worth
// Operations:
//   forward_eval      module.eval(): the inference path, saves nothing for backward
//   forward_train     module.train(): forward that also saves what backward needs
//   backward          backward alone, of one training forward made before the loop
//   forward_backward  module.train(): a training forward and its backward, per iteration
// Timing: single-threaded (the default build), each case is timed by CPU time (of the thread that
// runs it and does all its work), which leaves out the time it waits for a core while other
// processes run; on an idle machine it equals wall time. With more than one thread (OpenMP, or
// the BLAS's own threads), by wall time (UseRealTime), since one thread's CPU time would miss the
// others' work. Every case
// counts FLOP/s over that time:
// self-attention forward is 8 B L E^2 (Q, K, V and output projections) + 4 B L S E (Q K^T and
// P V, S = L); backward is twice the forward. A call allocates what a user's call allocates (its
// outputs, what training saves for backward), and that is part of what is measured.
//
// The default set (what scripts/bench.sh runs in a few minutes) is float only: forward_eval and
// forward_backward on the four main shapes and over the head sweep, and the limits. `--full` (or
// HEADWISE_BENCH_FULL=1) adds double, forward_train, backward alone and (1, 4096, 512, 8) forward.

// GCC 12's own AVX-512 intrinsic headers trip -Wmaybe-uninitialized when Eigen's vectorised code
// is inlined here (a false positive, GCC bug 105593): hundreds of lines in a -march=native build.
// Silenced for this file and GCC 12 only, before any header brings the intrinsics in.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <benchmark/benchmark.h>

#include <Eigen/Core>

#include <algorithm>  // std::max, std::max_element
#include <cstdint>    // std::int64_t
#include <cstdlib>    // std::getenv
#include <cstring>    // std::strcmp
#include <iterator>   // std::begin, std::end
#include <random>     // std::mt19937_64
#include <set>        // std::set
#include <string>     // std::string
#include <tuple>      // std::tuple
#include <utility>    // std::pair
#include <vector>     // std::vector

#include <headwise/detail/parallel.hpp>
#include <headwise/headwise.hpp>
#include <headwise/layers/attention/multihead_attention.hpp>
#include <headwise/ops/gemm.hpp>

#include "bench_peak.hpp"

namespace {

using headwise::Index;
using headwise::Projection;
using headwise::ops::Op;

/// One self-attention problem: batch, sequence length, embedding dimension, heads.
struct Problem {
    Index B, L, E, H;
};

// The shapes of the comparison: a typical encoder layer, one long BERT-base sequence, many short
// sequences with a small model, and a long batch.
const Problem kMainShapes[] = {
    {8, 128, 512, 8}, {1, 512, 768, 12}, {32, 64, 256, 4}, {4, 1024, 512, 8}};
// Long sequence, forward only (the [L, S] scores dominate).
const Problem kLongShape = {1, 4096, 512, 8};
// The head sweep: E fixed, D = E / H shrinking from 512 to 8.
const Problem kSweepBase = {8, 128, 512, 0};
const Index kSweepHeads[] = {1, 2, 4, 8, 16, 32, 64};

const Projection kProjections[] = {Projection::fused, Projection::separate, Projection::per_head};

enum class Operation { forward_eval, forward_train, backward, forward_backward };

const char* to_string(Operation op) {
    switch (op) {
        case Operation::forward_eval:
            return "forward_eval";
        case Operation::forward_train:
            return "forward_train";
        case Operation::backward:
            return "backward";
        case Operation::forward_backward:
            return "forward_backward";
    }
    return "unknown";
}

template <class T>
const char* scalar_name();
template <>
const char* scalar_name<float>() {
    return "float";
}
template <>
const char* scalar_name<double>() {
    return "double";
}

/// Floating-point operations of one self-attention forward (S = L), counting a multiply-add as 2:
/// Q, K, V projections 6 B L E^2, output projection 2 B L E^2, Q K^T and P V 2 B L S E each.
/// Softmax, bias and scaling are lower order and not counted.
double forward_flop(const Problem& p) {
    const double B = static_cast<double>(p.B), L = static_cast<double>(p.L),
                 E = static_cast<double>(p.E);
    return 8.0 * B * L * E * E + 4.0 * B * L * L * E;
}

/// Backward is twice the forward (each product gives two gradient products).
double operation_flop(Operation op, const Problem& p) {
    switch (op) {
        case Operation::forward_eval:
        case Operation::forward_train:
            return forward_flop(p);
        case Operation::backward:
            return 2.0 * forward_flop(p);
        case Operation::forward_backward:
            return 3.0 * forward_flop(p);
    }
    return 0.0;
}

Problem problem_of(const benchmark::State& state) {
    return Problem{static_cast<Index>(state.range(0)), static_cast<Index>(state.range(1)),
                   static_cast<Index>(state.range(2)), static_cast<Index>(state.range(3))};
}

void set_flop_counters(benchmark::State& state, double flop) {
    state.counters["FLOP/s"] =
        benchmark::Counter(flop, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["flop"] = benchmark::Counter(flop);  // per iteration, for the report
}

// ---- the layer ---------------------------------------------------------------------------------

template <class T>
void bm_mha(benchmark::State& state, Operation op, Projection projection) {
    const Problem p = problem_of(state);
    headwise::MultiheadAttentionOptions options;
    options.embed_dim = p.E;
    options.num_heads = p.H;
    options.projection = projection;
    // x outlives every call of the loop, so training keeps a view of it rather than a copy.
    options.reference_inputs = true;
    headwise::MultiheadAttention<T> mha(options, /*seed=*/42);
    // One tensor as query, key and value: its gradient once (as torch's x.grad).
    headwise::AttentionBackwardOptions backward_options;
    backward_options.combine_self = true;

    std::mt19937_64 rng(7);
    const auto x = headwise::Tensor<T>::randn(headwise::Shape{p.B, p.L, p.E}, rng);   // [B, L, E]
    const auto dy = headwise::Tensor<T>::randn(headwise::Shape{p.B, p.L, p.E}, rng);  // [B, L, E]

    // Each case runs one untimed call first (bench/run.py's workers warm up the same way): a new
    // module sizes its reusable buffers on its first call, and a repetition of a large shape
    // is one or two calls, whose time would otherwise be mostly that first call's.
    switch (op) {
        case Operation::forward_eval:
        case Operation::forward_train: {
            if (op == Operation::forward_eval)
                mha.eval();
            else
                mha.train();
            benchmark::DoNotOptimize(mha.forward(x, x, x).output.data());
            for (auto _ : state) {
                auto out = mha.forward(x, x, x);  // self-attention: one tensor as q, k and v
                benchmark::DoNotOptimize(out.output.data());
                benchmark::ClobberMemory();
            }
            break;
        }
        case Operation::backward: {
            mha.train();
            const auto fwd = mha.forward(x, x, x);
            benchmark::DoNotOptimize(mha.backward(fwd, dy, backward_options).input.data());
            for (auto _ : state) {
                auto grads = mha.backward(fwd, dy, backward_options);
                benchmark::DoNotOptimize(grads.input.data());
                benchmark::ClobberMemory();
            }
            break;
        }
        case Operation::forward_backward: {
            mha.train();
            {
                auto fwd = mha.forward(x, x, x);
                benchmark::DoNotOptimize(mha.backward(fwd, dy, backward_options).input.data());
            }
            for (auto _ : state) {
                auto fwd = mha.forward(x, x, x);
                auto grads = mha.backward(fwd, dy, backward_options);
                benchmark::DoNotOptimize(grads.input.data());
                benchmark::ClobberMemory();
            }
            break;
        }
    }
    set_flop_counters(state, operation_flop(op, p));
}

/// The layer on a given number of threads: OpenMP's in an OpenMP build, else OpenBLAS's own.
/// The 1 and 2-thread cases of one program interleave, so that their ratio is measured side by
/// side, by wall time both. (Run these cases on their own: each leaves its thread count set.)
template <class T>
void bm_mha_threads(benchmark::State& state, Operation op) {
#if HEADWISE_PARALLEL
    omp_set_num_threads(static_cast<int>(state.range(4)));
#elif HEADWISE_GEMM_CBLAS && defined(OPENBLAS_VERSION)
    openblas_set_num_threads(static_cast<int>(state.range(4)));
#endif
    bm_mha<T>(state, op, Projection::fused);
}

// ---- what the layer can reach: the fused projection as one bare GEMM ----------------------------

template <class T>
void bm_gemm_qkv(benchmark::State& state) {
    const Index B = static_cast<Index>(state.range(0)), L = static_cast<Index>(state.range(1)),
                E = static_cast<Index>(state.range(2));
    std::mt19937_64 rng(7);
    const auto x = headwise::Tensor<T>::randn(headwise::Shape{B * L, E}, rng);  // [B L, E]
    const auto w = headwise::Tensor<T>::randn(headwise::Shape{3 * E, E}, rng);  // [3E, E]
    headwise::Tensor<T> y(headwise::Shape{B * L, 3 * E});                       // [B L, 3E]
    for (auto _ : state) {
        headwise::ops::gemm<T>(T(1), x.matrix(), Op::none, w.matrix(), Op::transpose, T(0),
                               y.matrix());
        benchmark::DoNotOptimize(y.data());
        benchmark::ClobberMemory();
    }
    set_flop_counters(state, 2.0 * static_cast<double>(B * L) * static_cast<double>(3 * E) *
                                 static_cast<double>(E));
}

/// The same in-projection as three GEMMs (Projection::separate): Y_i[B L, E] = X W_i^T.
template <class T>
void bm_gemm_separate(benchmark::State& state) {
    const Index B = static_cast<Index>(state.range(0)), L = static_cast<Index>(state.range(1)),
                E = static_cast<Index>(state.range(2));
    std::mt19937_64 rng(7);
    const auto x = headwise::Tensor<T>::randn(headwise::Shape{B * L, E}, rng);  // [B L, E]
    const auto w = headwise::Tensor<T>::randn(headwise::Shape{3 * E, E}, rng);  // [3E, E]
    headwise::Tensor<T> y(headwise::Shape{3, B * L, E});                        // [3, B L, E]
    for (auto _ : state) {
        for (Index i = 0; i < 3; ++i)
            headwise::ops::gemm<T>(T(1), x.matrix(), Op::none, w.matrix().middleRows(i * E, E),
                                   Op::transpose, T(0),
                                   headwise::MatrixMap<T>(y.data() + i * B * L * E, B * L, E));
        benchmark::DoNotOptimize(y.data());
        benchmark::ClobberMemory();
    }
    set_flop_counters(state, 2.0 * static_cast<double>(B * L) * static_cast<double>(3 * E) *
                                 static_cast<double>(E));
}

/// The same in-projection as 3H GEMMs against [D, E] row blocks (Projection::per_head):
/// Y_ih[B L, D] = X W_ih^T, each into its own contiguous block, as the layer stores them.
template <class T>
void bm_gemm_per_head(benchmark::State& state) {
    const Problem p = problem_of(state);
    const Index N = p.B * p.L, D = p.E / p.H;
    std::mt19937_64 rng(7);
    const auto x = headwise::Tensor<T>::randn(headwise::Shape{N, p.E}, rng);        // [B L, E]
    const auto w = headwise::Tensor<T>::randn(headwise::Shape{3 * p.E, p.E}, rng);  // [3E, E]
    headwise::Tensor<T> y(headwise::Shape{3 * p.H, N, D});                          // [3H, B L, D]
    for (auto _ : state) {
        for (Index i = 0; i < 3 * p.H; ++i)
            headwise::ops::gemm<T>(T(1), x.matrix(), Op::none, w.matrix().middleRows(i * D, D),
                                   Op::transpose, T(0),
                                   headwise::MatrixMap<T>(y.data() + i * N * D, N, D));
        benchmark::DoNotOptimize(y.data());
        benchmark::ClobberMemory();
    }
    set_flop_counters(state, 2.0 * static_cast<double>(N) * static_cast<double>(3 * p.E) *
                                 static_cast<double>(p.E));
}

// ---- what the machine can reach: FMA peak of one core ----------------------------------------

template <class T>
void bm_fma_peak(benchmark::State& state) {
    constexpr std::int64_t kSteps = std::int64_t{1} << 16;
    const headwise_bench::PeakKernel kernel = headwise_bench::fma_peak_kernel<T>();
    T a = T(0.999), b = T(0.001);
    for (auto _ : state) {
        benchmark::DoNotOptimize(a);  // opaque to the compiler: the loop cannot be folded
        benchmark::DoNotOptimize(b);
        T r = headwise_bench::fma_peak<T>(kSteps, a, b);
        benchmark::DoNotOptimize(r);
    }
    state.SetLabel(std::string(kernel.isa) + ", " + std::to_string(kernel.chains) + " chains");
    set_flop_counters(state, 2.0 * kernel.lanes * kernel.chains * static_cast<double>(kSteps));
}

// ---- registration -------------------------------------------------------------------------------

/// Threads a GEMM may run on: headwise's OpenMP threads, or the BLAS's own (OpenBLAS tells).
int gemm_threads() {
    int threads = headwise::detail::max_threads();
#if HEADWISE_GEMM_CBLAS && defined(OPENBLAS_VERSION)
    threads = std::max(threads, openblas_get_num_threads());
#endif
    return threads;
}

/// Wall time when the kernels run on several threads, else CPU time.
bool wall_time() { return gemm_threads() > 1; }

/// Applies what every case shares: milliseconds (unless `unit` says otherwise) and the clock.
benchmark::internal::Benchmark* timed(benchmark::internal::Benchmark* b,
                                      benchmark::TimeUnit unit = benchmark::kMillisecond) {
    b->Unit(unit);
    if (wall_time()) b->UseRealTime();
    return b;
}

double largest(const std::vector<double>& v) {
    return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
}

template <class T>
void register_mha(Operation op, const Problem& p) {
    for (Projection projection : kProjections) {
        const std::string name = std::string("mha/") + to_string(op) + "/" +
                                 headwise::to_string(projection) + "/" + scalar_name<T>();
        timed(benchmark::RegisterBenchmark(name.c_str(), bm_mha<T>, op, projection))
            ->Args({p.B, p.L, p.E, p.H})
            ->ArgNames({"B", "L", "E", "H"});
    }
}

template <class T>
void register_roofline(const std::vector<Problem>& problems) {
    // The peak is a capability: a repetition disturbed by other processes (a lower clock, a lost
    // core under wall time) only says less. So it runs 10 short repetitions whatever
    // --benchmark_repetitions says, and besides the median reports the largest FLOP/s ("max").
    timed(benchmark::RegisterBenchmark(
              (std::string("roofline/fma_peak/") + scalar_name<T>()).c_str(), bm_fma_peak<T>),
          benchmark::kMicrosecond)
        ->ComputeStatistics("max", largest)
        ->Repetitions(10)
        ->MinTime(0.05);
    std::set<std::tuple<Index, Index, Index>> seen;
    for (const Problem& p : problems) {
        if (!seen.insert({p.B, p.L, p.E}).second) continue;
        using Family = std::pair<const char*, void (*)(benchmark::State&)>;
        for (const auto& [family, fn] :
             {Family{"gemm_qkv", bm_gemm_qkv<T>}, Family{"gemm_separate", bm_gemm_separate<T>}})
            timed(benchmark::RegisterBenchmark(
                      (std::string("roofline/") + family + "/" + scalar_name<T>()).c_str(), fn))
                ->Args({p.B, p.L, p.E})
                ->ArgNames({"B", "L", "E"});
    }
    std::set<std::tuple<Index, Index, Index, Index>> seen_heads;
    for (const Problem& p : problems) {
        if (!seen_heads.insert({p.B, p.L, p.E, p.H}).second) continue;
        timed(benchmark::RegisterBenchmark(
                  (std::string("roofline/gemm_per_head/") + scalar_name<T>()).c_str(),
                  bm_gemm_per_head<T>))
            ->Args({p.B, p.L, p.E, p.H})
            ->ArgNames({"B", "L", "E", "H"});
    }
}

/// mha_threads/<operation>/fused/<scalar>/B:_/L:_/E:_/H:_/T:_ for T in 1 .. max_threads():
/// the main shapes' forward_eval and forward_backward per thread count, by wall time.
template <class T>
void register_threads() {
    for (const Problem& p : kMainShapes)
        for (Operation op : {Operation::forward_eval, Operation::forward_backward})
            for (int threads = 1; threads <= gemm_threads(); ++threads) {
                const std::string name =
                    std::string("mha_threads/") + to_string(op) + "/fused/" + scalar_name<T>();
                benchmark::RegisterBenchmark(name.c_str(), bm_mha_threads<T>, op)
                    ->Args({p.B, p.L, p.E, p.H, threads})
                    ->ArgNames({"B", "L", "E", "H", "T"})
                    ->Unit(benchmark::kMillisecond)
                    ->UseRealTime();
            }
}

template <class T>
void register_scalar(bool full) {
    std::vector<Problem> sweep;
    for (Index H : kSweepHeads) {
        Problem p = kSweepBase;
        p.H = H;
        sweep.push_back(p);
    }
    std::vector<Problem> all(std::begin(kMainShapes), std::end(kMainShapes));
    if (full) all.push_back(kLongShape);
    all.insert(all.end(), sweep.begin(), sweep.end());
    register_roofline<T>(all);

    std::vector<Operation> main_ops = {Operation::forward_eval, Operation::forward_backward};
    if (full)
        main_ops = {Operation::forward_eval, Operation::forward_train, Operation::backward,
                    Operation::forward_backward};
    for (const Problem& p : kMainShapes)
        for (Operation op : main_ops) register_mha<T>(op, p);
    if (full) register_mha<T>(Operation::forward_eval, kLongShape);

    auto is_main = [](const Problem& p) {
        for (const Problem& m : kMainShapes)
            if (m.B == p.B && m.L == p.L && m.E == p.E && m.H == p.H) return true;
        return false;
    };
    for (const Problem& p : sweep) {
        if (is_main(p)) continue;  // already measured with the main shapes
        register_mha<T>(Operation::forward_eval, p);
        register_mha<T>(Operation::forward_backward, p);
    }
}

bool env_full() {
    const char* v = std::getenv("HEADWISE_BENCH_FULL");
    return v != nullptr && std::strcmp(v, "") != 0 && std::strcmp(v, "0") != 0;
}

}  // namespace

int main(int argc, char** argv) {
    // Our own flag, taken out before Google Benchmark sees the arguments.
    bool full = env_full();
    std::vector<char*> args;
    for (int i = 0; i < argc; ++i) {
        if (i > 0 && std::strcmp(argv[i], "--full") == 0) {
            full = true;
            continue;
        }
        args.push_back(argv[i]);
    }
    int count = static_cast<int>(args.size());
    args.push_back(nullptr);
    benchmark::Initialize(&count, args.data());
    if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 1;

    register_scalar<float>(full);
    if (gemm_threads() > 1) register_threads<float>();
    if (full) register_scalar<double>(full);

    // What the figures depend on. scripts/bench.sh adds build_type and threads itself
    // (--benchmark_context), since Debian's libbenchmark calls itself a debug build.
    benchmark::AddCustomContext("headwise_set", full ? "full" : "default");
    benchmark::AddCustomContext("headwise_version", HEADWISE_VERSION_STRING);
#if defined(NDEBUG)
    benchmark::AddCustomContext("headwise_assertions", "off (NDEBUG)");
#else
    benchmark::AddCustomContext("headwise_assertions", "on (no NDEBUG: not a release build)");
#endif
#if defined(HEADWISE_USE_OPENMP)
    benchmark::AddCustomContext("headwise_openmp", "on");
#else
    benchmark::AddCustomContext("headwise_openmp", "off");
#endif
    benchmark::AddCustomContext("headwise_threads", std::to_string(gemm_threads()));
    benchmark::AddCustomContext("headwise_openmp_threads",
                                std::to_string(headwise::detail::max_threads()));
    benchmark::AddCustomContext("gemm_backend", headwise::ops::gemm_backend());
#if HEADWISE_GEMM_CBLAS && defined(OPENBLAS_VERSION)
    // Which kernels OpenBLAS runs (its CPU dispatch, or OPENBLAS_CORETYPE) and its threads.
    benchmark::AddCustomContext("blas", std::string("OpenBLAS ") + openblas_get_config());
    benchmark::AddCustomContext("blas_core", openblas_get_corename());
    benchmark::AddCustomContext("blas_threads", std::to_string(openblas_get_num_threads()));
#elif HEADWISE_GEMM_CBLAS
    benchmark::AddCustomContext("blas", "a CBLAS (not OpenBLAS: kernels not reported)");
#endif
    for (const char* var :
         {"OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"})
        if (const char* value = std::getenv(var)) benchmark::AddCustomContext(var, value);
#if defined(__AVX512F__)
    benchmark::AddCustomContext("march", "AVX-512 (e.g. -march=native)");
#elif defined(__AVX2__)
    benchmark::AddCustomContext("march", "AVX2");
#else
    benchmark::AddCustomContext("march", "baseline (no -march)");
#endif
    benchmark::AddCustomContext("headwise_timing", wall_time() ? "wall" : "cpu");
    benchmark::AddCustomContext("eigen_version", std::to_string(EIGEN_WORLD_VERSION) + "." +
                                                     std::to_string(EIGEN_MAJOR_VERSION) + "." +
                                                     std::to_string(EIGEN_MINOR_VERSION));
    benchmark::AddCustomContext("eigen_simd", Eigen::SimdInstructionSetsInUse());
    benchmark::AddCustomContext("fma_peak_kernel", headwise_bench::fma_peak_kernel<float>().isa);
    if (const char* tunables = std::getenv("GLIBC_TUNABLES"))  // malloc settings (scripts/bench.sh)
        benchmark::AddCustomContext("glibc_tunables", tunables);
#if defined(__VERSION__)
    benchmark::AddCustomContext("compiler", __VERSION__);
#endif

    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
