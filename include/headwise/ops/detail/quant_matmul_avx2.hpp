// SPDX-License-Identifier: MIT
// quant_matmul's AVX2 + FMA + F16C kernels (compiled for those instructions whatever the
// translation unit's -march, run only where the CPU has them): each weight block unpacked to 32
// bytes in a register and multiplied with the 8-bit activation block by vpmaddubsw / vpmaddwd.
#pragma once

#include "cpu_features.hpp"

#if HEADWISE_X86_DISPATCH

#include <immintrin.h>  // AVX2, FMA and F16C intrinsics

#include <algorithm>  // std::max
#include <cstdint>    // std::uint8_t, std::int8_t, std::uint32_t
#include <cstring>    // std::memcpy

#include "../../config.hpp"
#include "../../quant/types.hpp"
#include "quant_matmul_portable.hpp"

namespace headwise::detail {

// Every function here carries the target attribute: an intrinsic inlines only into a function
// compiled for its instruction set. No lambdas (they would not inherit the attribute).

HEADWISE_TARGET_AVX2_F16C inline float avx2_hsum(__m256 v) noexcept {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/// The 32 nibbles of 16 bytes as bytes: value l < 16 the low nibble of byte l, 16 + l its high
/// nibble (the 32-value formats' order).
HEADWISE_TARGET_AVX2_F16C inline __m256i avx2_nibbles(const std::uint8_t* p) noexcept {
    // The 16 bytes in both halves (a load), the high half shifted by 4: two operations.
    const __m256i both =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_and_si256(_mm256_srlv_epi64(both, _mm256_setr_epi64x(0, 0, 4, 4)),
                            _mm256_set1_epi8(0x0F));
}

/// Byte l = 0x10 where bit l of the 32 bits at p is set, else 0 (Q5's fifth bits).
HEADWISE_TARGET_AVX2_F16C inline __m256i avx2_fifth_bits(const std::uint8_t* p) noexcept {
    const std::uint32_t qh =
        static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
        (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
    // Byte l gets byte l / 8 of qh, then keeps bit l % 8 of it.
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(static_cast<int>(qh)),
        _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
    const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

/// The halves at p and p + 2 as floats: [h(p), h(p + 2), 0, 0] (a scale and a minimum).
HEADWISE_TARGET_AVX2_F16C inline __m128 avx2_half_pair(const std::uint8_t* p) noexcept {
    std::uint32_t bits;
    std::memcpy(&bits, p, sizeof bits);
    return _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(bits)));
}

// The formats: load() unpacks block `blk` (of 32 values) of a row into 32 bytes and returns its
// scales in dm = [dw, mw, *, *] (WeightBlock32's meaning; lanes 2, 3 and, without kMin, lane 1
// are not used). kSigned: the bytes are signed (else 0..31); kScale16: sc16 holds the two
// 16-value scales as 16-bit lanes (low half sc[0], high half sc[1]). The formats of 32-value
// blocks also give kBytes (a block's size) and quants(p), the 32 bytes of the block at p, whose
// first 4 bytes are its scale half and, with kMin, its minimum half (the multi-row GEMV reads
// the 4 bytes of several rows' blocks at once; without kMin the second half is not used).
// kRowGroups: the format has gemv_rows<R>, the GEMV of R = 2 or 4 rows at once, used for rows of
// at least kGroupMinStride bytes.
template <class F>
struct Avx2Block32 {
    static constexpr bool kScale16 = false, kRowGroups = true;
    template <int R>
    HEADWISE_TARGET_AVX2_F16C static void gemv_rows(const std::uint8_t* row, Index stride,
                                                    const QuantActivations& act,
                                                    float* out) noexcept;
    HEADWISE_TARGET_AVX2_F16C static __m256i load(const std::uint8_t* row, Index blk, __m128& dm,
                                                  __m256i&) noexcept {
        const std::uint8_t* p = row + blk * F::kBytes;
        dm = avx2_half_pair(p);
        return F::quants(p);
    }
};

struct Avx2Q8_0 : Avx2Block32<Avx2Q8_0> {
    static constexpr bool kSigned = true, kMin = false;
    static constexpr Index kBytes = 34;
    // Rows of fewer bytes (576 values: 612) are multiplied one at a time: from memory, 4 rows
    // of 612 bytes at a time took 1.4-1.6x the one-row kernel's time at 49152 x 576 (whatever
    // the prefetch distance), while at 4096 x 4096 they took 0.6-0.7x of it.
    static constexpr Index kGroupMinStride = 1024;
    HEADWISE_TARGET_AVX2_F16C static __m256i quants(const std::uint8_t* p) noexcept {
        return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
    }
};

struct Avx2Q4_0 : Avx2Block32<Avx2Q4_0> {
    static constexpr bool kSigned = true, kMin = false;
    static constexpr Index kBytes = 18;
    static constexpr Index kGroupMinStride = 0;
    HEADWISE_TARGET_AVX2_F16C static __m256i quants(const std::uint8_t* p) noexcept {
        return _mm256_sub_epi8(avx2_nibbles(p + 2), _mm256_set1_epi8(8));
    }
};

struct Avx2Q4_1 : Avx2Block32<Avx2Q4_1> {
    static constexpr bool kSigned = false, kMin = true;
    static constexpr Index kBytes = 20;
    static constexpr Index kGroupMinStride = 0;
    HEADWISE_TARGET_AVX2_F16C static __m256i quants(const std::uint8_t* p) noexcept {
        return avx2_nibbles(p + 4);
    }
};

struct Avx2Q5_0 : Avx2Block32<Avx2Q5_0> {
    static constexpr bool kSigned = true, kMin = false;
    static constexpr Index kBytes = 22;
    static constexpr Index kGroupMinStride = 0;
    HEADWISE_TARGET_AVX2_F16C static __m256i quants(const std::uint8_t* p) noexcept {
        const __m256i q = _mm256_or_si256(avx2_nibbles(p + 6), avx2_fifth_bits(p + 2));
        return _mm256_sub_epi8(q, _mm256_set1_epi8(16));
    }
};

struct Avx2Q5_1 : Avx2Block32<Avx2Q5_1> {
    static constexpr bool kSigned = false, kMin = true;
    static constexpr Index kBytes = 24;
    static constexpr Index kGroupMinStride = 0;
    HEADWISE_TARGET_AVX2_F16C static __m256i quants(const std::uint8_t* p) noexcept {
        return _mm256_or_si256(avx2_nibbles(p + 8), avx2_fifth_bits(p + 4));
    }
};

struct Avx2Q4_K {
    static constexpr bool kSigned = false, kMin = true, kScale16 = false, kRowGroups = true;
    static constexpr Index kGroupMinStride = 0;
    template <int R>
    HEADWISE_TARGET_AVX2_F16C static void gemv_rows(const std::uint8_t* row, Index stride,
                                                    const QuantActivations& act,
                                                    float* out) noexcept;
    HEADWISE_TARGET_AVX2_F16C static __m256i load(const std::uint8_t* row, Index blk, __m128& dm,
                                                  __m256i&) noexcept {
        const std::uint8_t* p = row + (blk / 8) * 144;
        const int j = static_cast<int>(blk % 8);
        int sc, m;
        quant::q4_k_scale_min(p + 4, j, sc, m);
        // [d sc, -(dmin m)], each product rounded to float as dequantization rounds it.
        dm = _mm_mul_ps(avx2_half_pair(p),
                        _mm_setr_ps(static_cast<float>(sc), static_cast<float>(m), 0.0f, 0.0f));
        dm = _mm_xor_ps(dm, _mm_setr_ps(0.0f, -0.0f, 0.0f, 0.0f));
        // Sub-blocks 2c and 2c + 1 are the low and high nibbles of the same 32 bytes.
        __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16 + 32 * (j / 2)));
        if (j % 2) q = _mm256_srli_epi16(q, 4);
        return _mm256_and_si256(q, _mm256_set1_epi8(0x0F));
    }
};

