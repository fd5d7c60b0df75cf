// SPDX-License-Identifier: MIT
// The row passes of a softmax -- a row's maximum, and exp(x - shift) with its sum -- vectorised,
// for float with the CPU's widest instruction set picked at run time.
#pragma once

#include <Eigen/Core>

#include <cmath>        // std::log, std::isnan
#include <limits>       // std::numeric_limits
#include <type_traits>  // std::is_same_v

#include "../../config.hpp"
#include "cpu_features.hpp"

#if HEADWISE_X86_DISPATCH
#include <immintrin.h>  // AVX-512 and AVX2 intrinsics (usable under a target attribute)
#endif

// Why: a softmax is two passes over each row of scores (the maximum, then exp of each score minus
// it, summed), and on a CPU its exp is the most expensive thing outside the matrix products.
// Eigen's exp is vectorised for whatever instruction set the build targets, which for a build
// without -march is SSE2: four floats at a time on a machine that does sixteen. The float kernels
// below are compiled for AVX-512 and for AVX2 + FMA (target attributes) and chosen once from the
// CPU (cpu_features.hpp), so a portable build runs the machine's vector width. Double, and other
// compilers or CPUs, use the Eigen versions (portable_*). Every version follows the same rules:
//   row_max:          NaN when any entry is NaN (Eigen's default maxCoeff may skip a NaN);
//   exp_shifted_sum:  y = exp(x - shift), exactly 0 where x - shift < log(smallest normal T)
//                     (-infinity included: a masked score), NaN where x - shift is NaN; returns
//                     the sum of y. x and y may be the same row.

namespace headwise::detail {

/// max_j x[j] over x[0, n), n > 0; NaN when any x[j] is NaN.
template <class T>
T row_max(const T* x, Index n);

/// y[j] = exp(x[j] - shift) for j in [0, n), exactly 0 where x[j] - shift < log(smallest normal
/// T); returns sum_j y[j]. y may be x (in place); they must not otherwise overlap.
template <class T>
T exp_shifted_sum(const T* x, T shift, T* y, Index n);

/// The instruction set the float kernels run here.
inline SimdLevel softmax_rows_level() noexcept { return cpu_simd_level(); }

// ---- portable versions (Eigen) ---------------------------------------------------------------

template <class T>
T portable_row_max(const T* x, Index n) {
    return Eigen::Map<const Eigen::Array<T, 1, Eigen::Dynamic>>(x, n)
        .template maxCoeff<Eigen::PropagateNaN>();
}

template <class T>
T portable_exp_shifted_sum(const T* x, T shift, T* y, Index n) {
    const Eigen::Map<const Eigen::Array<T, 1, Eigen::Dynamic>> X(x, n);
    Eigen::Map<Eigen::Array<T, 1, Eigen::Dynamic>> Y(y, n);
    // Eigen's vectorised exp clamps its argument and returns a tiny positive number far below
    // the smallest normal float, where the true value is 0 or a subnormal that cannot move a sum
    // >= 1: such entries become 0. The fix-up pass runs only for rows that have one (masked keys,
    // a causal diagonal), found with one vectorised min (of the numbers: a NaN must not hide
    // them) before y (maybe x) is written.
    const T kMinExponent = std::log(std::numeric_limits<T>::min());  // -87.3 float, -708.4 double
    const bool flush = X.template minCoeff<Eigen::PropagateNumbers>() - shift < kMinExponent;
    Y = (X - shift).exp();
    if (flush)
        for (Index j = 0; j < n; ++j)
            if (Y[j] < std::numeric_limits<T>::min()) Y[j] = T(0);
    return Y.sum();
}

// ---- float, AVX-512 and AVX2 -------------------------------------------------------------------

#if HEADWISE_X86_DISPATCH

// GCC 12's AVX-512 intrinsics pass a deliberately uninitialised register (_mm512_undefined_ps)
// as the unused merge source of their unmasked forms, and -Wmaybe-uninitialized then fires inside
// them once they are inlined here (GCC bug 105593, fixed in GCC 13): silenced for these kernels
// only, so that a user's -Wall build stays clean.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace simd {

// exp(z) = 2^k exp(r) with k = round(z / ln 2) and r = z - k ln 2, |r| <= ln(2) / 2. ln 2 is
// split in two (Cody and Waite): k ln2_hi is exact for |k| < 2^15 (ln2_hi has 9 significant
// bits), so r keeps its low bits. exp(r) is its Taylor polynomial to degree 7, whose truncation
// error (|r|^8 / 8! < 6e-9) is below half a float ulp (6e-8). z is clamped to [-104, 89] first:
// exp(-104) is below the smallest subnormal float and exp(89) overflows, so the ends are still
// 0 and infinity, and k stays small. The clamps keep a NaN z (min and max return their second
// operand when it is NaN).
constexpr float kExpLowest = -104.0f;
/// log of the smallest normal float, -126 ln 2: below it exp_shifted_sum writes 0.
constexpr float kLogFloatMin = -87.3365447505531f;
constexpr float kExpHighest = 89.0f;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kTaylor[8] = {1.0f,      1.0f,       1.0f / 2,   1.0f / 6,
                              1.0f / 24, 1.0f / 120, 1.0f / 720, 1.0f / 5040};

HEADWISE_TARGET_AVX512 inline __m512 exp_avx512(__m512 z) {
    z = _mm512_max_ps(_mm512_set1_ps(kExpLowest), z);
    z = _mm512_min_ps(_mm512_set1_ps(kExpHighest), z);
    const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(z, _mm512_set1_ps(kLog2e)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(kLn2Hi), z);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(kLn2Lo), r);
    __m512 p = _mm512_set1_ps(kTaylor[7]);
    for (int i = 6; i >= 0; --i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kTaylor[i]));
    return _mm512_scalef_ps(p, k);  // p 2^k, to 0 or infinity at the ends
}

