// SPDX-License-Identifier: MIT
// Tests of headwise/quant/dequantize.hpp and k_quants.hpp: every format against
// gguf.quants.dequantize bit for bit (tests/golden/gguf, written by make_gguf_golden.py), on
// random blocks whose scales include zeros, the extremes, infinities and NaNs.
#include <headwise/io/gguf.hpp>
#include <headwise/quant/dequantize.hpp>
#include <headwise/quant/k_quants.hpp>

#include <cmath>      // std::isnan, std::isinf
#include <cstdint>    // std::uint8_t, std::uint32_t
#include <cstring>    // std::memcpy
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/golden.hpp"

namespace test_quant_dequantize {

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

/// Every value of `got` and `expected` compared by its bits; the count of values compared.
Index compare_bits(const float* got, const Tensor<float>& expected, const std::string& what) {
    Index mismatches = 0;
    for (Index i = 0; i < expected.numel(); ++i)
        if (bits(got[i]) != bits(expected.data()[i])) {
            if (mismatches++ < 5) {
                CAPTURE(what, i, bits(got[i]), bits(expected.data()[i]), got[i],
                        expected.data()[i]);
                CHECK(bits(got[i]) == bits(expected.data()[i]));
            }
        }
    CHECK(mismatches == 0);
    return expected.numel();
}

}  // namespace

TEST_CASE("every format dequantizes bit for bit as gguf.quants.dequantize", "[quant]") {
    const io::GgufFile file = io::load_gguf(golden("types_v3.gguf"));
    Index compared = 0;
    int special = 0;  // NaN and infinite values among the expected ones
    for (const char* name :
         {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q6_K"}) {
        CAPTURE(name);
        const io::GgufTensorInfo& info = file.tensor(name);
        const Tensor<float> expected =
            load_npy<float>(golden("dequant_" + std::string(name) + ".npy"));
        REQUIRE(expected.shape() == info.shape());
        // The whole tensor as one row of blocks, through the dispatching entry point ...
        std::vector<float> got(static_cast<std::size_t>(info.numel));
        quant::dequantize_row(info.type, file.tensor_data(info), got.data(), info.numel);
        compared += compare_bits(got.data(), expected, name);
        // ... and row by row through GgufFile::to_float.
        const Tensor<float> rows = file.to_float(name);
        compared += compare_bits(rows.data(), expected, name);
        for (Index i = 0; i < expected.numel(); ++i) special += !std::isfinite(expected.data()[i]);
    }
    CHECK(compared == 2 * (3 * 128 + 5 * 1024 + 2 * 6144));
    CHECK(special > 100);  // the fixtures do reach the edges
}

TEST_CASE("dequantization at the edges: zero, infinite and NaN scales", "[quant]") {
    // Q8_0 block: d = +inf; q = 0, 1, -1, then zeros.
    std::uint8_t block[34] = {0x00, 0x7C, 0, 1, 0xFF};
    float out[32];
    quant::dequantize_block_q8_0(block, out);
    CHECK(std::isnan(out[0]));  // inf * 0
    CHECK(out[1] == INFINITY);
    CHECK(out[2] == -INFINITY);
    // d = NaN with a payload: every value is that NaN, made quiet, its sign kept.
    block[0] = 0x55;
    block[1] = 0xFE;  // 0xFE55
    quant::dequantize_block_q8_0(block, out);
    CHECK(bits(out[1]) == 0xFFCAA000u);
    // Q4_1 with d and m both NaN: d's NaN wins, as NumPy's (d * q) + m.
    std::uint8_t q41[20] = {0x01, 0x7C, 0x55, 0xFE};  // d = sNaN 0x7C01, m = 0xFE55
    quant::dequantize_block_q4_1(q41, out);
    CHECK(bits(out[0]) == 0x7FC02000u);
    // Zero scale and minimum: zeros.
    std::uint8_t zero[20] = {};
    for (int i = 4; i < 20; ++i) zero[i] = 0xFF;
    quant::dequantize_block_q4_1(zero, out);
    for (float v : out) CHECK(bits(v) == 0u);
}

TEST_CASE("dequantize_row refuses a type it does not read and a partial block", "[quant]") {
    std::vector<std::uint8_t> src(64);
    std::vector<float> dst(64, 7.0f);
    CHECK_THROWS_MATCHES(quant::dequantize_row(quant::Type::q4_0, src.data(), dst.data(), 33),
                         std::invalid_argument,
                         Message("headwise::quant::dequantize_row: a row of "
                                 "Q4_0 holds a multiple of 32 values, not 33"));
    CHECK_THROWS_MATCHES(
        quant::dequantize_row(static_cast<quant::Type>(17), src.data(), dst.data(), 256),
        std::invalid_argument,
        Message("headwise::quant::dequantize_row: type IQ2_XS (17) is not one "
                "headwise reads (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, "
                "Q4_K, Q6_K)"));
    for (float v : dst) CHECK(v == 7.0f);  // nothing written
}

}  // namespace test_quant_dequantize
