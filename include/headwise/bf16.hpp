// SPDX-License-Identifier: MIT
// BFloat16: the bfloat16 storage type (float's sign, exponent and top 7 mantissa bits) and its
// conversions to and from float.
#pragma once

#include <cstddef>  // std::size_t
#include <cstdint>  // std::uint16_t, std::uint32_t
#include <cstring>  // std::memcpy

#include "config.hpp"

namespace headwise {

/// A bfloat16 number: the upper 16 bits of an IEEE-754 float (1 sign, 8 exponent, 7 stored
/// mantissa bits, so 8 significant bits and float's range). A storage type only: headwise
/// converts to float to compute, and accumulates in float. Conversion from float rounds to the
/// nearest bfloat16, ties to even, as PyTorch's and the AVX512_BF16 instructions' do; NaN stays
/// NaN (made quiet), infinities stay infinities, finite values beyond the largest bfloat16 round
/// to infinity.
struct BFloat16 {
    std::uint16_t bits = 0;

    /// The bfloat16 nearest to `f` (ties to even).
    static BFloat16 from_float(float f) noexcept {
        std::uint32_t u = 0;
        std::memcpy(&u, &f, sizeof u);
        BFloat16 h;
        if ((u & 0x7FFFFFFFu) > 0x7F800000u) {  // NaN: keep the sign and top payload, set quiet
            h.bits = static_cast<std::uint16_t>((u >> 16) | 0x0040u);
            return h;
        }
        // Round to nearest even on the 16 dropped bits: adding 0x7FFF rounds halves down,
        // adding one more when the kept lowest bit is odd rounds them to even. A carry into
        // the exponent is the correctly rounded result (up to infinity at the top).
        u += 0x7FFFu + ((u >> 16) & 1u);
        h.bits = static_cast<std::uint16_t>(u >> 16);
        return h;
    }
    /// The float with the same value (exact).
    float to_float() const noexcept {
        const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
        float f = 0.0f;
        std::memcpy(&f, &u, sizeof f);
        return f;
    }
    explicit operator float() const noexcept { return to_float(); }

    friend bool operator==(BFloat16 a, BFloat16 b) noexcept { return a.bits == b.bits; }
    friend bool operator!=(BFloat16 a, BFloat16 b) noexcept { return a.bits != b.bits; }
};

static_assert(sizeof(BFloat16) == 2, "BFloat16 must be two bytes, as stored in files");

/// `f` rounded to the nearest bfloat16, as a float: what a product in bf16 sees of it.
inline float round_to_bf16(float f) noexcept { return BFloat16::from_float(f).to_float(); }

/// dst[i] = bf16(src[i]) for i < n.
inline void to_bf16(const float* src, BFloat16* dst, Index n) noexcept {
    for (Index i = 0; i < n; ++i) dst[i] = BFloat16::from_float(src[i]);
}

/// dst[i] = float(src[i]) for i < n (exact).
inline void to_float(const BFloat16* src, float* dst, Index n) noexcept {
    // Widening is a 16-bit shift; on the raw bits the loop vectorises.
    for (Index i = 0; i < n; ++i) {
        const std::uint32_t u = static_cast<std::uint32_t>(src[i].bits) << 16;
        std::memcpy(dst + i, &u, sizeof u);
    }
}

}  // namespace headwise