HEADWISE_TARGET_AVX512 inline float row_max_avx512(const float* x, Index n) {
    __m512 m = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    __mmask16 nan = 0;  // max_ps skips a NaN operand, so NaN is looked for on its own
    Index j = 0;
    for (; j + 16 <= n; j += 16) {
        const __m512 v = _mm512_loadu_ps(x + j);
        nan = static_cast<__mmask16>(nan | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q));
        m = _mm512_max_ps(m, v);
    }
    if (j < n) {
        const auto tail = static_cast<__mmask16>((1u << (n - j)) - 1);
        const __m512 v = _mm512_mask_loadu_ps(m, tail, x + j);  // lanes past n keep m
        nan = static_cast<__mmask16>(nan | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q));
        m = _mm512_max_ps(m, v);
    }
    return nan ? std::numeric_limits<float>::quiet_NaN() : _mm512_reduce_max_ps(m);
}

HEADWISE_TARGET_AVX512 inline float exp_shifted_sum_avx512(const float* x, float shift, float* y,
                                                           Index n) {
    const __m512 s = _mm512_set1_ps(shift);
    const __m512 lowest = _mm512_set1_ps(kLogFloatMin);
    __m512 sum = _mm512_setzero_ps();
    Index j = 0;
    for (; j + 16 <= n; j += 16) {
        const __m512 z = _mm512_sub_ps(_mm512_loadu_ps(x + j), s);
        // z >= log(FLT_MIN), or NaN (unordered): kept; below it, exactly 0.
        const __mmask16 keep = _mm512_cmp_ps_mask(z, lowest, _CMP_NLT_UQ);
        const __m512 e = _mm512_maskz_mov_ps(keep, exp_avx512(z));
        _mm512_storeu_ps(y + j, e);
        sum = _mm512_add_ps(sum, e);
    }
    if (j < n) {
        const auto tail = static_cast<__mmask16>((1u << (n - j)) - 1);
        const __m512 z = _mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + j), s);
        const auto keep = static_cast<__mmask16>(tail & _mm512_cmp_ps_mask(z, lowest, _CMP_NLT_UQ));
        const __m512 e = _mm512_maskz_mov_ps(keep, exp_avx512(z));
        _mm512_mask_storeu_ps(y + j, tail, e);
        sum = _mm512_add_ps(sum, e);
    }
    return _mm512_reduce_add_ps(sum);
}

HEADWISE_TARGET_AVX2 inline __m256 exp_avx2(__m256 z) {
    z = _mm256_max_ps(_mm256_set1_ps(kExpLowest), z);
    z = _mm256_min_ps(_mm256_set1_ps(kExpHighest), z);
    const __m256 k = _mm256_round_ps(_mm256_mul_ps(z, _mm256_set1_ps(kLog2e)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(kLn2Hi), z);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(kLn2Lo), r);
    __m256 p = _mm256_set1_ps(kTaylor[7]);
    for (int i = 6; i >= 0; --i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kTaylor[i]));
    // 2^k as 2^k1 2^k2 with k1 = floor(k / 2), k2 = k - k1: each factor's exponent field
    // (k_i + 127) << 23 stays in range for k in [-151, 129], so subnormal results and
    // overflow to infinity come out of the multiplications as they should.
    const __m256i ki = _mm256_cvtps_epi32(k);
    const __m256i k1 = _mm256_srai_epi32(ki, 1);
    const __m256i k2 = _mm256_sub_epi32(ki, k1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 f1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
    const __m256 f2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, f1), f2);
}

