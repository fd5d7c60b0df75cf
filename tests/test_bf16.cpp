// SPDX-License-Identifier: MIT
// Tests of headwise/bf16.hpp: float -> bfloat16 rounds to nearest, ties to even; NaN, infinities,
// signed zeros and subnormals survive; bfloat16 -> float is exact.
#include <headwise/bf16.hpp>

#include <cmath>    // std::isnan, std::isinf, std::ldexp, std::nextafter, std::signbit
#include <cstdint>  // std::uint16_t, std::uint32_t
#include <cstring>  // std::memcpy
#include <limits>   // std::numeric_limits
#include <random>   // std::mt19937_64

#include "support/catch.hpp"

namespace test_bf16 {

using headwise::BFloat16;

namespace {

float from_bits(std::uint32_t u) {
    float f = 0.0f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

std::uint16_t bf16_bits(float f) { return BFloat16::from_float(f).bits; }

/// The nearest bfloat16 by search in double: the candidates are the two bfloat16 values around
/// f; the nearer wins, the one with an even last bit on a tie.
std::uint16_t nearest_by_search(float f) {
    std::uint32_t u = 0;
    std::memcpy(&u, &f, sizeof u);
    const auto lo = static_cast<std::uint16_t>(u >> 16);
    const auto hi = static_cast<std::uint16_t>(lo + 1);
    const double d = f;
    const double dlo = std::abs(d - static_cast<double>(from_bits(std::uint32_t{lo} << 16)));
    const double dhi = std::abs(d - static_cast<double>(from_bits(std::uint32_t{hi} << 16)));
    if (dlo < dhi) return lo;
    if (dhi < dlo) return hi;
    return (lo & 1u) ? hi : lo;
}

}  // namespace

TEST_CASE("bfloat16 keeps exactly the floats with 8 significant bits", "[bf16]") {
    for (float f : {0.0f, 1.0f, -2.0f, 0.5f, 1.5f, 3.0f, 256.0f, -0.0078125f, 255.0f, 1.9921875f})
        CHECK(BFloat16::from_float(f).to_float() == f);
    CHECK(bf16_bits(1.0f) == 0x3F80);
    CHECK(bf16_bits(-2.0f) == 0xC000);
}

TEST_CASE("bfloat16 rounds to nearest with ties to even", "[bf16]") {
    // 1 + 2^-8 is halfway between 1 (even last bit) and 1 + 2^-7: down to 1.
    CHECK(bf16_bits(from_bits(0x3F808000u)) == 0x3F80);
    // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up to the even one.
    CHECK(bf16_bits(from_bits(0x3F818000u)) == 0x3F82);
    // Just above and below a tie go to the nearer.
    CHECK(bf16_bits(from_bits(0x3F808001u)) == 0x3F81);
    CHECK(bf16_bits(from_bits(0x3F807FFFu)) == 0x3F80);
    // A carry into the exponent: the largest float below 2 rounds to 2.
    CHECK(bf16_bits(from_bits(0x3FFFFFFFu)) == 0x4000);
    // The largest finite float is nearer infinity than the largest bfloat16 in bf16's rounding.
    CHECK(bf16_bits(std::numeric_limits<float>::max()) == 0x7F80);
    // Random floats of every magnitude against a search in double.
    std::mt19937_64 rng(26);
    for (int i = 0; i < 100000; ++i) {
        const auto u = static_cast<std::uint32_t>(rng());
        const float f = from_bits(u);
        if (std::isnan(f) || std::isinf(f) || (u & 0x7FFFFFFFu) >= 0x7F7F8000u) continue;
        CAPTURE(u);
        REQUIRE(bf16_bits(f) == nearest_by_search(f));
    }
}

TEST_CASE("bfloat16 keeps NaN, infinities, signed zeros and subnormals", "[bf16]") {
    const float inf = std::numeric_limits<float>::infinity();
    CHECK(bf16_bits(inf) == 0x7F80);
    CHECK(bf16_bits(-inf) == 0xFF80);
    CHECK(std::isnan(BFloat16::from_float(std::numeric_limits<float>::quiet_NaN()).to_float()));
    // A NaN whose payload lies only in the dropped bits must not become infinity.
    CHECK(std::isnan(BFloat16::from_float(from_bits(0x7F800001u)).to_float()));
    CHECK(std::isnan(BFloat16::from_float(from_bits(0xFF800001u)).to_float()));
    CHECK(std::signbit(BFloat16::from_float(from_bits(0xFF800001u)).to_float()));
    CHECK(bf16_bits(-0.0f) == 0x8000);
    const float sub = std::ldexp(1.0f, -130);  // a subnormal bfloat16 holds exactly
    CHECK(BFloat16::from_float(sub).to_float() == sub);
}

TEST_CASE("the array conversions match the scalar ones", "[bf16]") {
    const float src[5] = {1.0f, from_bits(0x3F818000u), -3.25f, 1e-20f, 7e30f};
    BFloat16 h[5];
    float back[5];
    headwise::to_bf16(src, h, 5);
    headwise::to_float(h, back, 5);
    for (int i = 0; i < 5; ++i) {
        CHECK(h[i] == BFloat16::from_float(src[i]));
        CHECK(back[i] == headwise::round_to_bf16(src[i]));
        // Unit roundoff of 8 significant bits: 2^-8 of the magnitude.
        CHECK(std::abs(back[i] - src[i]) <= std::ldexp(std::abs(src[i]), -8));
    }
}

}  // namespace test_bf16
