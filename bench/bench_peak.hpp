// SPDX-License-Identifier: MIT
// The machine's fused multiply-add peak on one core: independent FMA chains in vector registers.
#pragma once

#include <cstdint>  // std::int64_t

#if defined(__AVX512F__) || (defined(__AVX__) && defined(__FMA__))
#include <immintrin.h>  // _mm512_fmadd_ps, _mm256_fmadd_ps and their double forms
#endif

namespace headwise_bench {

/// What one call of fma_peak<T>() ran: the instruction set and the work it did.
struct PeakKernel {
    const char* isa;  // "avx512 (zmm)", "avx2+fma (ymm)" or "scalar (no FMA instructions)"
    int lanes;        // scalars per register
    int chains;       // independent accumulators
};

/// Independent accumulator chains. An FMA has a latency of about 4 cycles and current x86 cores
/// (Zen 4 and 5, Intel since Haswell) issue two per cycle, so at least 8 chains must be in
/// flight to keep both pipes busy; 16 leaves margin and still fits the 32 zmm registers.
inline constexpr int kPeakChains = 16;

/// Runs `steps` rounds of kPeakChains vector FMAs acc = acc * a + b and returns the sum of the
/// accumulators (so nothing can be optimised away). Floating-point operations performed:
/// 2 * lanes * kPeakChains * steps. With |a| < 1 the accumulators converge to b / (1 - a):
/// no overflow and no denormals, whatever `steps` is.
template <class T>
T fma_peak(std::int64_t steps, T a, T b);

/// The kernel fma_peak<T> compiles to in this translation unit.
template <class T>
PeakKernel fma_peak_kernel();

// ------------------------------------------------------------------------------------------------

namespace detail {

// One round: every chain takes one FMA. A fold over a constant-size array; compilers unroll it
// completely, so the accumulators live in registers (checked in the generated assembly:
// 16 independent vfmadd*ps / vfmadd*pd on zmm registers per loop iteration).
template <class V, class Fma>
inline void fma_round(V (&acc)[kPeakChains], V a, V b, Fma fma) {
#if defined(__GNUC__)
#pragma GCC unroll 16
#endif
    for (int c = 0; c < kPeakChains; ++c) acc[c] = fma(acc[c], a, b);
}

// Each chain starts from its own value: chains that start equal and take the same operations
// stay equal, and GCC merges them into one (then the loop measures FMA latency, not throughput).
template <class V, class Splat, class Fma, class Add>
V fma_rounds(std::int64_t steps, V a, V b, Splat splat, Fma fma, Add add) {
    V acc[kPeakChains];
    for (int c = 0; c < kPeakChains; ++c) acc[c] = splat(c);
    for (std::int64_t s = 0; s < steps; ++s) fma_round(acc, a, b, fma);
    for (int width = kPeakChains / 2; width > 0; width /= 2)
        for (int c = 0; c < width; ++c) acc[c] = add(acc[c], acc[c + width]);
    return acc[0];
}

}  // namespace detail

#if defined(__AVX512F__)

template <>
inline float fma_peak<float>(std::int64_t steps, float a, float b) {
    const __m512 r = detail::fma_rounds(
        steps, _mm512_set1_ps(a), _mm512_set1_ps(b),
        [](int c) { return _mm512_set1_ps(0.01f * static_cast<float>(c)); },
        [](__m512 x, __m512 y, __m512 z) { return _mm512_fmadd_ps(x, y, z); },
        [](__m512 x, __m512 y) { return _mm512_add_ps(x, y); });
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, r);
    float sum = 0.0f;
    for (float v : lanes) sum += v;
    return sum;
}

template <>
inline double fma_peak<double>(std::int64_t steps, double a, double b) {
    const __m512d r = detail::fma_rounds(
        steps, _mm512_set1_pd(a), _mm512_set1_pd(b), [](int c) { return _mm512_set1_pd(0.01 * c); },
        [](__m512d x, __m512d y, __m512d z) { return _mm512_fmadd_pd(x, y, z); },
        [](__m512d x, __m512d y) { return _mm512_add_pd(x, y); });
    alignas(64) double lanes[8];
    _mm512_store_pd(lanes, r);
    double sum = 0.0;
    for (double v : lanes) sum += v;
    return sum;
}

template <class T>
PeakKernel fma_peak_kernel() {
    return PeakKernel{"avx512 (zmm)", static_cast<int>(64 / sizeof(T)), kPeakChains};
}

#elif defined(__AVX__) && defined(__FMA__)

template <>
inline float fma_peak<float>(std::int64_t steps, float a, float b) {
    const __m256 r = detail::fma_rounds(
        steps, _mm256_set1_ps(a), _mm256_set1_ps(b),
        [](int c) { return _mm256_set1_ps(0.01f * static_cast<float>(c)); },
        [](__m256 x, __m256 y, __m256 z) { return _mm256_fmadd_ps(x, y, z); },
        [](__m256 x, __m256 y) { return _mm256_add_ps(x, y); });
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, r);
    float sum = 0.0f;
    for (float v : lanes) sum += v;
    return sum;
}

template <>
inline double fma_peak<double>(std::int64_t steps, double a, double b) {
    const __m256d r = detail::fma_rounds(
        steps, _mm256_set1_pd(a), _mm256_set1_pd(b), [](int c) { return _mm256_set1_pd(0.01 * c); },
        [](__m256d x, __m256d y, __m256d z) { return _mm256_fmadd_pd(x, y, z); },
        [](__m256d x, __m256d y) { return _mm256_add_pd(x, y); });
    alignas(32) double lanes[4];
    _mm256_store_pd(lanes, r);
    double sum = 0.0;
    for (double v : lanes) sum += v;
    return sum;
}

template <class T>
PeakKernel fma_peak_kernel() {
    return PeakKernel{"avx2+fma (ymm)", static_cast<int>(32 / sizeof(T)), kPeakChains};
}

#else

// No FMA instructions enabled (a build without -march=native): a multiply and an add per step,
// still two operations. The figure then says what this build can reach, not the machine.
template <class T>
T fma_peak(std::int64_t steps, T a, T b) {
    return detail::fma_rounds(
        steps, a, b, [](int c) { return T(0.01) * static_cast<T>(c); },
        [](T x, T y, T z) { return x * y + z; }, [](T x, T y) { return x + y; });
}

template <class T>
PeakKernel fma_peak_kernel() {
    return PeakKernel{"scalar (no FMA instructions)", 1, kPeakChains};
}

#endif

}  // namespace headwise_bench
