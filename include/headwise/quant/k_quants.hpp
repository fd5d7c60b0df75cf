// SPDX-License-Identifier: MIT
// The K-quants Q4_K and Q6_K (llama.cpp's super-blocks of 256 values, the bulk of Q4_K_M
// files): their block layouts and dequantization, bit for bit as gguf.quants.dequantize.
#pragma once

#include <cstdint>  // std::uint8_t, std::int8_t

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

}  // namespace headwise::quant
