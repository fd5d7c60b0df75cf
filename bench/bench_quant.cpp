// SPDX-License-Identifier: MIT
// Products with quantized weights (ops::quant_matmul): the decode GEMV of every format at
// SmolLM2-135M's shapes, 4096 x 4096 and 4096 x 14336, against the read-bandwidth bound of its
// bytes; the prefill GEMM (N = 512); the other activation scheme (weights dequantized to float,
// then float FMA / the float GEMM) for Q4_1 and Q8_0; and the accuracy table of docs/formats.md.
//
// Cases:
//   gemv/<format>/<kernels>/cache:<0|1>/out:_/in:_
//       y[1, out] = x[1, in] W^T. cache:1 multiplies the same W every iteration (it stays in
//       the 32 MB L3 when it fits); cache:0 cycles through copies of W totalling >= 256 MB, so
//       every byte comes from memory, as in a decode step through a whole model. Counters:
//       bytes (of W), GB/s, and x_bound = time / (bytes / bandwidth), the bandwidth being the
//       single-thread read bandwidth measured at start-up as bench_llama's probe measures it (the
//       best of 9 passes summing a 512 MB float array, timed by the thread's CPU time).
//   gemm/<format>/<kernels>/N:_/out:_/in:_          X[N, in] W^T, FLOP/s counter: prefill
//       (N = 512) and batches on both sides of kQuantGemmRows (the switch of scheme).
//   gemv_dequant/<Q4_1|Q8_0>/..., gemm_dequant/...  scheme (b): each weight block dequantized
//       to float in registers and multiplied by FMA (GEMV), or panels of 64 weight rows
//       dequantized into a scratch and multiplied by ops::gemm<float> (GEMM; quant_matmul now
//       does this itself from kQuantGemmRows rows on, so gemm/ and gemm_dequant/ agree there).
//
//   OMP_NUM_THREADS=1 build/qmm-rel/bench/bench_quant --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true --benchmark_enable_random_interleaving=true
//       --benchmark_context=build_type=release
//   build/qmm-rel/bench/bench_quant accuracy      (prints the accuracy table)
//
// Times are CPU times of the calling thread with one thread (UseRealTime with more).

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <benchmark/benchmark.h>

#include <time.h>  // clock_gettime

#include <Eigen/Core>
#include <algorithm>  // std::max_element, std::sort
#include <cmath>      // std::sqrt
#include <cstdint>    // std::uint8_t, std::int64_t
#include <cstdio>     // std::printf
#include <cstring>    // std::strcmp
#include <random>     // std::mt19937_64, std::normal_distribution
#include <string>     // std::string
#include <vector>     // std::vector

#include <headwise/detail/parallel.hpp>
#include <headwise/ops/gemm.hpp>
#include <headwise/ops/quant_matmul.hpp>
#include <headwise/quant/dequantize.hpp>
#include <headwise/quant/quantize.hpp>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define BENCH_QUANT_AVX2 1
#else
#define BENCH_QUANT_AVX2 0
#endif