struct Avx2Q6_K {
    static constexpr bool kSigned = true, kMin = false, kScale16 = true, kRowGroups = true;
    static constexpr Index kGroupMinStride = 0;
    template <int R>
    HEADWISE_TARGET_AVX2_F16C static void gemv_rows(const std::uint8_t* row, Index stride,
                                                    const QuantActivations& act,
                                                    float* out) noexcept;
    HEADWISE_TARGET_AVX2_F16C static __m256i load(const std::uint8_t* row, Index blk, __m128& dm,
                                                  __m256i& sc16) noexcept {
        const std::uint8_t* p = row + (blk / 8) * 210;
        const int j = static_cast<int>(blk % 8);
        const int h = j / 4, c = j % 4;  // values 128 h + [32 c, 32 c + 32)
        const auto* scales = reinterpret_cast<const std::int8_t*>(p + 192);
        // d is the block's last 2 bytes: read those alone (4 could pass the buffer's end).
        dm = _mm_cvtph_ps(_mm_cvtsi32_si128(p[208] | (p[209] << 8)));
        sc16 = _mm256_set_m128i(_mm_set1_epi16(scales[2 * j + 1]), _mm_set1_epi16(scales[2 * j]));
        // Low 4 bits: nibble c / 2 of ql[64 h + 32 (c % 2) + l]; high 2: bits 2c of qh[32 h + l].
        __m256i low =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64 * h + 32 * (c % 2)));
        if (c >= 2) low = _mm256_srli_epi16(low, 4);
        low = _mm256_and_si256(low, _mm256_set1_epi8(0x0F));
        __m256i high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 128 + 32 * h));
        high = _mm256_and_si256(_mm256_srl_epi16(high, _mm_cvtsi32_si128(2 * c)),
                                _mm256_set1_epi8(0x03));
        const __m256i q = _mm256_or_si256(low, _mm256_slli_epi16(high, 4));
        return _mm256_sub_epi8(q, _mm256_set1_epi8(32));
    }
};

