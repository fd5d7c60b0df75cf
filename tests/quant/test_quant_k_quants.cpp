// SPDX-License-Identifier: MIT
// Tests of the Q4_K and Q6_K quantizers of headwise/quant/k_quants.hpp: the blocks of 64 rows
// are those llama-quantize wrote (tests/golden/gguf/k_quants_*, by make_k_quants_golden.py),
// and zero blocks, NaN and infinities behave as documented.
#include <headwise/io/gguf.hpp>
#include <headwise/io/npy.hpp>
#include <headwise/quant/dequantize.hpp>
#include <headwise/quant/k_quants.hpp>
#include <headwise/quant/quantize.hpp>

#include <cmath>    // std::sqrt, std::fabs, std::isnan, std::isinf, NAN, INFINITY
#include <cstdint>  // std::uint8_t, std::int8_t
#include <random>   // std::mt19937_64, std::normal_distribution
#include <string>   // std::string
#include <vector>   // std::vector

#include "support/catch.hpp"
#include "support/golden.hpp"

namespace test_quant_k_quants {

using namespace headwise;

namespace {

std::string golden(const std::string& name) {
    return (test::golden_dir() / "gguf" / name).string();
}

std::vector<float> gaussian_row(std::uint64_t seed, float scale) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(256);
    for (float& v : x) v = nd(rng) * scale;
    return x;
}

}  // namespace

TEST_CASE("Q4_K and Q6_K blocks are those llama-quantize writes", "[quant][k_quants]") {
    const Tensor<float> x = load_npy<float>(golden("k_quants_input.npy"));  // [64, 256]
    const io::GgufFile expected = io::load_gguf(golden("k_quants_llama.gguf"));
    REQUIRE(x.shape() == Shape({64, 256}));
    const auto [name, type] = GENERATE(table<const char*, quant::Type>({
        {"Q4_K", quant::Type::q4_k},
        {"Q6_K", quant::Type::q6_k},
    }));
    CAPTURE(name);
    const io::GgufTensorInfo& info = expected.tensor(name);
    REQUIRE(info.type == type);
    const auto bytes = static_cast<Index>(quant::block_format(type).block_bytes);
    REQUIRE(info.bytes == static_cast<std::uint64_t>(64 * bytes));
    std::vector<std::uint8_t> got(static_cast<std::size_t>(64 * bytes), 0xAB);
    quant::quantize_row(type, x.data(), got.data(), 64 * 256);
    const std::uint8_t* want = expected.tensor_data(info);
    int rows_differing = 0;
    for (Index r = 0; r < 64; ++r) {
        Index first = -1;
        for (Index i = 0; i < bytes && first < 0; ++i)
            if (got[static_cast<std::size_t>(r * bytes + i)] != want[r * bytes + i]) first = i;
        if (first >= 0 && rows_differing++ < 5) {
            CAPTURE(r, first, int(got[static_cast<std::size_t>(r * bytes + first)]),
                    int(want[r * bytes + first]));
            CHECK(first < 0);
        }
    }
    CHECK(rows_differing == 0);
}

TEST_CASE("a zero block stores zero bytes", "[quant][k_quants]") {
    std::vector<float> x(256, 0.0f);
    std::vector<std::uint8_t> b4(144, 0xAB), b6(210, 0xAB);
    quant::quantize_block_q4_k(x.data(), b4.data());
    quant::quantize_block_q6_k(x.data(), b6.data());
    for (std::uint8_t v : b4) CHECK(v == 0);
    for (std::uint8_t v : b6) CHECK(v == 0);
    // Q6_K: values below 1e-15 in magnitude count as zero.
    for (float& v : x) v = 9e-16f;
    quant::quantize_block_q6_k(x.data(), b6.data());
    for (std::uint8_t v : b6) CHECK(v == 0);
}