namespace {

using headwise::Index;
using headwise::ops::QuantKernels;
using headwise::ops::QuantMatrix;
using headwise::quant::Type;

double thread_cpu_now() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

/// bench_llama's probe: the best of 9 passes summing a 512 MB float array on one thread.
double read_bandwidth() {
    static const double bw = [] {
        const Eigen::Index n = Eigen::Index{512} * (1 << 20) / 4;
        Eigen::VectorXf a = Eigen::VectorXf::Constant(n, 1.0f);
        std::vector<double> rates;
        float sink = 0;
        for (int r = 0; r < 10; ++r) {
            const double t0 = thread_cpu_now();
            sink += a.sum();
            if (r > 0) rates.push_back(static_cast<double>(n) * 4 / (thread_cpu_now() - t0));
        }
        benchmark::DoNotOptimize(sink);
        return *std::max_element(rates.begin(), rates.end());
    }();
    return bw;
}

// ---- Q4_K and Q6_K from float --------------------------------------------------------------
// quant/quantize.hpp does not write the K-quants (llama.cpp finds their scales by a search).
// These are the plain min/max quantizers, for the accuracy table only: each sub-block's scale
// from its range, the scales themselves quantized to 6 (Q4_K) or 8 (Q6_K) bits. Their error is
// above llama-quantize's.

void put_half(std::uint8_t* p, float v) {
    const std::uint16_t h = headwise::quant::float_to_half(v);
    p[0] = static_cast<std::uint8_t>(h);
    p[1] = static_cast<std::uint8_t>(h >> 8);
}

int clamp_round(float v, int lo, int hi) {
    const int r = static_cast<int>(std::nearbyint(v));
    return r < lo ? lo : r > hi ? hi : r;
}

void quantize_block_q4_k_simple(const float* x, std::uint8_t* b) {
    float scale[8], minimum[8];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
        float lo = x[32 * j], hi = x[32 * j];
        for (int l = 0; l < 32; ++l) {
            lo = std::min(lo, x[32 * j + l]);
            hi = std::max(hi, x[32 * j + l]);
        }
        lo = std::min(lo, 0.0f);  // x = d sc q - dmin m with m >= 0
        scale[j] = (hi - lo) / 15.0f;
        minimum[j] = -lo;
        max_scale = std::max(max_scale, scale[j]);
        max_min = std::max(max_min, minimum[j]);
    }
    const float d = max_scale / 63.0f, dmin = max_min / 63.0f;
    put_half(b, d);
    put_half(b + 2, dmin);
    const float dh = headwise::quant::half_to_float(headwise::quant::float_to_half(d));
    const float dminh = headwise::quant::half_to_float(headwise::quant::float_to_half(dmin));
    int sc[8], m[8];
    for (int j = 0; j < 8; ++j) {
        sc[j] = dh > 0 ? clamp_round(scale[j] / dh, 0, 63) : 0;
        m[j] = dminh > 0 ? clamp_round(minimum[j] / dminh, 0, 63) : 0;
    }
    std::uint8_t* s = b + 4;
    for (int j = 0; j < 4; ++j) {
        s[j] = static_cast<std::uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = static_cast<std::uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
        s[j + 8] = static_cast<std::uint8_t>((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
    }
    for (int j = 0; j < 8; ++j) {
        const float dl = dh * static_cast<float>(sc[j]), ml = dminh * static_cast<float>(m[j]);
        for (int l = 0; l < 32; ++l) {
            const int q = dl > 0 ? clamp_round((x[32 * j + l] + ml) / dl, 0, 15) : 0;
            std::uint8_t& byte = b[16 + 32 * (j / 2) + l];
            if (j % 2 == 0)
                byte = static_cast<std::uint8_t>(q);
            else
                byte = static_cast<std::uint8_t>(byte | (q << 4));
        }
    }
}

void quantize_block_q6_k_simple(const float* x, std::uint8_t* b) {
    float scale[16], max_scale = 0;
    for (int s = 0; s < 16; ++s) {
        float amax = 0;
        for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * s + l]));
        scale[s] = amax / 31.0f;
        max_scale = std::max(max_scale, scale[s]);
    }
    const float d = max_scale / 127.0f;
    put_half(b + 208, d);
    const float dh = headwise::quant::half_to_float(headwise::quant::float_to_half(d));
    std::uint8_t* ql = b;
    std::uint8_t* qh = b + 128;
    std::fill(b, b + 192, std::uint8_t{0});
    for (int s = 0; s < 16; ++s) {
        const int sc = dh > 0 ? clamp_round(scale[s] / dh, -128, 127) : 0;
        b[192 + s] = static_cast<std::uint8_t>(static_cast<std::int8_t>(sc));
        const float dl = dh * static_cast<float>(sc);
        for (int l = 0; l < 16; ++l) {
            const int i = 16 * s + l;
            const int q = (dl > 0 ? clamp_round(x[i] / dl, -32, 31) : 0) + 32;
            const int h = i / 128, r = i % 128;
            ql[64 * h + r % 64] =
                static_cast<std::uint8_t>(ql[64 * h + r % 64] | ((q & 15) << (4 * (r / 64))));
            qh[32 * h + r % 32] =
                static_cast<std::uint8_t>(qh[32 * h + r % 32] | ((q >> 4) << (2 * (r / 32))));
        }
    }
}