/// Lanes [0, count) of an AVX2 mask set (all bits), the others clear; count in [0, 8].
HEADWISE_TARGET_AVX2 inline __m256i first_lanes_avx2(Index count) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

HEADWISE_TARGET_AVX2 inline float sum_lanes_avx2(__m256 v) {
    const __m128 half = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 quarter = _mm_add_ps(half, _mm_movehl_ps(half, half));
    return _mm_cvtss_f32(_mm_add_ss(quarter, _mm_movehdup_ps(quarter)));
}

HEADWISE_TARGET_AVX2 inline float max_lanes_avx2(__m256 v) {
    const __m128 half = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 quarter = _mm_max_ps(half, _mm_movehl_ps(half, half));
    return _mm_cvtss_f32(_mm_max_ss(quarter, _mm_movehdup_ps(quarter)));
}

HEADWISE_TARGET_AVX2 inline float row_max_avx2(const float* x, Index n) {
    const __m256 lowest = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    __m256 m = lowest;
    __m256 nan = _mm256_setzero_ps();  // all bits set in a lane that saw a NaN
    Index j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 v = _mm256_loadu_ps(x + j);
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        m = _mm256_max_ps(m, v);
    }
    if (j < n) {
        const __m256i tail = first_lanes_avx2(n - j);
        const __m256 v =
            _mm256_blendv_ps(lowest, _mm256_maskload_ps(x + j, tail), _mm256_castsi256_ps(tail));
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        m = _mm256_max_ps(m, v);
    }
    return _mm256_movemask_ps(nan) ? std::numeric_limits<float>::quiet_NaN() : max_lanes_avx2(m);
}

HEADWISE_TARGET_AVX2 inline float exp_shifted_sum_avx2(const float* x, float shift, float* y,
                                                       Index n) {
    const __m256 s = _mm256_set1_ps(shift);
    const __m256 lowest = _mm256_set1_ps(kLogFloatMin);
    __m256 sum = _mm256_setzero_ps();
    Index j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 z = _mm256_sub_ps(_mm256_loadu_ps(x + j), s);
        const __m256 keep = _mm256_cmp_ps(z, lowest, _CMP_NLT_UQ);  // as in the AVX-512 kernel
        const __m256 e = _mm256_and_ps(keep, exp_avx2(z));
        _mm256_storeu_ps(y + j, e);
        sum = _mm256_add_ps(sum, e);
    }
    if (j < n) {
        const __m256i tail = first_lanes_avx2(n - j);
        const __m256 z = _mm256_sub_ps(_mm256_maskload_ps(x + j, tail), s);
        const __m256 keep =
            _mm256_and_ps(_mm256_castsi256_ps(tail), _mm256_cmp_ps(z, lowest, _CMP_NLT_UQ));
        const __m256 e = _mm256_and_ps(keep, exp_avx2(z));
        _mm256_maskstore_ps(y + j, tail, e);
        sum = _mm256_add_ps(sum, e);
    }
    return sum_lanes_avx2(sum);
}

}  // namespace simd

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // HEADWISE_X86_DISPATCH

// ---- dispatch ----------------------------------------------------------------------------------

template <class T>
T row_max(const T* x, Index n) {
    HEADWISE_ASSERT(n > 0);
#if HEADWISE_X86_DISPATCH
    if constexpr (std::is_same_v<T, float>) {
        switch (cpu_simd_level()) {
            case SimdLevel::avx512:
                return simd::row_max_avx512(x, n);
            case SimdLevel::avx2:
                return simd::row_max_avx2(x, n);
            case SimdLevel::none:
                break;
        }
    }
#endif
    return portable_row_max(x, n);
}

template <class T>
T exp_shifted_sum(const T* x, T shift, T* y, Index n) {
#if HEADWISE_X86_DISPATCH
    if constexpr (std::is_same_v<T, float>) {
        switch (cpu_simd_level()) {
            case SimdLevel::avx512:
                return simd::exp_shifted_sum_avx512(x, shift, y, n);
            case SimdLevel::avx2:
                return simd::exp_shifted_sum_avx2(x, shift, y, n);
            case SimdLevel::none:
                break;
        }
    }
#endif
    return portable_exp_shifted_sum(x, shift, y, n);
}

}  // namespace headwise::detail
