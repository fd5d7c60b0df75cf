// SPDX-License-Identifier: MIT
// The K-quants Q4_K and Q6_K (llama.cpp's super-blocks of 256 values, the bulk of Q4_K_M
// files): their block layouts, dequantization bit for bit as gguf.quants.dequantize, and
// quantization bit for bit as llama.cpp's reference quantizers (llama-quantize without an
// importance matrix).
#pragma once

#include <cmath>    // std::fabs, std::sqrt, std::isnan
#include <cstdint>  // std::uint8_t, std::int8_t, std::uint16_t, std::uint32_t, std::int32_t
#include <cstring>  // std::memcpy, std::memset

#include "../config.hpp"
#include "detail/numpy_float.hpp"
#include "half.hpp"
#include "types.hpp"

namespace headwise::quant {

// ---- declarations ----------------------------------------------------------------------------

/// Q4_K, 144 bytes for 256 values (4.5 bits a value):
///   [0, 2)    d     half: the scale of the scales
///   [2, 4)    dmin  half: the scale of the minima
///   [4, 16)   6-bit scale sc[j] and minimum m[j] of the 8 sub-blocks j of 32 values, packed:
///             for j < 4, sc[j] = b[j] & 63 and m[j] = b[j + 4] & 63; for j >= 4,
///             sc[j] = (b[j + 4] & 15) | ((b[j - 4] >> 6) << 4) and
///             m[j] = (b[j + 4] >> 4) | ((b[j] >> 6) << 4)   (b = these 12 bytes)
///   [16, 144) 4-bit q: value 32 j + l (j = 2 c + s) is nibble s (0 low, 1 high) of byte 32 c + l
/// x = (d sc[j]) q - (dmin m[j]), each product rounded to float.
struct Q4K {
    static constexpr Index kValues = kBlockK;
    static constexpr Index kBytes = 144;
};

/// Q6_K, 210 bytes for 256 values (6.5625 bits a value):
///   [0, 128)   ql: low 4 bits. Value 128 h + r (h = 0, 1; r < 128) has nibble r / 64 of byte
///              64 h + r % 64
///   [128, 192) qh: high 2 bits, bits 2 (r / 32) and up of byte 128 + 32 h + r % 32
///   [192, 208) int8 scale sc[i / 16] of each sub-block of 16 values
///   [208, 210) d half
/// x = (d sc[i / 16]) (q - 32), q = ql | qh << 4, the product d sc rounded to float.
struct Q6K {
    static constexpr Index kValues = kBlockK;
    static constexpr Index kBytes = 210;
};

/// Q4_K's 6-bit scale `sc` and minimum `m` of sub-block j (0 to 7), from the 12 bytes of
/// scales and minima at `scales` (the block's bytes [4, 16)).
constexpr void q4_k_scale_min(const std::uint8_t* scales, int j, int& sc, int& m) noexcept;

/// The 256 values of one Q4_K block at `block` into out[0, 256).
void dequantize_block_q4_k(const std::uint8_t* block, float* out) noexcept;
/// The 256 values of one Q6_K block at `block` into out[0, 256).
void dequantize_block_q6_k(const std::uint8_t* block, float* out) noexcept;

/// The `n` values (a multiple of 256) of the consecutive blocks at `src` into dst[0, n).
void dequantize_row_q4_k(const std::uint8_t* src, float* dst, Index n) noexcept;
void dequantize_row_q6_k(const std::uint8_t* src, float* dst, Index n) noexcept;

// Quantization, as llama.cpp's quantize_row_q4_K_ref and quantize_row_q6_K_ref (ggml-quants.c),
// which llama-quantize runs when it has no importance matrix; every block on its own, in float,
// each operation rounded as there (no fused multiply-add, none of it in double):
//   Q4_K  each sub-block j of 32 values gets a scale s_j and a minimum m_j >= 0 from a search
//         over 21 trial scales, each refitted by weighted least squares with weights
//         sqrt(mean x^2) + |x| (x ~ s_j q - m_j, q in 0..15); the 8 scales and 8 minima are
//         then stored as 6-bit multiples of d = max s_j / 63 and dmin = max m_j / 63, and every
//         q is recomputed from the stored (rounded) d sc_j and dmin m_j.
//   Q6_K  each sub-block of 16 values gets a signed scale from a search over 19 trial scales
//         weighted by x^2 (q in -32..31); the 16 scales are stored as int8 multiples of
//         d = -(the scale of largest magnitude) / 128, and the q recomputed from d sc.
// Rounding is ggml's nearest_int (the float plus 1.5 2^23, its low mantissa bits: ties to
// even). At the edges, as llama.cpp computes (llama-quantize itself refuses NaN and infinite
// inputs, and blocks whose d is not finite): a block of zeros stores all zero bytes (Q6_K: also
// when every value is below 1e-15 in magnitude). A NaN (a quiet NaN of zero payload, the usual
// one) makes the sums it enters NaN, and NaN loses every comparison: in Q6_K the sub-block of 16
// holding it gets scale 0 (it decodes to zeros) and the other sub-blocks are quantized as
// usual; in Q4_K the sub-block of 32 holding it keeps the first guess, min/max (none of the
// trials wins; scale 0, all zeros, when the NaN is its first value), the NaN gets code 0, and
// the other sub-blocks are as usual. An infinity: in Q6_K as a NaN; in Q4_K d (+inf) or dmin
// (-inf) becomes infinite and the block decodes to NaNs. A NaN d would be stored as ggml
// stores one, 0x7E00 with its sign.
//
// Bit identity needs the same float operations in the same order: the functions below are
// compiled without contraction into fused multiply-adds (HEADWISE_QUANT_NO_CONTRACT_*);
// clang's -ffp-contract=fast overrides that pragma and changes the bits.

/// 256 values at `x` into the 144 bytes of one Q4_K block at `block`.
void quantize_block_q4_k(const float* x, std::uint8_t* block) noexcept;
/// 256 values at `x` into the 210 bytes of one Q6_K block at `block`.
void quantize_block_q6_k(const float* x, std::uint8_t* block) noexcept;

// ---- definitions -----------------------------------------------------------------------------

constexpr void q4_k_scale_min(const std::uint8_t* scales, int j, int& sc, int& m) noexcept {
    const std::uint8_t* b = scales;
    if (j < 4) {
        sc = b[j] & 63;
        m = b[j + 4] & 63;
    } else {
        sc = (b[j + 4] & 0x0F) | ((b[j - 4] >> 2) & 0x30);
        m = (b[j + 4] >> 4) | ((b[j] >> 2) & 0x30);
    }
}

inline void dequantize_block_q4_k(const std::uint8_t* block, float* out) noexcept {
    const float d = half_to_float(detail::load_u16(block));
    const float dmin = half_to_float(detail::load_u16(block + 2));
    const std::uint8_t* b = block + 4;
    const std::uint8_t* qs = block + 16;
    for (int j = 0; j < 8; ++j) {
        int sc = 0, m = 0;
        q4_k_scale_min(b, j, sc, m);
        const float dl = d * static_cast<float>(sc);
        const float ml = dmin * static_cast<float>(m);
        const std::uint8_t* q = qs + 32 * (j / 2);
        const int shift = 4 * (j % 2);
        for (int l = 0; l < 32; ++l) {
            const float p = dl * static_cast<float>((q[l] >> shift) & 0x0F);
            out[32 * j + l] = detail::first_nan(p - ml, p, ml);
        }
    }
}

inline void dequantize_block_q6_k(const std::uint8_t* block, float* out) noexcept {
    const std::uint8_t* ql = block;
    const std::uint8_t* qh = block + 128;
    const auto* sc = reinterpret_cast<const std::int8_t*>(block + 192);
    const float d = half_to_float(detail::load_u16(block + 208));
    for (int i = 0; i < 256; ++i) {
        const int h = i / 128, r = i % 128;
        const int low = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0F;
        const int high = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 0x03;
        const float dl = d * static_cast<float>(sc[i / 16]);
        out[i] = dl * static_cast<float>((low | (high << 4)) - 32);
    }
}

inline void dequantize_row_q4_k(const std::uint8_t* src, float* dst, Index n) noexcept {
    HEADWISE_ASSERT(n % kBlockK == 0);
    for (Index b = 0; b < n / kBlockK; ++b)
        dequantize_block_q4_k(src + b * Q4K::kBytes, dst + b * kBlockK);
}

inline void dequantize_row_q6_k(const std::uint8_t* src, float* dst, Index n) noexcept {
    HEADWISE_ASSERT(n % kBlockK == 0);
    for (Index b = 0; b < n / kBlockK; ++b)
        dequantize_block_q6_k(src + b * Q6K::kBytes, dst + b * kBlockK);
}

namespace detail {

/// ggml's nearest_int: adding 1.5 2^23 leaves round-to-nearest-even(v) in the float's low 23
/// bits (offset by 2^22) for |v| < 2^22; other values (and NaN, inf) give what those bits hold.
HEADWISE_QUANT_NO_CONTRACT_ATTRIBUTE
inline int nearest_int(float v) noexcept {
    HEADWISE_QUANT_NO_CONTRACT_BEGIN
    const float shifted = v + 12582912.0f;
    std::int32_t i;
    std::memcpy(&i, &shifted, sizeof i);
    return (i & 0x007FFFFF) - 0x00400000;
}

/// ggml's float-to-half: the nearest half, ties to even, and any NaN as 0x7E00 with its sign.
inline std::uint16_t ggml_half(float f) noexcept {
    if (!std::isnan(f)) return float_to_half(f);
    std::uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return static_cast<std::uint16_t>(((u >> 16) & 0x8000u) | 0x7E00u);
}

/// Scale s and minimum m (returned as -m... stored positive in `the_min`) of one Q4_K
/// sub-block of n values: q = clamp(round((x - min) / s), 0, nmax) for the first guess
/// s = (max - min) / nmax, then for trial steps (nmax + rmin + rdelta k) / (max - min),
/// k = 0..nstep, the weighted least-squares fit of x ~ s q + min (min <= 0) whose weighted
/// squared error is smallest. ggml's make_qkx2_quants with use_mad false.
HEADWISE_QUANT_NO_CONTRACT_ATTRIBUTE
inline float fit_scale_min(int n, int nmax, const float* x, const float* w, std::uint8_t* L,
                           float* the_min, std::uint8_t* Laux, float rmin, float rdelta,
                           int nstep) noexcept {
    HEADWISE_QUANT_NO_CONTRACT_BEGIN
    float min = x[0], max = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        *the_min = -min;
        return 0.0f;
    }
    const float fmax_q = static_cast<float>(nmax);
    float iscale = fmax_q / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * (x[i] - min));
        L[i] = static_cast<std::uint8_t>(l < 0 ? 0 : l > nmax ? nmax : l);
        const float diff = scale * static_cast<float>(L[i]) + min - x[i];
        best_error += w[i] * (diff * diff);
    }
    for (int step = 0; step <= nstep; ++step) {
        iscale = (rmin + rdelta * static_cast<float>(step) + fmax_q) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * (x[i] - min));
            l = l < 0 ? 0 : l > nmax ? nmax : l;
            Laux[i] = static_cast<std::uint8_t>(l);
            const float wl = w[i] * static_cast<float>(l);
            sum_l += wl;
            sum_l2 += wl * static_cast<float>(l);
            sum_xl += wl * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float error = 0;
            for (int i = 0; i < n; ++i) {
                const float diff = this_scale * static_cast<float>(Laux[i]) + this_min - x[i];
                error += w[i] * (diff * diff);
            }
            if (error < best_error) {
                for (int i = 0; i < n; ++i) L[i] = Laux[i];
                best_error = error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/// The signed scale of one Q6_K sub-block of n values (q = clamp(round(x / s), -nmax,
/// nmax - 1), stored in L as q + nmax): the least-squares scale weighted by x^2 of the first
/// guess s = -max / nmax (max the first value of largest magnitude) and of trial steps
/// -(nmax + 0.1 k) / max, k = -9..9, kept when it explains more of the weighted sum of
/// squares. ggml's make_qx_quants with rmse_type 1 and no importance weights.
HEADWISE_QUANT_NO_CONTRACT_ATTRIBUTE
inline float fit_signed_scale(int n, int nmax, const float* x, std::int8_t* L) noexcept {
    HEADWISE_QUANT_NO_CONTRACT_BEGIN
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        const float ax = std::fabs(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < 1e-15f) {  // ggml's GROUP_MAX_EPS: an all-zero group
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.0f;
    }
    const auto clamp = [nmax](int l) { return l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l; };
    float iscale = static_cast<float>(-nmax) / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = clamp(nearest_int(iscale * x[i]));
        L[i] = static_cast<std::int8_t>(l + nmax);
        const float w = x[i] * x[i];
        const auto fl = static_cast<float>(l);
        sumlx += w * x[i] * fl;
        suml2 += w * fl * fl;
    }
    float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int step = -9; step <= 9; ++step) {
        if (step == 0) continue;
        iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(step)) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            const auto fl = static_cast<float>(clamp(nearest_int(iscale * x[i])));
            const float w = x[i] * x[i];
            sumlx += w * x[i] * fl;
            suml2 += w * fl * fl;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i)
                L[i] = static_cast<std::int8_t>(clamp(nearest_int(iscale * x[i])) + nmax);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

}  // namespace detail

