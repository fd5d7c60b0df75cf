// SPDX-License-Identifier: MIT
// Long sequences: time and peak memory of MultiheadAttention's blocked and materialised kernels.
//
// Cases (self-attention, float, fused projection, E = 512, H = 8):
//   long/<mode>/<kernel>/<mask>/float/B:_/L:_
//     mode    forward_eval (module.eval(): inference) or training (module.train(): a forward and
//             its backward per iteration)
//     kernel  blocked, materialised (AttentionKernel, forced) or automatic (the module's choice)
//     mask    none or causal (masks.is_causal)
// The default set: B = 1 and L in {256, 1024, 4096}, and B = 8, L = 128 (short sequences, where
// the automatic choice must keep the faster kernel). `--full` (or HEADWISE_BENCH_FULL=1): L in
// {256, 512, 1024, 2048, 4096, 8192}.
//
// Time: CPU time of the thread (one thread, the default build), as bench_mha, of calls after a
// first, untimed one (as bench/run.py's workers time every engine): the steady state of a
// training loop.
// Memory: every case reports `extra_MiB`, the peak resident set of the process while the case
// runs minus its resident set just before: the module, its inputs and the upstream gradient are
// built first, then freed heap memory is handed back to the system (malloc_trim), the kernel's
// peak counter is reset (writing 5 to /proc/self/clear_refs resets VmHWM) and VmRSS is read;
// after the first call and the timed loop VmHWM is read. So extra_MiB is what the calls add above a
// process that holds the module and its inputs: activations, saved tensors, scratch, outputs and
// gradients. bench/run.py's workers measure a call's peak the same way. -1 where /proc is not
// available.

// GCC 12's AVX-512 intrinsic headers trip -Wmaybe-uninitialized inside Eigen (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <benchmark/benchmark.h>

#include <Eigen/Core>

#include <cstdlib>  // std::getenv
#include <cstring>  // std::strcmp, std::strncmp
#include <fstream>  // std::ifstream, std::ofstream
#include <random>   // std::mt19937_64
#include <string>   // std::string, std::getline, std::stol
#include <vector>   // std::vector

#if defined(__GLIBC__)
#include <malloc.h>  // malloc_trim
#endif

#include <headwise/headwise.hpp>