/// The activation block's [d, d sum q] pair at ds.
HEADWISE_TARGET_AVX2_F16C inline __m128 avx2_act_pair(const float* ds) noexcept {
    return _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(ds)));
}

/// One block's contribution: acc += (dw xd) dot(q, x) (8 lanes) and acc_min += [., mw xs].
template <class F>
HEADWISE_TARGET_AVX2_F16C inline void avx2_block_step(__m256i q, __m128 dm, __m256i sc16,
                                                      const std::int8_t* xq, const float* ds,
                                                      __m256& acc, __m128& acc_min) noexcept {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
    // vpmaddubsw multiplies unsigned by signed bytes: a signed weight goes in as |q| and the
    // activation takes q's sign (exact; |q| <= 128 and |x| <= 127 keep pair sums in 16 bits).
    const __m256i p16 = F::kSigned
                            ? _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(x, q))
                            : _mm256_maddubs_epi16(q, x);
    const __m256i p32 = _mm256_madd_epi16(p16, F::kScale16 ? sc16 : _mm256_set1_epi16(1));
    const __m128 scales = _mm_mul_ps(dm, avx2_act_pair(ds));  // [dw xd, mw xs, ., .]
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), _mm256_broadcastss_ps(scales), acc);
    if (F::kMin) acc_min = _mm_add_ps(acc_min, scales);
}

/// out[r] = W row . activation row n0 + r, for r < R: the weight block unpacked once for R rows.
template <class F, int R>
HEADWISE_TARGET_AVX2_F16C inline void avx2_block_rows(const std::uint8_t* row,
                                                      const QuantActivations& act, Index n0,
                                                      float* out) noexcept {
    const Index in = act.in, nb = in / 32;
    __m256 acc[R];
    __m128 acc_min[R];
    for (int r = 0; r < R; ++r) {
        acc[r] = _mm256_setzero_ps();
        acc_min[r] = _mm_setzero_ps();
    }
    for (Index blk = 0; blk < nb; ++blk) {
        __m128 dm;
        __m256i sc16 = _mm256_setzero_si256();
        const __m256i q = F::load(row, blk, dm, sc16);
        for (int r = 0; r < R; ++r) {
            const Index n = n0 + r;
            avx2_block_step<F>(q, dm, sc16, act.q + n * in + blk * 32, act.ds + 2 * (n * nb + blk),
                               acc[r], acc_min[r]);
        }
    }
    for (int r = 0; r < R; ++r)
        out[r] = avx2_hsum(acc[r]) + (F::kMin ? _mm_cvtss_f32(_mm_movehdup_ps(acc_min[r])) : 0.0f);
}

/// GEMV: one weight row with activation row 0, two blocks at a time into two accumulators (the
/// FMA's latency would otherwise bound a row).
template <class F>
HEADWISE_TARGET_AVX2_F16C inline float avx2_block_gemv(const std::uint8_t* row,
                                                       const QuantActivations& act) noexcept {
    const Index nb = act.in / 32;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    __m128 min0 = _mm_setzero_ps(), min1 = _mm_setzero_ps();
    Index blk = 0;
    for (; blk + 2 <= nb; blk += 2) {
        __m128 dm0, dm1;
        __m256i sc0 = _mm256_setzero_si256(), sc1 = _mm256_setzero_si256();
        const __m256i q0 = F::load(row, blk, dm0, sc0);
        const __m256i q1 = F::load(row, blk + 1, dm1, sc1);
        avx2_block_step<F>(q0, dm0, sc0, act.q + blk * 32, act.ds + 2 * blk, acc0, min0);
        avx2_block_step<F>(q1, dm1, sc1, act.q + blk * 32 + 32, act.ds + 2 * blk + 2, acc1, min1);
    }
    if (blk < nb) {
        __m128 dm;
        __m256i sc = _mm256_setzero_si256();
        const __m256i q = F::load(row, blk, dm, sc);
        avx2_block_step<F>(q, dm, sc, act.q + blk * 32, act.ds + 2 * blk, acc0, min0);
    }
    const float sum = avx2_hsum(_mm256_add_ps(acc0, acc1));
    return F::kMin ? sum + _mm_cvtss_f32(_mm_movehdup_ps(_mm_add_ps(min0, min1))) : sum;
}