/// Rows of floats quantized to `type`.
std::vector<std::uint8_t> quantize_matrix(Type type, const std::vector<float>& w, Index rows,
                                          Index cols) {
    const auto row_bytes = static_cast<Index>(headwise::quant::row_bytes(type, cols));
    std::vector<std::uint8_t> out(static_cast<std::size_t>(rows * row_bytes));
    for (Index r = 0; r < rows; ++r) {
        const float* x = w.data() + r * cols;
        std::uint8_t* dst = out.data() + r * row_bytes;
        if (type == Type::q4_k || type == Type::q6_k) {
            for (Index blk = 0; blk < cols / 256; ++blk) {
                if (type == Type::q4_k)
                    quantize_block_q4_k_simple(x + 256 * blk, dst + 144 * blk);
                else
                    quantize_block_q6_k_simple(x + 256 * blk, dst + 210 * blk);
            }
        } else {
            headwise::quant::quantize_row(type, x, dst, cols);
        }
    }
    return out;
}

const Type kFormats[] = {Type::q8_0, Type::q4_0, Type::q4_1, Type::q5_0, Type::q5_1,
                         Type::q4_k, Type::q6_k, Type::f16,  Type::bf16};

const char* name_of(Type t) { return headwise::quant::block_format(t).name; }

// ---- scheme (b), for the comparison -----------------------------------------------------------

#if BENCH_QUANT_AVX2
/// GEMV with each block dequantized to float in registers, then FMA with the float x.
float dequant_fma_row(Type type, const std::uint8_t* row, const float* x, Index in) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), acc2 = _mm256_setzero_ps(),
           acc3 = _mm256_setzero_ps();
    for (Index blk = 0; blk < in / 32; ++blk) {
        const float* xb = x + 32 * blk;
        __m256 v0, v1, v2, v3;
        if (type == Type::q8_0) {
            const std::uint8_t* p = row + 34 * blk;
            const __m256 d =
                _mm256_set1_ps(_cvtsh_ss(static_cast<unsigned short>(p[0] | (p[1] << 8))));
            const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
            const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
            v0 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)));
            v1 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))));
            v2 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)));
            v3 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))));
        } else {  // Q4_1
            const std::uint8_t* p = row + 20 * blk;
            const __m256 d =
                _mm256_set1_ps(_cvtsh_ss(static_cast<unsigned short>(p[0] | (p[1] << 8))));
            const __m256 m =
                _mm256_set1_ps(_cvtsh_ss(static_cast<unsigned short>(p[2] | (p[3] << 8))));
            const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 4));
            const __m128i lo = _mm_and_si128(b, _mm_set1_epi8(0x0F));
            const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0x0F));
            v0 = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo)), m);
            v1 = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8))),
                                 m);
            v2 = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi)), m);
            v3 = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8))),
                                 m);
        }
        acc0 = _mm256_fmadd_ps(v0, _mm256_loadu_ps(xb), acc0);
        acc1 = _mm256_fmadd_ps(v1, _mm256_loadu_ps(xb + 8), acc1);
        acc2 = _mm256_fmadd_ps(v2, _mm256_loadu_ps(xb + 16), acc2);
        acc3 = _mm256_fmadd_ps(v3, _mm256_loadu_ps(xb + 24), acc3);
    }
    const __m256 acc = _mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3));
    return headwise::detail::avx2_hsum(acc);
}
#endif

/// GEMM with panels of 64 weight rows dequantized into `panel` and multiplied by ops::gemm.
void dequant_gemm(Type type, const std::uint8_t* w, Index out, Index in, const float* x, Index N,
                  float* y, std::vector<float>& panel) {
    constexpr Index kPanel = 64;
    const auto row_bytes = static_cast<Index>(headwise::quant::row_bytes(type, in));
    panel.resize(static_cast<std::size_t>(kPanel * in));
    for (Index o0 = 0; o0 < out; o0 += kPanel) {
        const Index rows = std::min(kPanel, out - o0);
        for (Index r = 0; r < rows; ++r)
            headwise::quant::dequantize_row(type, w + (o0 + r) * row_bytes, panel.data() + r * in,
                                            in);
        headwise::StridedMatrixMap<float> Y(y + o0, N, rows, Eigen::OuterStride<>(out));
        headwise::ops::gemm<float>(1.0f, headwise::MatrixMap<const float>(x, N, in),
                                   headwise::ops::Op::none,
                                   headwise::MatrixMap<const float>(panel.data(), rows, in),
                                   headwise::ops::Op::transpose, 0.0f, Y);
    }
}