namespace {

using headwise::AttentionKernel;
using headwise::Index;

constexpr Index kE = 512, kH = 8;

enum class Mode { forward_eval, training };

const char* to_string(Mode m) { return m == Mode::forward_eval ? "forward_eval" : "training"; }

/// A field of /proc/self/status in kB ("VmRSS", "VmHWM"), or -1.
long status_kib(const char* field) {
    std::ifstream f("/proc/self/status");
    std::string line;
    const std::size_t n = std::strlen(field);
    while (std::getline(f, line))
        if (line.compare(0, n, field) == 0 && line.size() > n && line[n] == ':')
            return std::stol(line.substr(n + 1));
    return -1;
}

/// Resets VmHWM to the current resident set; false where the kernel does not allow it.
bool reset_peak() {
    std::ofstream f("/proc/self/clear_refs");
    f << "5";
    return static_cast<bool>(f.flush());
}

void bm_long(benchmark::State& state, Mode mode, AttentionKernel kernel, bool causal) {
    const Index B = static_cast<Index>(state.range(0)), L = static_cast<Index>(state.range(1));
    headwise::MultiheadAttentionOptions options;
    options.embed_dim = kE;
    options.num_heads = kH;
    options.attention_kernel = kernel;
    headwise::MultiheadAttention<float> mha(options, /*seed=*/42);
    if (mode == Mode::forward_eval) mha.eval();
    std::mt19937_64 rng(7);
    const auto x = headwise::Tensor<float>::randn(headwise::Shape{B, L, kE}, rng);   // [B, L, E]
    const auto dy = headwise::Tensor<float>::randn(headwise::Shape{B, L, kE}, rng);  // [B, L, E]
    headwise::AttentionMasks<float> masks;
    masks.is_causal = causal;

#if defined(__GLIBC__)
    malloc_trim(0);
#endif
    const auto call = [&] {
        auto fwd = mha.forward(x, x, x, masks);
        if (mode == Mode::training) {
            auto grads = mha.backward(fwd, dy);
            benchmark::DoNotOptimize(grads.query.data());
        }
        benchmark::DoNotOptimize(fwd.output.data());
        benchmark::ClobberMemory();
    };
    const bool measured = reset_peak();
    const long before = status_kib("VmRSS");
    // One call before the timed ones, inside the memory measurement, as bench/run.py's workers do:
    // the module sizes its reusable buffers there, so the timed calls are the steady state a
    // training loop sees, and the peak still counts every buffer a call needs.
    call();
    for (auto _ : state) call();
    const long peak = status_kib("VmHWM");
    state.counters["extra_MiB"] =
        measured && before >= 0 && peak >= 0 ? static_cast<double>(peak - before) / 1024.0 : -1.0;
    // Attention's Q K^T and A V (2 L S E each, halved under a causal mask) and the four
    // projections (8 L E^2); training is three times the forward.
    const double b = static_cast<double>(B), l = static_cast<double>(L),
                 e = static_cast<double>(kE);
    double flop = 8.0 * b * l * e * e + 4.0 * b * l * l * e * (causal ? 0.5 : 1.0);
    if (mode == Mode::training) flop *= 3.0;
    state.counters["FLOP/s"] =
        benchmark::Counter(flop, benchmark::Counter::kIsIterationInvariantRate);
    // Which kernel the calls ran (the automatic case's choice): 1 blocked, 0 materialised.
    state.counters["blocked"] =
        mha.kernel_for(L, L, /*need_weights=*/false) == AttentionKernel::blocked ? 1.0 : 0.0;
}

void register_case(Mode mode, AttentionKernel kernel, bool causal, Index B, Index L) {
    const std::string name = std::string("long/") + to_string(mode) + "/" +
                             headwise::to_string(kernel) + "/" + (causal ? "causal" : "none") +
                             "/float";
    // Long cases cost seconds per call: a fixed count of calls per repetition (no estimation
    // run); short ones run for the minimum time.
    const double cost = static_cast<double>(B) * static_cast<double>(L) * static_cast<double>(L) *
                        (mode == Mode::training ? 3.0 : 1.0);
    auto* b = benchmark::RegisterBenchmark(name.c_str(), bm_long, mode, kernel, causal)
                  ->Args({B, L})
                  ->ArgNames({"B", "L"})
                  ->Unit(benchmark::kMillisecond);
    if (cost >= 3.0 * 2048.0 * 2048.0) b->Iterations(1);
    if (Eigen::nbThreads() > 1) b->UseRealTime();
}

bool env_full() {
    const char* v = std::getenv("HEADWISE_BENCH_FULL");
    return v != nullptr && std::strcmp(v, "") != 0 && std::strcmp(v, "0") != 0;
}

}  // namespace

int main(int argc, char** argv) {
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

    const std::vector<Index> lengths = full ? std::vector<Index>{256, 512, 1024, 2048, 4096, 8192}
                                            : std::vector<Index>{256, 1024, 4096};
    for (Mode mode : {Mode::forward_eval, Mode::training})
        for (bool causal : {false, true})
            for (AttentionKernel kernel : {AttentionKernel::blocked, AttentionKernel::materialised})
                for (Index L : lengths) register_case(mode, kernel, causal, 1, L);
    // Short sequences, many of them: where materialising [L, S] is cheap.
    for (Mode mode : {Mode::forward_eval, Mode::training})
        for (AttentionKernel kernel :
             {AttentionKernel::blocked, AttentionKernel::materialised, AttentionKernel::automatic})
            register_case(mode, kernel, false, 8, 128);

    benchmark::AddCustomContext("headwise_set", full ? "full" : "default");
    benchmark::AddCustomContext("headwise_version", HEADWISE_VERSION_STRING);
    benchmark::AddCustomContext("headwise_threads", std::to_string(Eigen::nbThreads()));
    benchmark::AddCustomContext("headwise_timing", Eigen::nbThreads() > 1 ? "wall" : "cpu");
    benchmark::AddCustomContext(
        "memory", "extra_MiB = peak VmHWM during the case - VmRSS before it (after malloc_trim)");
    benchmark::AddCustomContext("eigen_simd", Eigen::SimdInstructionSetsInUse());
    benchmark::AddCustomContext("gemm_backend", headwise::ops::gemm_backend());
#if defined(NDEBUG)
    benchmark::AddCustomContext("headwise_assertions", "off (NDEBUG)");
#else
    benchmark::AddCustomContext("headwise_assertions", "on (no NDEBUG: not a release build)");
#endif
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