/// How many bytes ahead of the rows it reads the multi-row GEMV prefetches (at least the next
/// group of rows). Measured on the 2-core EPYC (one thread, Q4_1 and Q8_0 at 4096 x 4096 and
/// 49152 x 576 from memory): 2, 4 and 8 KB within noise of each other; a line per row as the
/// blocks pass each 64 bytes did as well as a line per block, and better than the whole next
/// group asked for at its start.
inline constexpr Index kPrefetchBytes = 4096;

/// How many rows ahead of a group of R rows, `stride` bytes apart, the GEMV prefetches:
/// kPrefetchBytes, and at least the next group.
template <int R>
constexpr Index prefetch_rows_ahead(Index stride) noexcept {
    return std::max<Index>(R, (kPrefetchBytes + stride - 1) / stride);
}

/// Asks for the lines of bytes [0, bytes) at p in each of the R rows `ahead` rows on.
template <int R>
HEADWISE_TARGET_AVX2_F16C inline void avx2_prefetch_rows(const std::uint8_t* p, Index stride,
                                                         Index ahead, int bytes) noexcept {
    for (int r = 0; r < R; ++r)
        for (int line = 0; line < bytes; line += 64)
            _mm_prefetch(reinterpret_cast<const char*>(p + (ahead + r) * stride + line),
                         _MM_HINT_T0);
}

/// The integer dot product of a weight block's 32 bytes q with the activation block x: 8 partial
/// sums in 32 bits.
template <class F>
HEADWISE_TARGET_AVX2_F16C inline __m256i avx2_dot32(__m256i q, __m256i x) noexcept {
    // vpmaddubsw multiplies unsigned by signed bytes: a signed weight goes in as |q| and the
    // activation takes q's sign (exact; |q| <= 128 and |x| <= 127 keep pair sums in 16 bits).
    const __m256i p16 = F::kSigned
                            ? _mm256_maddubs_epi16(_mm256_abs_epi8(q), _mm256_sign_epi8(x, q))
                            : _mm256_maddubs_epi16(q, x);
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

/// 4 bytes at p, as the low lane of a vector.
HEADWISE_TARGET_AVX2_F16C inline __m128i avx2_load_u32(const std::uint8_t* p) noexcept {
    std::uint32_t bits;
    std::memcpy(&bits, p, sizeof bits);
    return _mm_cvtsi32_si128(static_cast<int>(bits));
}

/// GEMV of R (2 or 4) weight rows of a 32-value block format, `stride` bytes apart, with
/// activation row 0: out[r] = row r . x. Each activation block and its scales are loaded once
/// for the R rows, and the R rows' block scales are converted and multiplied by the activation
/// scales in one vector ([dw xd, mw xs] of row r in lanes 2r, 2r + 1), then broadcast lane by
/// lane to the rows' accumulators.
template <class F, int R>
HEADWISE_TARGET_AVX2_F16C inline void avx2_block32_gemv_rows(const std::uint8_t* row, Index stride,
                                                             const QuantActivations& act,
                                                             float* out) noexcept {
    static_assert(R == 2 || R == 4, "2 or 4 rows");
    const Index nb = act.in / 32;
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    __m256 acc_min = _mm256_setzero_ps();
    const Index ahead = prefetch_rows_ahead<R>(stride);
    for (Index blk = 0; blk < nb; ++blk) {
        const std::uint8_t* p = row + blk * F::kBytes;
        // The row kPrefetchBytes ahead (at least the next group), a line per row as this
        // one's blocks pass a 64-byte boundary.
        if (((blk * F::kBytes) & 63) < F::kBytes) avx2_prefetch_rows<R>(p, stride, ahead, 1);
        const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act.q + blk * 32));
        __m128i h = _mm_unpacklo_epi32(avx2_load_u32(p), avx2_load_u32(p + stride));
        if (R == 4)
            h = _mm_unpacklo_epi64(h, _mm_unpacklo_epi32(avx2_load_u32(p + 2 * stride),
                                                         avx2_load_u32(p + 3 * stride)));
        // [xd, xs] in every pair of lanes.
        const __m256 xds = _mm256_castpd_ps(
            _mm256_broadcast_sd(reinterpret_cast<const double*>(act.ds + 2 * blk)));
        const __m256 scales = _mm256_mul_ps(_mm256_cvtph_ps(h), xds);
        if (F::kMin) acc_min = _mm256_add_ps(acc_min, scales);
        for (int r = 0; r < R; ++r) {
            const __m256i p32 = avx2_dot32<F>(F::quants(p + r * stride), x);
            const __m256 s = _mm256_permutevar8x32_ps(scales, _mm256_set1_epi32(2 * r));
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), s, acc[r]);
        }
    }
    alignas(32) float mins[8];
    _mm256_store_ps(mins, acc_min);
    for (int r = 0; r < R; ++r) out[r] = avx2_hsum(acc[r]) + (F::kMin ? mins[2 * r + 1] : 0.0f);
}