// ---- benchmarks -------------------------------------------------------------------------------

struct Problem {
    std::vector<std::vector<std::uint8_t>> copies;  // W, repeated for the cache:0 cases
    std::vector<float> x;
    std::vector<float> y;
    Index row_bytes = 0;
};

Problem make_problem(Type type, Index out, Index in, Index N, bool cold) {
    std::mt19937_64 rng(static_cast<std::uint64_t>(out * 7 + in));
    std::normal_distribution<float> normal(0.0f, 0.05f);
    std::vector<float> w(static_cast<std::size_t>(out * in));
    for (auto& v : w) v = normal(rng);
    Problem p;
    p.copies.push_back(quantize_matrix(type, w, out, in));
    const double bytes = static_cast<double>(p.copies[0].size());
    const int copies = cold ? static_cast<int>(std::ceil(256e6 / bytes)) : 1;
    for (int c = 1; c < copies; ++c) p.copies.push_back(p.copies[0]);
    p.x.resize(static_cast<std::size_t>(N * in));
    for (auto& v : p.x) v = normal(rng) * 20.0f;
    p.y.resize(static_cast<std::size_t>(N * out));
    p.row_bytes = static_cast<Index>(headwise::quant::row_bytes(type, in));
    return p;
}

void set_counters(benchmark::State& state, double bytes, double flops) {
    state.counters["bytes"] = bytes;
    state.counters["GB/s"] = benchmark::Counter(bytes * static_cast<double>(state.iterations()),
                                                benchmark::Counter::kIsRate);
    state.counters["FLOP/s"] =
        benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
    // time / (bytes / bandwidth): the inverse rate of the bound's seconds.
    state.counters["x_bound"] =
        benchmark::Counter(bytes / read_bandwidth() * static_cast<double>(state.iterations()),
                           benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void gemv(benchmark::State& state, Type type, QuantKernels kernels) {
    const bool cached = state.range(0) != 0;
    const Index out = state.range(1), in = state.range(2);
    Problem p = make_problem(type, out, in, 1, !cached);
    headwise::ops::QuantMatmulWorkspace ws;
    std::size_t c = 0;
    for (auto _ : state) {
        const auto& w = p.copies[c];
        c = c + 1 == p.copies.size() ? 0 : c + 1;
        headwise::ops::quant_matmul(
            headwise::MatrixMap<const float>(p.x.data(), 1, in),
            QuantMatrix{type, w.data(), out, in, static_cast<std::uint64_t>(w.size())}, nullptr,
            headwise::MatrixMap<float>(p.y.data(), 1, out), ws, kernels);
        benchmark::DoNotOptimize(p.y.data());
        benchmark::ClobberMemory();
    }
    set_counters(state, static_cast<double>(p.copies[0].size()),
                 2.0 * static_cast<double>(out * in));
}

void gemm(benchmark::State& state, Type type, QuantKernels kernels) {
    const Index N = state.range(0), out = state.range(1), in = state.range(2);
    Problem p = make_problem(type, out, in, N, false);
    headwise::ops::QuantMatmulWorkspace ws;
    for (auto _ : state) {
        headwise::ops::quant_matmul(headwise::MatrixMap<const float>(p.x.data(), N, in),
                                    QuantMatrix{type, p.copies[0].data(), out, in,
                                                static_cast<std::uint64_t>(p.copies[0].size())},
                                    nullptr, headwise::MatrixMap<float>(p.y.data(), N, out), ws,
                                    kernels);
        benchmark::DoNotOptimize(p.y.data());
        benchmark::ClobberMemory();
    }
    set_counters(state, static_cast<double>(p.copies[0].size()),
                 2.0 * static_cast<double>(N * out * in));
}

#if BENCH_QUANT_AVX2
void gemv_dequant(benchmark::State& state, Type type) {
    const bool cached = state.range(0) != 0;
    const Index out = state.range(1), in = state.range(2);
    Problem p = make_problem(type, out, in, 1, !cached);
    std::size_t c = 0;
    for (auto _ : state) {
        const auto& w = p.copies[c];
        c = c + 1 == p.copies.size() ? 0 : c + 1;
        headwise::detail::parallel_blocks(
            out, std::max<Index>(1, (Index{1} << 17) / in), [&](Index first, Index count) {
                for (Index o = first; o < first + count; ++o)
                    p.y[static_cast<std::size_t>(o)] =
                        dequant_fma_row(type, w.data() + o * p.row_bytes, p.x.data(), in);
            });
        benchmark::DoNotOptimize(p.y.data());
        benchmark::ClobberMemory();
    }
    set_counters(state, static_cast<double>(p.copies[0].size()),
                 2.0 * static_cast<double>(out * in));
}
#endif

void gemm_dequant(benchmark::State& state, Type type) {
    const Index N = state.range(0), out = state.range(1), in = state.range(2);
    Problem p = make_problem(type, out, in, N, false);
    std::vector<float> panel;
    for (auto _ : state) {
        dequant_gemm(type, p.copies[0].data(), out, in, p.x.data(), N, p.y.data(), panel);
        benchmark::DoNotOptimize(p.y.data());
        benchmark::ClobberMemory();
    }
    set_counters(state, static_cast<double>(p.copies[0].size()),
                 2.0 * static_cast<double>(N * out * in));
}

// SmolLM2-135M: hidden 576, k/v 192 (3 heads of 64), MLP 1536, vocabulary 49152; 4096^2; and
// 4096 x 14336, the shape llama.cpp's test-backend-ops times for the decode GEMV.
const std::int64_t kGemvShapes[][2] = {{576, 576},   {192, 576},   {1536, 576},  {576, 1536},
                                       {49152, 576}, {4096, 4096}, {4096, 14336}};
// N, out, in: prefill (N = 512) and small batches around the switch of scheme (kQuantGemmRows).
const std::int64_t kGemmShapes[][3] = {{512, 576, 576}, {512, 1536, 576}, {512, 576, 1536},
                                       {8, 1536, 576},  {16, 1536, 576},  {31, 1536, 576},
                                       {32, 1536, 576}, {64, 1536, 576}};

void register_all() {
    const bool threaded = headwise::detail::max_threads() > 1;
    const auto finish = [threaded](benchmark::internal::Benchmark* b) {
        b->Unit(benchmark::kMicrosecond);
        if (threaded) b->UseRealTime();
    };
    for (const Type t : kFormats) {
        for (const auto k : {QuantKernels::avx2, QuantKernels::portable}) {
            const std::string ks = k == QuantKernels::avx2 ? "avx2" : "portable";
            auto* b =
                benchmark::RegisterBenchmark((std::string("gemv/") + name_of(t) + "/" + ks).c_str(),
                                             [t, k](benchmark::State& s) { gemv(s, t, k); });
            b->ArgNames({"cache", "out", "in"});
            const std::int64_t block = headwise::quant::block_format(t).block_size;
            for (const auto& s : kGemvShapes)
                for (int cached : {1, 0})
                    if (s[1] % block == 0 &&
                        (k == QuantKernels::avx2 || (cached == 1 && s[0] <= 1536)))
                        b->Args({cached, s[0], s[1]});
            finish(b);
            if (k == QuantKernels::portable) continue;
            auto* g =
                benchmark::RegisterBenchmark((std::string("gemm/") + name_of(t) + "/" + ks).c_str(),
                                             [t, k](benchmark::State& s) { gemm(s, t, k); });
            g->ArgNames({"N", "out", "in"});
            for (const auto& s : kGemmShapes)
                if (s[2] % block == 0) g->Args({s[0], s[1], s[2]});
            finish(g);
        }
    }
    for (const Type t : {Type::q4_1, Type::q8_0}) {
#if BENCH_QUANT_AVX2
        auto* b = benchmark::RegisterBenchmark((std::string("gemv_dequant/") + name_of(t)).c_str(),
                                               [t](benchmark::State& s) { gemv_dequant(s, t); });
        b->ArgNames({"cache", "out", "in"});
        for (const auto& s : kGemvShapes)
            for (int cached : {1, 0}) b->Args({cached, s[0], s[1]});
        finish(b);
#endif
        auto* g = benchmark::RegisterBenchmark((std::string("gemm_dequant/") + name_of(t)).c_str(),
                                               [t](benchmark::State& s) { gemm_dequant(s, t); });
        g->ArgNames({"N", "out", "in"});
        for (const auto& s : kGemmShapes) g->Args({s[0], s[1], s[2]});
        finish(g);
    }
}

// ---- accuracy ---------------------------------------------------------------------------------

/// || a - b || / || b || over all entries, in double.
double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
    double num = 0, den = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return std::sqrt(num / den);
}

int accuracy() {
    // Weights ~ N(0, 0.02) (a Llama initialisation), activations ~ N(0, 1); N = 8 rows (the
    // integer kernels, activations rounded) and N = 64 (dequantized panels, float GEMM).
    const Index shapes[][2] = {{576, 576}, {1536, 576}, {576, 1536}};
    std::printf(
        "| format | bits/weight | N | shape (out x in) | product vs float weights | "
        "product vs dequantized weights | dequantized vs float weights |\n"
        "|---|---|---|---|---|---|---|\n");
    for (const Index N : {Index{8}, Index{64}}) {
        for (const Type t : kFormats) {
            const auto f = headwise::quant::block_format(t);
            for (const auto& s : shapes) {
                const Index out = s[0], in = s[1];
                if (in % f.block_size != 0) {
                    std::printf(
                        "| %s | | %ld | %ld x %ld | n/a: rows of %ld are no multiple of %ld | | "
                        "|\n",
                        f.name, static_cast<long>(N), static_cast<long>(out), static_cast<long>(in),
                        static_cast<long>(in), static_cast<long>(f.block_size));
                    continue;
                }
                std::mt19937_64 rng(static_cast<std::uint64_t>(out * 31 + in));
                std::normal_distribution<float> wdist(0.0f, 0.02f), xdist(0.0f, 1.0f);
                std::vector<float> w(static_cast<std::size_t>(out * in)),
                    x(static_cast<std::size_t>(N * in));
                for (auto& v : w) v = wdist(rng);
                for (auto& v : x) v = xdist(rng);
                const std::vector<std::uint8_t> q = quantize_matrix(t, w, out, in);
                std::vector<float> deq(w.size());
                const auto row_bytes = static_cast<Index>(headwise::quant::row_bytes(t, in));
                for (Index r = 0; r < out; ++r)
                    headwise::quant::dequantize_row(t, q.data() + r * row_bytes,
                                                    deq.data() + r * in, in);
                std::vector<float> y(static_cast<std::size_t>(N * out));
                headwise::ops::QuantMatmulWorkspace ws;
                headwise::ops::quant_matmul(
                    headwise::MatrixMap<const float>(x.data(), N, in),
                    QuantMatrix{t, q.data(), out, in, static_cast<std::uint64_t>(q.size())},
                    nullptr, headwise::MatrixMap<float>(y.data(), N, out), ws);
                std::vector<double> yq(y.begin(), y.end()), yf(y.size()), yd(y.size());
                for (Index n = 0; n < N; ++n)
                    for (Index o = 0; o < out; ++o) {
                        double a = 0, b = 0;
                        for (Index i = 0; i < in; ++i) {
                            const double xi = x[static_cast<std::size_t>(n * in + i)];
                            a += static_cast<double>(w[static_cast<std::size_t>(o * in + i)]) * xi;
                            b +=
                                static_cast<double>(deq[static_cast<std::size_t>(o * in + i)]) * xi;
                        }
                        yf[static_cast<std::size_t>(n * out + o)] = a;
                        yd[static_cast<std::size_t>(n * out + o)] = b;
                    }
                std::printf(
                    "| %s | %.4g | %ld | %ld x %ld | %.3e | %.3e | %.3e |\n", f.name,
                    8.0 * static_cast<double>(f.block_bytes) / static_cast<double>(f.block_size),
                    static_cast<long>(N), static_cast<long>(out), static_cast<long>(in),
                    relative_error(yq, yf), relative_error(yq, yd), relative_error(yd, yf));
            }
        }
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc > 1 && std::strcmp(argv[1], "accuracy") == 0) return accuracy();
    if (argc > 1 && std::strcmp(argv[1], "bandwidth") == 0) {
        std::printf("bandwidth %.4g GB/s\n", read_bandwidth() / 1e9);
        return 0;
    }
    register_all();
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::AddCustomContext("read_bandwidth_GBps", std::to_string(read_bandwidth() / 1e9));
    benchmark::AddCustomContext("quant_kernels", headwise::ops::quant_matmul_kernels());
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