HEADWISE_QUANT_NO_CONTRACT_ATTRIBUTE
inline void quantize_block_q4_k(const float* x, std::uint8_t* block) noexcept {
    HEADWISE_QUANT_NO_CONTRACT_BEGIN
    std::uint8_t L[256], Laux[32];
    float weights[32], mins[8], scales[8];
    // Scales are positive (the minimum is taken off first), so both maxima start at 0.
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
        const float* xj = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l) sum_x2 += xj[l] * xj[l];
        const float av_x = std::sqrt(sum_x2 / 32);
        for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xj[l]);
        scales[j] =
            detail::fit_scale_min(32, 15, xj, weights, L + 32 * j, &mins[j], Laux, -1.0f, 0.1f, 20);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    // The 6-bit multiples of d and dmin; ggml keeps the low byte of the rounded value.
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    std::uint8_t* packed = block + 4;
    for (int j = 0; j < 8; ++j) {
        auto ls = static_cast<std::uint8_t>(detail::nearest_int(inv_scale * scales[j]));
        auto lm = static_cast<std::uint8_t>(detail::nearest_int(inv_min * mins[j]));
        if (ls > 63) ls = 63;
        if (lm > 63) lm = 63;
        if (j < 4) {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = static_cast<std::uint8_t>((ls & 0x0F) | ((lm & 0x0F) << 4));
            packed[j - 4] = static_cast<std::uint8_t>(packed[j - 4] | ((ls >> 4) << 6));
            packed[j] = static_cast<std::uint8_t>(packed[j] | ((lm >> 4) << 6));
        }
    }
    const std::uint16_t d_half = detail::ggml_half(max_scale / 63.0f);
    const std::uint16_t dmin_half = detail::ggml_half(max_min / 63.0f);
    detail::store_u16(block, d_half);
    detail::store_u16(block + 2, dmin_half);
    // The q again, from the scales as stored; a sub-block whose scale is 0 keeps the fit's q.
    const float d_all = half_to_float(d_half), dmin_all = half_to_float(dmin_half);
    for (int j = 0; j < 8; ++j) {
        int sc = 0, m = 0;
        q4_k_scale_min(packed, j, sc, m);
        const float d = d_all * static_cast<float>(sc);
        if (d == 0) continue;
        const float dm = dmin_all * static_cast<float>(m);
        for (int l = 0; l < 32; ++l) {
            const int q = detail::nearest_int((x[32 * j + l] + dm) / d);
            L[32 * j + l] = static_cast<std::uint8_t>(q < 0 ? 0 : q > 15 ? 15 : q);
        }
    }
    std::uint8_t* qs = block + 16;
    for (int c = 0; c < 4; ++c)
        for (int l = 0; l < 32; ++l)
            qs[32 * c + l] = static_cast<std::uint8_t>(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
}