template <class F>
template <int R>
HEADWISE_TARGET_AVX2_F16C inline void Avx2Block32<F>::gemv_rows(const std::uint8_t* row,
                                                                Index stride,
                                                                const QuantActivations& act,
                                                                float* out) noexcept {
    avx2_block32_gemv_rows<F, R>(row, stride, act, out);
}

/// The activation scales xd (in `d`) and xs = xd sum q (in `s`) of the 8 blocks of 32 from
/// ds[0, 16) (pairs [xd, xs]), block j in lane j.
HEADWISE_TARGET_AVX2_F16C inline void avx2_act_scales8(const float* ds, __m256& d,
                                                       __m256& s) noexcept {
    const __m256 a = _mm256_loadu_ps(ds), b = _mm256_loadu_ps(ds + 8);
    // Within each 128-bit half: [a0 a2 b0 b2] ([d0 d1 d4 d5] low, [d2 d3 d6 d7] high), then the
    // 64-bit quarters put in order.
    d = _mm256_castpd_ps(
        _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0))),
                              _MM_SHUFFLE(3, 1, 2, 0)));
    s = _mm256_castpd_ps(
        _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1))),
                              _MM_SHUFFLE(3, 1, 2, 0)));
}

/// Q4_K's 8 six-bit scales (low 8 bytes) and 8 minima (high 8 bytes) from the 12 bytes at b.
HEADWISE_TARGET_AVX2_F16C inline __m128i avx2_q4_k_scales_mins(const std::uint8_t* b) noexcept {
    std::uint32_t u[3];
    std::memcpy(u, b, sizeof u);
    // q4_k_scale_min's packing, four sub-blocks at a time: bytes j < 4 of sc and m are the low 6
    // bits of b[j] and b[j + 4]; bytes j >= 4 take 4 bits from b[j + 4] and 2 from b[j - 4] (sc)
    // or b[j] (m).
    const std::uint32_t sc_lo = u[0] & 0x3F3F3F3Fu, m_lo = u[1] & 0x3F3F3F3Fu;
    const std::uint32_t sc_hi = (u[2] & 0x0F0F0F0Fu) | ((u[0] >> 2) & 0x30303030u);
    const std::uint32_t m_hi = ((u[2] >> 4) & 0x0F0F0F0Fu) | ((u[1] >> 2) & 0x30303030u);
    return _mm_setr_epi32(static_cast<int>(sc_lo), static_cast<int>(sc_hi), static_cast<int>(m_lo),
                          static_cast<int>(m_hi));
}

