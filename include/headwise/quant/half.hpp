// SPDX-License-Identifier: MIT
// IEEE half precision (binary16) to and from float, bit for bit as NumPy converts (the scales
// of every quantized format are halves).
#pragma once

#include <cstdint>  // std::uint16_t, std::uint32_t
#include <cstring>  // std::memcpy

#include "../config.hpp"

namespace headwise::quant {

// ---- declarations ----------------------------------------------------------------------------

/// The float of half `h` (exact): zeros, subnormals, infinities, and NaNs with their sign and
/// payload (shifted into the float's top payload bits; a signalling NaN stays signalling), as
/// NumPy's `astype(np.float32)` of a float16.
float half_to_float(std::uint16_t h) noexcept;

/// The half nearest to `f`, ties to even, as NumPy's `astype(np.float16)`: beyond the largest
/// half (65504), from 65520 up, infinity; below 2^-25 in magnitude, a signed zero; a NaN keeps
/// its sign and the top 10 bits of its payload (made 1 if they are all zero, so that it stays
/// a NaN; a signalling NaN is not made quiet).
std::uint16_t float_to_half(float f) noexcept;

/// dst[i] = half_to_float(src[i]) for i < n.
void half_to_float(const std::uint16_t* src, float* dst, Index n) noexcept;

// ---- definitions -----------------------------------------------------------------------------

inline float half_to_float(std::uint16_t h) noexcept {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const std::uint32_t exponent = (h >> 10) & 0x1Fu;
    std::uint32_t mantissa = h & 0x3FFu;
    std::uint32_t bits;
    if (exponent == 0x1F) {
        bits = sign | 0x7F800000u | (mantissa << 13);  // infinity, or NaN with its payload
    } else if (exponent != 0) {
        bits = sign | ((exponent + 112) << 23) | (mantissa << 13);  // rebias 15 -> 127
    } else if (mantissa == 0) {
        bits = sign;
    } else {
        // A subnormal m 2^-24 is normal in float: shift m's leading bit to the implicit place.
        std::uint32_t e = 113;
        while ((mantissa & 0x400u) == 0) {
            mantissa <<= 1;
            --e;
        }
        bits = sign | (e << 23) | ((mantissa & 0x3FFu) << 13);
    }
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

inline std::uint16_t float_to_half(float f) noexcept {
    std::uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
    const std::uint32_t a = u & 0x7FFFFFFFu;
    if (a >= 0x7F800000u) {
        if (a == 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7C00u);
        std::uint32_t nan = 0x7C00u | ((a & 0x7FFFFFu) >> 13);
        if (nan == 0x7C00u) nan = 0x7C01u;  // the payload's top bits were zero: keep it a NaN
        return static_cast<std::uint16_t>(sign | nan);
    }
    if (a >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // rounds past 65504
    if (a < 0x33000000u) return sign;                                         // below 2^-25
    const std::uint32_t e = a >> 23;
    const std::uint32_t m = a & 0x7FFFFFu;
    std::uint32_t r, rest, half;
    if (e < 113) {
        // A half subnormal: the value in units of 2^-24 is (m | 2^23) 2^(e - 126 - 23 + 23).
        const std::uint32_t shift = 126 - e;  // 14..24
        const std::uint32_t full = m | 0x800000u;
        r = full >> shift;
        rest = full & ((1u << shift) - 1u);
        half = 1u << (shift - 1);
    } else {
        r = ((e - 112) << 10) | (m >> 13);
        rest = m & 0x1FFFu;
        half = 0x1000u;
    }
    // Round to nearest, ties to even; a carry out of the mantissa steps the exponent, as it
    // should.
    if (rest > half || (rest == half && (r & 1u))) ++r;
    return static_cast<std::uint16_t>(sign | r);
}

inline void half_to_float(const std::uint16_t* src, float* dst, Index n) noexcept {
    for (Index i = 0; i < n; ++i) dst[i] = half_to_float(src[i]);
}

}  // namespace headwise::quant