HEADWISE_QUANT_NO_CONTRACT_ATTRIBUTE
inline void quantize_block_q6_k(const float* x, std::uint8_t* block) noexcept {
    HEADWISE_QUANT_NO_CONTRACT_BEGIN
    std::int8_t L[256];
    float scales[16];
    float max_scale = 0, max_abs_scale = 0;
    for (int s = 0; s < 16; ++s) {
        scales[s] = detail::fit_signed_scale(16, 32, x + 16 * s, L + 16 * s);
        const float abs_scale = std::fabs(scales[s]);
        if (abs_scale > max_abs_scale) {
            max_abs_scale = abs_scale;
            max_scale = scales[s];
        }
    }
    if (max_abs_scale < 1e-15f) {
        std::memset(block, 0, static_cast<std::size_t>(Q6K::kBytes));
        return;
    }
    // d = -max_scale / 128 so that the largest scale is stored as -128; the others round to
    // -128..127 (ggml keeps the low byte of anything beyond).
    const float iscale = -128.0f / max_scale;
    const std::uint16_t d_half = detail::ggml_half(1 / iscale);
    auto* sc = reinterpret_cast<std::int8_t*>(block + 192);
    for (int s = 0; s < 16; ++s) {
        int v = detail::nearest_int(iscale * scales[s]);
        if (v > 127) v = 127;
        sc[s] = static_cast<std::int8_t>(static_cast<std::uint8_t>(v));
    }
    detail::store_u16(block + 208, d_half);
    const float d_all = half_to_float(d_half);
    for (int s = 0; s < 16; ++s) {
        const float d = d_all * static_cast<float>(sc[s]);
        if (d == 0) continue;
        for (int l = 0; l < 16; ++l) {
            int q = detail::nearest_int(x[16 * s + l] / d);
            q = q < -32 ? -32 : q > 31 ? 31 : q;
            L[16 * s + l] = static_cast<std::int8_t>(q + 32);
        }
    }
    // Value 128 h + r: low nibble in ql[64 h + r % 64] (nibble r / 64), high two bits in
    // qh[32 h + r % 32] (bits 2 (r / 32)).
    std::uint8_t* ql = block;
    std::uint8_t* qh = block + 128;
    for (int h = 0; h < 2; ++h) {
        const std::int8_t* Lh = L + 128 * h;
        for (int l = 0; l < 32; ++l) {
            const int q0 = Lh[l], q1 = Lh[l + 32], q2 = Lh[l + 64], q3 = Lh[l + 96];
            ql[64 * h + l] = static_cast<std::uint8_t>((q0 & 0x0F) | ((q2 & 0x0F) << 4));
            ql[64 * h + 32 + l] = static_cast<std::uint8_t>((q1 & 0x0F) | ((q3 & 0x0F) << 4));
            qh[32 * h + l] =
                static_cast<std::uint8_t>(((q0 >> 4) & 3) | (((q1 >> 4) & 3) << 2) |
                                          (((q2 >> 4) & 3) << 4) | (((q3 >> 4) & 3) << 6));
        }
    }
}

}  // namespace headwise::quant