/// GEMV of R weight rows of Q4_K (`stride` bytes apart) with activation row 0. Per super-block
/// of 256 values and row: the 8 scales and minima decoded once, d sc and dmin m (each rounded to
/// float as dequantization rounds it) as two vectors, the minima's term in one FMA with the 8
/// activation blocks' xs; per block of 32, the integer dot product scaled by lane j of
/// (d sc) xd. The activation blocks and their scales are loaded once for the R rows.
template <int R>
HEADWISE_TARGET_AVX2_F16C inline void avx2_q4_k_gemv_rows(const std::uint8_t* row, Index stride,
                                                          const QuantActivations& act,
                                                          float* out) noexcept {
    const Index nsb = act.in / 256;
    const Index ahead = prefetch_rows_ahead<R>(stride);
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (Index sb = 0; sb < nsb; ++sb) {
        const std::uint8_t* p = row + sb * 144;
        avx2_prefetch_rows<R>(p, stride, ahead, 144);
        __m256 xd, xs;
        avx2_act_scales8(act.ds + 16 * sb, xd, xs);
        __m256 scale[R];
        for (int r = 0; r < R; ++r) {
            const std::uint8_t* b = p + r * stride;
            const __m128 dmin = avx2_half_pair(b);  // [d, dmin, 0, 0]
            const __m128i scm = avx2_q4_k_scales_mins(b + 4);
            const __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(scm));
            const __m256 m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(scm, 8)));
            const __m256 dw = _mm256_mul_ps(_mm256_broadcastss_ps(dmin), sc);
            const __m256 mw = _mm256_mul_ps(
                _mm256_permutevar8x32_ps(_mm256_castps128_ps256(dmin), _mm256_set1_epi32(1)), m);
            acc[r] = _mm256_fnmadd_ps(mw, xs, acc[r]);
            scale[r] = _mm256_mul_ps(dw, xd);
        }
        const std::int8_t* xq = act.q + sb * 256;
        for (int c = 0; c < 4; ++c) {
            // Sub-blocks 2c and 2c + 1: the low and high nibbles of the same 32 bytes.
            const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 64 * c));
            const __m256i x1 =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 64 * c + 32));
            for (int r = 0; r < R; ++r) {
                const __m256i q = _mm256_loadu_si256(
                    reinterpret_cast<const __m256i*>(p + r * stride + 16 + 32 * c));
                const __m256i q0 = _mm256_and_si256(q, low4);
                const __m256i q1 = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
                const __m256i one = _mm256_set1_epi16(1);
                const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(q0, x0), one);
                const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(q1, x1), one);
                const __m256 s0 = _mm256_permutevar8x32_ps(scale[r], _mm256_set1_epi32(2 * c));
                const __m256 s1 = _mm256_permutevar8x32_ps(scale[r], _mm256_set1_epi32(2 * c + 1));
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), s0, acc[r]);
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), s1, acc[r]);
            }
        }
    }
    for (int r = 0; r < R; ++r) out[r] = avx2_hsum(acc[r]);
}

template <int R>
HEADWISE_TARGET_AVX2_F16C inline void Avx2Q4_K::gemv_rows(const std::uint8_t* row, Index stride,
                                                          const QuantActivations& act,
                                                          float* out) noexcept {
    avx2_q4_k_gemv_rows<R>(row, stride, act, out);
}

