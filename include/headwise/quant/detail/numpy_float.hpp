// SPDX-License-Identifier: MIT
// The float operations of gguf.quants (NumPy on x86-64) that C++ does not spell the same way:
// which NaN a sum of two NaNs returns, float-to-byte casts of any value, round-half-away.
#pragma once

#include <cmath>    // std::fabs, std::floor, std::isnan
#include <cstdint>  // std::uint8_t, std::int32_t, std::uint32_t
#include <cstring>  // std::memcpy

// Quantizing rounds x * id, then adds: a fused multiply-add (which compilers may form from
// x * id + c when FMA instructions are enabled, e.g. by -march=native) rounds once and gives
// other bits than NumPy's two roundings. The functions that must round twice carry this.
#if defined(__clang__)
#define HEADWISE_QUANT_NO_CONTRACT_BEGIN _Pragma("clang fp contract(off)")
#define HEADWISE_QUANT_NO_CONTRACT_ATTRIBUTE
#elif defined(__GNUC__)
#define HEADWISE_QUANT_NO_CONTRACT_BEGIN
#define HEADWISE_QUANT_NO_CONTRACT_ATTRIBUTE __attribute__((optimize("fp-contract=off")))
#else  // MSVC contracts only under /fp:fast or /fp:contract
#define HEADWISE_QUANT_NO_CONTRACT_BEGIN
#define HEADWISE_QUANT_NO_CONTRACT_ATTRIBUTE
#endif

namespace headwise::quant::detail {

/// `x` made a quiet NaN (the top payload bit set), as an arithmetic operation returns it.
inline float quiet(float x) noexcept {
    std::uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    u |= 0x00400000u;
    std::memcpy(&x, &u, sizeof u);
    return x;
}

/// `r` = a + b or a - b as computed; when it is a NaN and an operand was one, the NaN x86's
/// SSE returns for `a op b` (the first NaN operand, made quiet), which NumPy's result carries.
/// A compiler may swap the operands of a commutative sum or fuse it with a product, which
/// changes which payload the hardware returns; this puts it back. A NaN made from no NaN
/// (inf - inf) is the hardware's default NaN either way.
inline float first_nan(float r, float a, float b) noexcept {
    if (!std::isnan(r)) return r;
    if (std::isnan(a)) return quiet(a);
    if (std::isnan(b)) return quiet(b);
    return r;
}

/// NumPy's `astype(np.uint8)` / `astype(np.int8)` of a float on x86-64, as a byte: the value
/// truncated to a 32-bit integer and its low byte kept (300 -> 44, -1 -> 255), and 0 for NaN,
/// infinities and magnitudes from 2^31 (whose conversion yields 0x80000000).
inline std::uint8_t low_byte(float t) noexcept {
    if (!(std::fabs(t) < 2147483648.0f)) return 0;
    return static_cast<std::uint8_t>(static_cast<std::uint32_t>(static_cast<std::int32_t>(t)));
}

/// gguf.quants.np_roundf: round half away from zero, as C's roundf, computed as it does
/// (|n| floored, plus 1 when the fraction doubled reaches 1), NaN staying NaN.
inline float round_half_away(float n) noexcept {
    const float a = std::fabs(n);
    const float floored = std::floor(a);
    const float b = floored + std::floor(2.0f * (a - floored));
    if (n > 0.0f) return b;
    if (n < 0.0f) return -b;
    return n;  // zero or NaN (np.sign(n) * b)
}

/// Little-endian loads and stores of the blocks' fields.
inline std::uint16_t load_u16(const std::uint8_t* p) noexcept {
    return static_cast<std::uint16_t>(p[0] | (p[1] << 8));
}
inline std::uint32_t load_u32(const std::uint8_t* p) noexcept {
    return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
           (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}
inline void store_u16(std::uint8_t* p, std::uint16_t v) noexcept {
    p[0] = static_cast<std::uint8_t>(v);
    p[1] = static_cast<std::uint8_t>(v >> 8);
}
inline void store_u32(std::uint8_t* p, std::uint32_t v) noexcept {
    for (int i = 0; i < 4; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}

}  // namespace headwise::quant::detail
