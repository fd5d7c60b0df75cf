// SPDX-License-Identifier: MIT
// Quantization of float rows to every type headwise reads: F32, F16, BF16, Q8_0, Q4_0, Q4_1,
// Q5_0 and Q5_1 bit for bit as gguf.quants.quantize, Q4_K and Q6_K bit for bit as llama.cpp's
// reference quantizers (ggml-quants.c; k_quants.hpp).
#pragma once

#include <cmath>      // std::fabs, std::isnan, std::trunc
#include <cstdint>    // std::uint8_t, std::uint16_t, std::uint32_t
#include <cstring>    // std::memcpy
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string

#include "../bf16.hpp"
#include "../config.hpp"
#include "detail/numpy_float.hpp"
#include "half.hpp"
#include "k_quants.hpp"
#include "types.hpp"

namespace headwise::quant {

// ---- declarations ----------------------------------------------------------------------------

// Each 32-value block is quantized on its own (layouts in dequantize.hpp), in float, as
// gguf.quants computes it:
//   Q8_0  d = max|x| / 127, q = round-half-away(x / d)
//   Q4_0  d = -x_max / 8 with x_max the first value of largest |x|, q = trunc(x / d + 8.5)
//   Q5_0  the same with 16 and 16.5
//   Q4_1  d = (max - min) / 15, m = min, q = trunc((x - min) / d + 0.5)
//   Q5_1  the same with 31
// where "x / d" is x times 1/d (0 when d is 0), q is kept to 0..15 (0..31), and d and m are
// stored as the halves nearest them (so a block whose d exceeds 65504 stores an infinite d). A
// zero block gives d = 0 (Q4_0/Q5_0: -0, as -0/8) and q = 0 (Q4_0: 8, Q5_0: 16, the offsets).
// Non-finite values: a NaN in a block makes its d (and Q4_1/Q5_1's m) NaN and every q 0; an
// infinity makes d infinite, and the other values' q are those of a zero 1/d. (NumPy's casts
// of NaN and out-of-range floats to bytes are x86's; headwise does the same everywhere.)

/// One block of 32 values into `block` (34, 18, 20, 22 or 24 bytes).
void quantize_block_q8_0(const float* x, std::uint8_t* block) noexcept;
void quantize_block_q4_0(const float* x, std::uint8_t* block) noexcept;
void quantize_block_q4_1(const float* x, std::uint8_t* block) noexcept;
void quantize_block_q5_0(const float* x, std::uint8_t* block) noexcept;
void quantize_block_q5_1(const float* x, std::uint8_t* block) noexcept;

/// Quantizes the `n` values at `src` into row_bytes(type, n) bytes at `dst`, for F32 (the bits
/// as they are), F16 (float_to_half), BF16 (nearest, ties to even; a NaN made quiet, as
/// BFloat16::from_float), the five 32-value formats and the K-quants Q4_K and Q6_K
/// (quantize_block_q4_k, quantize_block_q6_k). Throws std::invalid_argument, naming the
/// function, the type and n, before writing anything, for a type headwise does not read or an n
/// that is no multiple of the block size.
void quantize_row(Type type, const float* src, void* dst, Index n);

// ---- definitions -----------------------------------------------------------------------------

namespace detail {

/// np.max / np.min over a block: a NaN anywhere makes them NaN.
inline void block_max_min(const float* x, float& max, float& min) noexcept {
    max = x[0];
    min = x[0];
    for (int l = 1; l < 32; ++l) {
        if (std::isnan(max)) break;
        if (std::isnan(x[l])) {
            max = min = x[l];
            break;
        }
        if (x[l] > max) max = x[l];
        if (x[l] < min) min = x[l];
    }
}

/// np.argmax(abs(x)): the first value of largest magnitude, a NaN counting as largest.
inline float first_largest_magnitude(const float* x) noexcept {
    int best = 0;
    float amax = std::fabs(x[0]);
    for (int l = 1; l < 32 && !std::isnan(amax); ++l) {
        const float a = std::fabs(x[l]);
        if (std::isnan(a) || a > amax) {
            amax = a;
            best = l;
        }
    }
    return x[best];
}

/// Q4_0 / Q5_0: d = x_max / -levels, q = clip(trunc(x id + offset), 0, top).
HEADWISE_QUANT_NO_CONTRACT_ATTRIBUTE
inline void quantize_symmetric(const float* x, float levels, float offset, std::uint8_t top,
                               std::uint16_t& d_half, std::uint8_t* q) noexcept {
    HEADWISE_QUANT_NO_CONTRACT_BEGIN
    // A NaN's sign and payload as NumPy's division keeps them: a compiler may compute
    // x / -levels as -(x / levels), which flips a NaN's sign.
    const float x_max = first_largest_magnitude(x);
    const float d = std::isnan(x_max) ? quiet(x_max) : x_max / -levels;
    const float id = d == 0.0f ? 0.0f : 1.0f / d;
    for (int l = 0; l < 32; ++l) {
        const float scaled = x[l] * id;
        const std::uint8_t b = low_byte(std::trunc(scaled + offset));
        q[l] = b > top ? top : b;
    }
    d_half = float_to_half(d);
}

/// Q4_1 / Q5_1: d = (max - min) / levels, q = clip(trunc((x - min) id + 0.5), 0, levels).
HEADWISE_QUANT_NO_CONTRACT_ATTRIBUTE
inline void quantize_affine(const float* x, float levels, std::uint16_t& d_half,
                            std::uint16_t& m_half, std::uint8_t* q) noexcept {
    HEADWISE_QUANT_NO_CONTRACT_BEGIN
    float max, min;
    block_max_min(x, max, min);
    const float d = (max - min) / levels;
    const float id = d == 0.0f ? 0.0f : 1.0f / d;
    const auto top = static_cast<std::uint8_t>(levels);
    for (int l = 0; l < 32; ++l) {
        const float scaled = (x[l] - min) * id;
        const std::uint8_t b = low_byte(std::trunc(scaled + 0.5f));
        q[l] = b > top ? top : b;
    }
    d_half = float_to_half(d);
    m_half = float_to_half(min);
}

inline void pack_nibbles(const std::uint8_t* q, std::uint8_t* qs) noexcept {
    for (int l = 0; l < 16; ++l)
        qs[l] = static_cast<std::uint8_t>((q[l] & 0x0F) | ((q[l + 16] & 0x0F) << 4));
}

inline std::uint32_t fifth_bits(const std::uint8_t* q) noexcept {
    std::uint32_t qh = 0;
    for (int l = 0; l < 32; ++l) qh |= static_cast<std::uint32_t>((q[l] >> 4) & 1u) << l;
    return qh;
}

}  // namespace detail

inline void quantize_block_q8_0(const float* x, std::uint8_t* block) noexcept {
    float amax = 0.0f;
    for (int l = 0; l < 32; ++l) {
        const float a = std::fabs(x[l]);
        if (std::isnan(a)) {
            amax = a;
            break;
        }
        if (a > amax) amax = a;
    }
    const float d = amax / 127.0f;
    const float id = d == 0.0f ? 0.0f : 1.0f / d;
    for (int l = 0; l < 32; ++l)
        block[2 + l] = detail::low_byte(detail::round_half_away(x[l] * id));
    detail::store_u16(block, float_to_half(d));
}

inline void quantize_block_q4_0(const float* x, std::uint8_t* block) noexcept {
    std::uint8_t q[32];
    std::uint16_t d;
    detail::quantize_symmetric(x, 8.0f, 8.5f, 15, d, q);
    detail::store_u16(block, d);
    detail::pack_nibbles(q, block + 2);
}

inline void quantize_block_q5_0(const float* x, std::uint8_t* block) noexcept {
    std::uint8_t q[32];
    std::uint16_t d;
    detail::quantize_symmetric(x, 16.0f, 16.5f, 31, d, q);
    detail::store_u16(block, d);
    detail::store_u32(block + 2, detail::fifth_bits(q));
    detail::pack_nibbles(q, block + 6);
}

inline void quantize_block_q4_1(const float* x, std::uint8_t* block) noexcept {
    std::uint8_t q[32];
    std::uint16_t d, m;
    detail::quantize_affine(x, 15.0f, d, m, q);
    detail::store_u16(block, d);
    detail::store_u16(block + 2, m);
    detail::pack_nibbles(q, block + 4);
}

inline void quantize_block_q5_1(const float* x, std::uint8_t* block) noexcept {
    std::uint8_t q[32];
    std::uint16_t d, m;
    detail::quantize_affine(x, 31.0f, d, m, q);
    detail::store_u16(block, d);
    detail::store_u16(block + 2, m);
    detail::store_u32(block + 4, detail::fifth_bits(q));
    detail::pack_nibbles(q, block + 8);
}

inline void quantize_row(Type type, const float* src, void* dst, Index n) {
    constexpr const char* fn = "headwise::quant::quantize_row";
    const BlockFormat f = block_format(type, fn);
    row_bytes(type, n, fn);  // checks n
    auto* out = static_cast<std::uint8_t*>(dst);
    const Index blocks = n / f.block_size;
    for (Index i = 0; i < blocks; ++i) {
        const float* x = src + i * f.block_size;
        std::uint8_t* b = out + i * f.block_bytes;
        switch (type) {
            case Type::f32: {
                std::uint32_t bits;
                std::memcpy(&bits, x, sizeof bits);
                detail::store_u32(b, bits);
                break;
            }
            case Type::f16:
                detail::store_u16(b, float_to_half(*x));
                break;
            case Type::bf16:
                detail::store_u16(b, BFloat16::from_float(*x).bits);
                break;
            case Type::q8_0:
                quantize_block_q8_0(x, b);
                break;
            case Type::q4_0:
                quantize_block_q4_0(x, b);
                break;
            case Type::q4_1:
                quantize_block_q4_1(x, b);
                break;
            case Type::q5_0:
                quantize_block_q5_0(x, b);
                break;
            case Type::q5_1:
                quantize_block_q5_1(x, b);
                break;
            case Type::q4_k:
                quantize_block_q4_k(x, b);
                break;
            case Type::q6_k:
                quantize_block_q6_k(x, b);
                break;
        }
    }
}

}  // namespace headwise::quant