/// GEMV of R weight rows of Q6_K (`stride` bytes apart) with activation row 0. The 6-bit
/// values go in unsigned (0 to 63) and 32 times the activations' pair sums, computed once for
/// the R rows, come off: (q - 32) x = q x - 32 x, exactly. The 16 int8 scales are loaded once
/// a super-block and row and meet the pair sums in vpmaddwd; d xd per block of 32 in float.
template <int R>
HEADWISE_TARGET_AVX2_F16C inline void avx2_q6_k_gemv_rows(const std::uint8_t* row, Index stride,
                                                          const QuantActivations& act,
                                                          float* out) noexcept {
    const Index nsb = act.in / 256;
    const Index ahead = prefetch_rows_ahead<R>(stride);
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    const __m256i low4 = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30);
    const __m256i k32 = _mm256_set1_epi8(32);
    for (Index sb = 0; sb < nsb; ++sb) {
        const std::uint8_t* p = row + sb * 210;
        avx2_prefetch_rows<R>(p, stride, ahead, 210);
        __m256 xd, xs;
        avx2_act_scales8(act.ds + 16 * sb, xd, xs);
        __m256 scale[R];
        __m256i sc_lo[R], sc_hi[R];  // the int16 scales 0-7 (8-15) in both halves
        for (int r = 0; r < R; ++r) {
            const std::uint8_t* b = p + r * stride;
            // d is the block's last 2 bytes: read those alone (4 could pass the buffer's end).
            const __m128 d = _mm_cvtph_ps(_mm_cvtsi32_si128(b[208] | (b[209] << 8)));
            scale[r] = _mm256_mul_ps(_mm256_broadcastss_ps(d), xd);
            const __m256i sc16 =
                _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192)));
            sc_lo[r] = _mm256_permute4x64_epi64(sc16, _MM_SHUFFLE(1, 0, 1, 0));
            sc_hi[r] = _mm256_permute4x64_epi64(sc16, _MM_SHUFFLE(3, 2, 3, 2));
        }
        const std::int8_t* xq = act.q + sb * 256;
        for (int h = 0; h < 2; ++h) {
            for (int c = 0; c < 4; ++c) {
                const int j = 4 * h + c;  // values [32 j, 32 j + 32)
                const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32 * j));
                const __m256i x32 = _mm256_maddubs_epi16(k32, x);
                // Scales 2j (low half) and 2j + 1 (high half) as 16-bit lanes: int16 lane
                // (2j) % 8 of the low half and (2j + 1) % 8 of the high half, repeated.
                const int e0 = (2 * j) % 8, e1 = (2 * j + 1) % 8;
                const __m256i pick =
                    _mm256_setr_epi8(static_cast<char>(2 * e0), static_cast<char>(2 * e0 + 1),
                                     static_cast<char>(2 * e0), static_cast<char>(2 * e0 + 1),
                                     static_cast<char>(2 * e0), static_cast<char>(2 * e0 + 1),
                                     static_cast<char>(2 * e0), static_cast<char>(2 * e0 + 1),
                                     static_cast<char>(2 * e0), static_cast<char>(2 * e0 + 1),
                                     static_cast<char>(2 * e0), static_cast<char>(2 * e0 + 1),
                                     static_cast<char>(2 * e0), static_cast<char>(2 * e0 + 1),
                                     static_cast<char>(2 * e0), static_cast<char>(2 * e0 + 1),
                                     static_cast<char>(2 * e1), static_cast<char>(2 * e1 + 1),
                                     static_cast<char>(2 * e1), static_cast<char>(2 * e1 + 1),
                                     static_cast<char>(2 * e1), static_cast<char>(2 * e1 + 1),
                                     static_cast<char>(2 * e1), static_cast<char>(2 * e1 + 1),
                                     static_cast<char>(2 * e1), static_cast<char>(2 * e1 + 1),
                                     static_cast<char>(2 * e1), static_cast<char>(2 * e1 + 1),
                                     static_cast<char>(2 * e1), static_cast<char>(2 * e1 + 1),
                                     static_cast<char>(2 * e1), static_cast<char>(2 * e1 + 1));
                for (int r = 0; r < R; ++r) {
                    const std::uint8_t* b = p + r * stride;
                    // Low 4 bits: nibble c / 2 of ql[64 h + 32 (c % 2) + l]; high 2: bits 2c
                    // of qh[32 h + l], moved to bits 4 and 5.
                    __m256i low = _mm256_loadu_si256(
                        reinterpret_cast<const __m256i*>(b + 64 * h + 32 * (c % 2)));
                    if (c >= 2) low = _mm256_srli_epi16(low, 4);
                    low = _mm256_and_si256(low, low4);
                    __m256i high =
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * h));
                    if (c == 0) high = _mm256_slli_epi16(high, 4);
                    if (c == 1) high = _mm256_slli_epi16(high, 2);
                    if (c == 3) high = _mm256_srli_epi16(high, 2);
                    const __m256i q = _mm256_or_si256(low, _mm256_and_si256(high, bits45));
                    const __m256i p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(q, x), x32);
                    const __m256i sc = _mm256_shuffle_epi8(j < 4 ? sc_lo[r] : sc_hi[r], pick);
                    const __m256i p32 = _mm256_madd_epi16(p16, sc);
                    const __m256 s = _mm256_permutevar8x32_ps(scale[r], _mm256_set1_epi32(j));
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), s, acc[r]);
                }
            }
        }
        static_cast<void>(xs);
    }
    for (int r = 0; r < R; ++r) out[r] = avx2_hsum(acc[r]);
}

template <int R>
HEADWISE_TARGET_AVX2_F16C inline void Avx2Q6_K::gemv_rows(const std::uint8_t* row, Index stride,
                                                          const QuantActivations& act,
                                                          float* out) noexcept {
    avx2_q6_k_gemv_rows<R>(row, stride, act, out);
}

/// How many weight rows ahead the one-row GEMV prefetches.
inline constexpr Index kPrefetchRows = 4;

