// SPDX-License-Identifier: MIT
// Dequantization of every format headwise reads (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
// and the K-quants of k_quants.hpp) to float, bit for bit as gguf.quants.dequantize.
#pragma once

#include <cstdint>    // std::uint8_t, std::uint16_t, std::uint32_t, std::int8_t
#include <cstring>    // std::memcpy
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string, std::to_string

#include "../config.hpp"
#include "detail/numpy_float.hpp"
#include "half.hpp"
#include "k_quants.hpp"
#include "types.hpp"

namespace headwise::quant {

// ---- declarations ----------------------------------------------------------------------------

// The 32-value formats (ggml's block_q8_0, block_q4_0, ...), little-endian, byte-aligned:
//   Q8_0  34 bytes (8.5 bits a value):  [0,2) half d, [2,34) int8 q[32];        x = d q
//   Q4_0  18 bytes (4.5 bits):          [0,2) half d, [2,18) nibbles;           x = d (q - 8)
//   Q4_1  20 bytes (5 bits):            [0,2) d, [2,4) half m, [4,20) nibbles;  x = d q + m
//   Q5_0  22 bytes (5.5 bits):          [0,2) d, [2,6) uint32 qh, [6,22) nibbles;
//                                       x = d (q - 16)
//   Q5_1  24 bytes (6 bits):            [0,2) d, [2,4) m, [4,8) qh, [8,24) nibbles; x = d q + m
// Nibbles: value l < 16 is the low nibble of byte l, value 16 + l its high nibble; in Q5_*, bit
// i of qh is value i's fifth bit. Every product and sum is one float operation rounded to float
// (the products are exact for finite scales: an 11-bit half times a value of at most 6 bits).
//
// At the edges, as NumPy computes: a zero scale gives zeros (+m); an infinite scale gives
// infinities of the value's sign and, where q (after its offset) is 0, NaN; a NaN scale gives
// NaNs that keep its sign and payload, made quiet. Where a scale and a minimum are both NaN the
// scale's NaN wins. A NaN made from no NaN (inf * 0, inf - inf) is the machine's default NaN.

/// One block's values into out[0, block size).
void dequantize_block_q8_0(const std::uint8_t* block, float* out) noexcept;
void dequantize_block_q4_0(const std::uint8_t* block, float* out) noexcept;
void dequantize_block_q4_1(const std::uint8_t* block, float* out) noexcept;
void dequantize_block_q5_0(const std::uint8_t* block, float* out) noexcept;
void dequantize_block_q5_1(const std::uint8_t* block, float* out) noexcept;

/// The `n` values of a row (consecutive blocks at `src`; n a multiple of the block size) into
/// dst[0, n). No allocation; src need not be aligned.
void dequantize_row_f32(const std::uint8_t* src, float* dst, Index n) noexcept;
void dequantize_row_f16(const std::uint8_t* src, float* dst, Index n) noexcept;
void dequantize_row_bf16(const std::uint8_t* src, float* dst, Index n) noexcept;
void dequantize_row_q8_0(const std::uint8_t* src, float* dst, Index n) noexcept;
void dequantize_row_q4_0(const std::uint8_t* src, float* dst, Index n) noexcept;
void dequantize_row_q4_1(const std::uint8_t* src, float* dst, Index n) noexcept;
void dequantize_row_q5_0(const std::uint8_t* src, float* dst, Index n) noexcept;
void dequantize_row_q5_1(const std::uint8_t* src, float* dst, Index n) noexcept;

/// The same for any readable `type`: `n` values whose row_bytes(type, n) bytes are at `src`.
/// Throws std::invalid_argument, naming the function, the type and n, for a type headwise does
/// not read or an n that is no multiple of its block size; writes nothing then.
void dequantize_row(Type type, const void* src, float* dst, Index n);

// ---- definitions -----------------------------------------------------------------------------

inline void dequantize_block_q8_0(const std::uint8_t* block, float* out) noexcept {
    const float d = half_to_float(detail::load_u16(block));
    for (int l = 0; l < 32; ++l)
        out[l] = static_cast<float>(static_cast<std::int8_t>(block[2 + l])) * d;
}

inline void dequantize_block_q4_0(const std::uint8_t* block, float* out) noexcept {
    const float d = half_to_float(detail::load_u16(block));
    const std::uint8_t* qs = block + 2;
    for (int l = 0; l < 16; ++l) {
        out[l] = d * static_cast<float>((qs[l] & 0x0F) - 8);
        out[l + 16] = d * static_cast<float>((qs[l] >> 4) - 8);
    }
}

inline void dequantize_block_q4_1(const std::uint8_t* block, float* out) noexcept {
    const float d = half_to_float(detail::load_u16(block));
    const float m = half_to_float(detail::load_u16(block + 2));
    const std::uint8_t* qs = block + 4;
    for (int l = 0; l < 16; ++l) {
        const float p0 = d * static_cast<float>(qs[l] & 0x0F);
        const float p1 = d * static_cast<float>(qs[l] >> 4);
        out[l] = detail::first_nan(p0 + m, p0, m);
        out[l + 16] = detail::first_nan(p1 + m, p1, m);
    }
}

inline void dequantize_block_q5_0(const std::uint8_t* block, float* out) noexcept {
    const float d = half_to_float(detail::load_u16(block));
    const std::uint32_t qh = detail::load_u32(block + 2);
    const std::uint8_t* qs = block + 6;
    for (int l = 0; l < 16; ++l) {
        const int q0 = (qs[l] & 0x0F) | static_cast<int>(((qh >> l) & 1u) << 4);
        const int q1 = (qs[l] >> 4) | static_cast<int>(((qh >> (l + 16)) & 1u) << 4);
        out[l] = d * static_cast<float>(q0 - 16);
        out[l + 16] = d * static_cast<float>(q1 - 16);
    }
}

inline void dequantize_block_q5_1(const std::uint8_t* block, float* out) noexcept {
    const float d = half_to_float(detail::load_u16(block));
    const float m = half_to_float(detail::load_u16(block + 2));
    const std::uint32_t qh = detail::load_u32(block + 4);
    const std::uint8_t* qs = block + 8;
    for (int l = 0; l < 16; ++l) {
        const int q0 = (qs[l] & 0x0F) | static_cast<int>(((qh >> l) & 1u) << 4);
        const int q1 = (qs[l] >> 4) | static_cast<int>(((qh >> (l + 16)) & 1u) << 4);
        const float p0 = d * static_cast<float>(q0);
        const float p1 = d * static_cast<float>(q1);
        out[l] = detail::first_nan(p0 + m, p0, m);
        out[l + 16] = detail::first_nan(p1 + m, p1, m);
    }
}

inline void dequantize_row_f32(const std::uint8_t* src, float* dst, Index n) noexcept {
    // The bits as they are (a NaN's payload and signalling bit included).
    for (Index i = 0; i < n; ++i) {
        const std::uint32_t bits = detail::load_u32(src + 4 * i);
        std::memcpy(dst + i, &bits, sizeof bits);
    }
}

inline void dequantize_row_f16(const std::uint8_t* src, float* dst, Index n) noexcept {
    for (Index i = 0; i < n; ++i) dst[i] = half_to_float(detail::load_u16(src + 2 * i));
}

inline void dequantize_row_bf16(const std::uint8_t* src, float* dst, Index n) noexcept {
    for (Index i = 0; i < n; ++i) {
        const std::uint32_t bits = static_cast<std::uint32_t>(detail::load_u16(src + 2 * i)) << 16;
        std::memcpy(dst + i, &bits, sizeof bits);
    }
}

namespace detail {
template <void (*Block)(const std::uint8_t*, float*) noexcept, Index Bytes>
inline void dequantize_blocks(const std::uint8_t* src, float* dst, Index n) noexcept {
    HEADWISE_ASSERT(n % kBlock32 == 0);
    for (Index b = 0; b < n / kBlock32; ++b) Block(src + b * Bytes, dst + b * kBlock32);
}
}  // namespace detail

inline void dequantize_row_q8_0(const std::uint8_t* src, float* dst, Index n) noexcept {
    detail::dequantize_blocks<dequantize_block_q8_0, 34>(src, dst, n);
}
inline void dequantize_row_q4_0(const std::uint8_t* src, float* dst, Index n) noexcept {
    detail::dequantize_blocks<dequantize_block_q4_0, 18>(src, dst, n);
}
inline void dequantize_row_q4_1(const std::uint8_t* src, float* dst, Index n) noexcept {
    detail::dequantize_blocks<dequantize_block_q4_1, 20>(src, dst, n);
}
inline void dequantize_row_q5_0(const std::uint8_t* src, float* dst, Index n) noexcept {
    detail::dequantize_blocks<dequantize_block_q5_0, 22>(src, dst, n);
}
inline void dequantize_row_q5_1(const std::uint8_t* src, float* dst, Index n) noexcept {
    detail::dequantize_blocks<dequantize_block_q5_1, 24>(src, dst, n);
}

inline void dequantize_row(Type type, const void* src, float* dst, Index n) {
    constexpr const char* fn = "headwise::quant::dequantize_row";
    row_bytes(type, n, fn);  // checks the type and n
    const auto* p = static_cast<const std::uint8_t*>(src);
    switch (type) {
        case Type::f32:
            return dequantize_row_f32(p, dst, n);
        case Type::f16:
            return dequantize_row_f16(p, dst, n);
        case Type::bf16:
            return dequantize_row_bf16(p, dst, n);
        case Type::q8_0:
            return dequantize_row_q8_0(p, dst, n);
        case Type::q4_0:
            return dequantize_row_q4_0(p, dst, n);
        case Type::q4_1:
            return dequantize_row_q4_1(p, dst, n);
        case Type::q5_0:
            return dequantize_row_q5_0(p, dst, n);
        case Type::q5_1:
            return dequantize_row_q5_1(p, dst, n);
        case Type::q4_k:
            return dequantize_row_q4_k(p, dst, n);
        case Type::q6_k:
            return dequantize_row_q6_k(p, dst, n);
    }
}

}  // namespace headwise::quant