TEST_CASE("Q4_K and Q6_K dequantize close to their input", "[quant][k_quants]") {
    for (const float scale : {1e-3f, 0.02f, 1.0f, 300.0f}) {
        const std::vector<float> x = gaussian_row(7, scale);
        for (const auto type : {quant::Type::q4_k, quant::Type::q6_k}) {
            CAPTURE(scale, quant::block_format(type).name);
            std::vector<std::uint8_t> q(static_cast<std::size_t>(quant::row_bytes(type, 256)));
            std::vector<float> back(256);
            quant::quantize_row(type, x.data(), q.data(), 256);
            quant::dequantize_row(type, q.data(), back.data(), 256);
            double err = 0, norm = 0;
            for (std::size_t i = 0; i < 256; ++i) {
                err += (double(back[i]) - x[i]) * (double(back[i]) - x[i]);
                norm += double(x[i]) * x[i];
            }
            // Gaussian rows: 4-bit codes leave about 7% of the norm, 6-bit ones about 2%.
            CHECK(std::sqrt(err / norm) < (type == quant::Type::q4_k ? 0.09 : 0.025));
        }
    }
}

TEST_CASE("NaN and infinities in K-quant blocks behave as documented", "[quant][k_quants]") {
    std::vector<float> x = gaussian_row(3, 1.0f);
    std::vector<std::uint8_t> b(210);
    std::vector<float> y(256);
    const auto q6_sub_scale = [&](int s) { return static_cast<std::int8_t>(b[192 + s]); };
    for (const float bad : {NAN, INFINITY, -INFINITY}) {
        CAPTURE(bad);
        std::vector<float> v = x;
        v[40] = bad;  // Q6_K sub-block 2, Q4_K sub-block 1
        // Q6_K: the sub-block of 16 holding it gets scale 0 (zeros); the others as usual.
        quant::quantize_block_q6_k(v.data(), b.data());
        quant::dequantize_block_q6_k(b.data(), y.data());
        CHECK(q6_sub_scale(2) == 0);
        for (int i = 32; i < 48; ++i) CHECK(y[static_cast<std::size_t>(i)] == 0.0f);
        for (int i = 0; i < 256; ++i)
            if (i / 16 != 2) CHECK(std::fabs(y[static_cast<std::size_t>(i)] - v[i]) < 0.1f);
        quant::quantize_block_q4_k(v.data(), b.data());
        quant::dequantize_block_q4_k(b.data(), y.data());
        if (std::isnan(bad)) {
            // Q4_K: finite scales; the NaN gets code 0, its sub-block's minimum.
            CHECK(std::isfinite(quant::half_to_float(quant::detail::load_u16(b.data()))));
            CHECK((b[16 + 8] >> 4) == 0);  // value 40 (sub-block 1): high nibble of qs[8]
            for (int i = 0; i < 256; ++i)
                if (i != 40) CHECK(std::fabs(y[static_cast<std::size_t>(i)] - v[i]) < 0.5f);
        } else {
            // Q4_K: +inf makes d infinite, -inf dmin; the block decodes to NaN.
            const int at = bad > 0 ? 0 : 2;
            CHECK(quant::detail::load_u16(b.data() + at) == 0x7C00);
            CHECK(std::isnan(y[0]));
        }
    }
    // A NaN first in a Q4_K sub-block: that sub-block is stored with scale and minimum 0.
    x[64] = NAN;
    quant::quantize_block_q4_k(x.data(), b.data());
    int sc = -1, m = -1;
    quant::q4_k_scale_min(b.data() + 4, 2, sc, m);
    CHECK(sc == 0);
    CHECK(m == 0);
}

TEST_CASE("quantize_row to K-quants checks the row length first", "[quant][k_quants]") {
    std::vector<float> x(512, 1.0f);
    std::vector<std::uint8_t> out(512, 0xAB);
    CHECK_THROWS_MATCHES(quant::quantize_row(quant::Type::q6_k, x.data(), out.data(), 288),
                         std::invalid_argument,
                         Catch::Matchers::Message("headwise::quant::quantize_row: a row of Q6_K "
                                                  "holds a multiple of 256 values, not 288"));
    for (std::uint8_t v : out) CHECK(v == 0xAB);
}

}  // namespace test_quant_k_quants