/// The rows of a block format against N activation rows: four at a time, then the rest.
template <class F>
HEADWISE_TARGET_AVX2_F16C inline void avx2_block_format_rows(const QuantRows& W,
                                                             const QuantActivations& act, Index N,
                                                             float* y, Index y_stride,
                                                             const float* bias) noexcept {
    Index o = 0;
    if constexpr (F::kRowGroups) {
        if (N == 1 && W.stride >= F::kGroupMinStride) {
            // Groups of 4 rows (each kernel prefetches the rows ahead), then a pair.
            for (; o + 4 <= W.count; o += 4) {
                const std::uint8_t* row = W.data + o * W.stride;
                float out[4];
                F::template gemv_rows<4>(row, W.stride, act, out);
                for (int r = 0; r < 4; ++r) y[o + r] = out[r] + (bias ? bias[o + r] : 0.0f);
            }
            if (o + 2 <= W.count) {
                float out[2];
                F::template gemv_rows<2>(W.data + o * W.stride, W.stride, act, out);
                for (int r = 0; r < 2; ++r) y[o + r] = out[r] + (bias ? bias[o + r] : 0.0f);
                o += 2;
            }
        }
    }
    for (; o < W.count; ++o) {
        const std::uint8_t* row = W.data + o * W.stride;
        const float b = bias ? bias[o] : 0.0f;
        if (N == 1) {
            // A decode step streams W from memory once: ask for the row kPrefetchRows ahead,
            // which keeps more cache-line misses in flight than the hardware prefetcher alone
            // while the integer work of this row runs.
            if (o + kPrefetchRows < W.count) {
                const std::uint8_t* ahead = row + kPrefetchRows * W.stride;
                for (Index at = 0; at < W.stride; at += 64)
                    _mm_prefetch(reinterpret_cast<const char*>(ahead + at), _MM_HINT_T0);
            }
            y[o] = avx2_block_gemv<F>(row, act) + b;
            continue;
        }
        float out[4];
        Index n = 0;
        for (; n + 4 <= N; n += 4) {
            avx2_block_rows<F, 4>(row, act, n, out);
            for (int r = 0; r < 4; ++r) y[(n + r) * y_stride + o] = out[r] + b;
        }
        for (; n < N; ++n) {
            avx2_block_rows<F, 1>(row, act, n, out);
            y[n * y_stride + o] = out[0] + b;
        }
    }
}

/// 8 values of a float-type row from value i, as floats.
HEADWISE_TARGET_AVX2_F16C inline __m256 avx2_float_values(quant::Type type, const std::uint8_t* row,
                                                          Index i) noexcept {
    if (type == quant::Type::f32) return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i);
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i));
    if (type == quant::Type::f16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));  // bf16
}

/// The rows of F32, F16 or BF16 against N float activation rows.
HEADWISE_TARGET_AVX2_F16C inline void avx2_float_format_rows(const QuantRows& W,
                                                             const QuantActivations& act, Index N,
                                                             float* y, Index y_stride,
                                                             const float* bias) noexcept {
    const Index in = act.in, in8 = in - in % 8;
    for (Index o = 0; o < W.count; ++o) {
        const std::uint8_t* row = W.data + o * W.stride;
        for (Index n = 0; n < N; ++n) {
            const float* x = act.x + n * act.x_stride;
            __m256 acc = _mm256_setzero_ps();
            for (Index i = 0; i < in8; i += 8)
                acc =
                    _mm256_fmadd_ps(avx2_float_values(W.type, row, i), _mm256_loadu_ps(x + i), acc);
            float sum = avx2_hsum(acc);
            for (Index i = in8; i < in; ++i) sum += float_type_value(W.type, row, i) * x[i];
            y[n * y_stride + o] = sum + (bias ? bias[o] : 0.0f);
        }
    }
}

/// quant_rows_portable's contract, by the AVX2 kernels.
HEADWISE_TARGET_AVX2_F16C inline void quant_rows_avx2(const QuantRows& W,
                                                      const QuantActivations& act, Index N,
                                                      float* y, Index y_stride,
                                                      const float* bias) noexcept {
    using quant::Type;
    switch (W.type) {
        case Type::q8_0:
            return avx2_block_format_rows<Avx2Q8_0>(W, act, N, y, y_stride, bias);
        case Type::q4_0:
            return avx2_block_format_rows<Avx2Q4_0>(W, act, N, y, y_stride, bias);
        case Type::q4_1:
            return avx2_block_format_rows<Avx2Q4_1>(W, act, N, y, y_stride, bias);
        case Type::q5_0:
            return avx2_block_format_rows<Avx2Q5_0>(W, act, N, y, y_stride, bias);
        case Type::q5_1:
            return avx2_block_format_rows<Avx2Q5_1>(W, act, N, y, y_stride, bias);
        case Type::q4_k:
            return avx2_block_format_rows<Avx2Q4_K>(W, act, N, y, y_stride, bias);
        case Type::q6_k:
            return avx2_block_format_rows<Avx2Q6_K>(W, act, N, y, y_stride, bias);
        case Type::f32:
        case Type::f16:
        case Type::bf16:
            return avx2_float_format_rows(W, act, N, y, y_stride, bias);
    }
}

}  // namespace headwise::detail

#endif  // HEADWISE_X86_DISPATCH
