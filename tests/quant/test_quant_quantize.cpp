// SPDX-License-Identifier: MIT
// Tests of headwise/quant/quantize.hpp and half.hpp: quantizing float rows gives the bytes of
// gguf.quants.quantize (tests/golden/gguf, written by make_gguf_golden.py), for blocks of many
// scales, zero and constant blocks, ties, infinities and NaNs; and the half conversions.
#include <headwise/quant/dequantize.hpp>
#include <headwise/quant/half.hpp>
#include <headwise/quant/quantize.hpp>

#include <cmath>      // std::isnan, std::sin, std::abs, std::ldexp, std::nextafter
#include <cstdint>    // std::uint8_t, std::uint16_t, std::uint32_t
#include <cstring>    // std::memcpy
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/golden.hpp"

namespace test_quant_quantize {

using namespace headwise;

namespace {

std::string golden(const std::string& name) {
    return (test::golden_dir() / "gguf" / name).string();
}

std::uint32_t bits(float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

}  // namespace

TEST_CASE("quantize_row gives the bytes of gguf.quants.quantize", "[quant]") {
    const Tensor<float> x = load_npy<float>(golden("quantize_input.npy"));  // [16, 64]
    const auto [name, type] = GENERATE(table<const char*, quant::Type>({
        {"F16", quant::Type::f16},
        {"BF16", quant::Type::bf16},
        {"Q8_0", quant::Type::q8_0},
        {"Q4_0", quant::Type::q4_0},
        {"Q4_1", quant::Type::q4_1},
        {"Q5_0", quant::Type::q5_0},
        {"Q5_1", quant::Type::q5_1},
    }));
    CAPTURE(name);
    // The bytes, one float each: [16, row bytes].
    const Tensor<float> expected =
        load_npy<float>(golden("quantize_" + std::string(name) + ".npy"));
    const Index row = x.shape()[1];
    const auto row_bytes = static_cast<Index>(quant::row_bytes(type, row));
    REQUIRE(expected.shape() == Shape({16, row_bytes}));
    std::vector<std::uint8_t> got(static_cast<std::size_t>(16 * row_bytes), 0xAB);
    for (Index r = 0; r < 16; ++r)
        quant::quantize_row(type, x.data() + r * row, got.data() + r * row_bytes, row);
    int mismatches = 0;
    for (Index i = 0; i < expected.numel(); ++i) {
        const auto want = static_cast<int>(expected.data()[i]);
        if (got[static_cast<std::size_t>(i)] != want && mismatches++ < 5) {
            CAPTURE(i, i / row_bytes, i % row_bytes, int(got[static_cast<std::size_t>(i)]), want);
            CHECK(int(got[static_cast<std::size_t>(i)]) == want);
        }
    }
    CHECK(mismatches == 0);
}

TEST_CASE("a zero block, an infinity and a NaN quantize as documented", "[quant]") {
    float x[32] = {};
    std::uint8_t b[34];
    quant::quantize_block_q4_0(x, b);
    CHECK(b[0] == 0x00);
    CHECK(b[1] == 0x80);                               // d = +0 / -8 = -0
    for (int i = 2; i < 18; ++i) CHECK(b[i] == 0x88);  // q = 8: the offset
    x[3] = NAN;
    quant::quantize_block_q8_0(x, b);
    CHECK(quant::detail::load_u16(b) == 0x7E00);  // d NaN
    for (int i = 2; i < 34; ++i) CHECK(b[i] == 0);
    x[3] = INFINITY;
    x[4] = 2.0f;
    quant::quantize_block_q8_0(x, b);
    CHECK(quant::detail::load_u16(b) == 0x7C00);  // d = inf, 1/d = 0
    CHECK(b[2 + 3] == 0);                         // inf * 0 is NaN: byte 0
    CHECK(b[2 + 4] == 0);
}

TEST_CASE("quantize_row refuses other types and partial blocks", "[quant]") {
    std::vector<float> x(256, 1.0f);
    std::vector<std::uint8_t> out(256, 0xAB);
    CHECK_THROWS_MATCHES(quant::quantize_row(quant::Type::q4_k, x.data(), out.data(), 48),
                         std::invalid_argument,
                         Message("headwise::quant::quantize_row: a row of Q4_K holds a multiple "
                                 "of 256 values, not 48"));
    CHECK_THROWS_MATCHES(quant::quantize_row(quant::Type::q8_0, x.data(), out.data(), 48),
                         std::invalid_argument,
                         Message("headwise::quant::quantize_row: a row of Q8_0 holds a multiple "
                                 "of 32 values, not 48"));
    CHECK_THROWS_MATCHES(
        quant::quantize_row(static_cast<quant::Type>(99), x.data(), out.data(), 32),
        std::invalid_argument,
        Message("headwise::quant::quantize_row: type unknown (99) is not one headwise reads "
                "(F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q6_K)"));
    for (std::uint8_t v : out) CHECK(v == 0xAB);  // nothing written
}

TEST_CASE("quantize then dequantize stays within half a step", "[quant]") {
    std::vector<float> x(64);
    for (int i = 0; i < 64; ++i)
        x[static_cast<std::size_t>(i)] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
    for (const auto type : {quant::Type::q8_0, quant::Type::q4_0, quant::Type::q4_1,
                            quant::Type::q5_0, quant::Type::q5_1}) {
        CAPTURE(quant::block_format(type).name);
        std::vector<std::uint8_t> q(static_cast<std::size_t>(quant::row_bytes(type, 64)));
        std::vector<float> back(64);
        quant::quantize_row(type, x.data(), q.data(), 64);
        quant::dequantize_row(type, q.data(), back.data(), 64);
        const double levels = type == quant::Type::q8_0   ? 127
                              : type == quant::Type::q4_0 ? 8
                              : type == quant::Type::q4_1 ? 15
                              : type == quant::Type::q5_0 ? 16
                                                          : 31;
        // Affine formats span max - min (6) in `levels` steps; symmetric ones max|x| (3).
        const bool affine = type == quant::Type::q4_1 || type == quant::Type::q5_1;
        const double step = (affine ? 6.0 : 3.0) / levels;
        // Symmetric formats reach -levels d on the side of the largest |x| but only
        // (levels - 1) d on the other, where a value may be clipped by a whole step.
        const double bound = (affine ? 0.5 : 1.0) * step + 5e-3;
        for (int i = 0; i < 64; ++i)
            CHECK(std::abs(back[static_cast<std::size_t>(i)] - x[static_cast<std::size_t>(i)]) <=
                  bound);
    }
}

TEST_CASE("half conversions are exact both ways over every half", "[quant]") {
    for (std::uint32_t h = 0; h < 0x10000; ++h) {
        const float f = quant::half_to_float(static_cast<std::uint16_t>(h));
        const std::uint16_t back = quant::float_to_half(f);
        if (back != h) {
            CAPTURE(h, back, bits(f));
            CHECK(back == h);
            break;
        }
    }
    // Rounding: ties to even, overflow to infinity from 65520, underflow below 2^-25.
    CHECK(quant::float_to_half(65519.0f) == 0x7BFF);
    CHECK(quant::float_to_half(65520.0f) == 0x7C00);
    CHECK(quant::float_to_half(std::ldexp(1.0f, -25)) == 0x0000);
    CHECK(quant::float_to_half(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001);
    CHECK(quant::float_to_half(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);      // tie, even
    CHECK(quant::float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02);  // tie, even
    CHECK(quant::float_to_half(-0.0f) == 0x8000);
}

}  // namespace test_quant_quantize
