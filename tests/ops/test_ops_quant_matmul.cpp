// SPDX-License-Identifier: MIT
// Tests of headwise/ops/quant_matmul.hpp: every format, GEMV and GEMM, portable and AVX2
// kernels, against double loops over the dequantized weights (quant::dequantize_row) with the
// activations rounded as the kernels round them (tight), and with the float activations (within
// the activation rounding's bound); strided operands, bias; the errors.
#include <headwise/detail/parallel.hpp>  // HEADWISE_PARALLEL, <omp.h> when set
#include <headwise/ops/quant_matmul.hpp>

#include <headwise/quant/dequantize.hpp>
#include <headwise/quant/quantize.hpp>

#include <cmath>      // std::abs, std::isnan
#include <cstdint>    // std::uint8_t, std::int8_t
#include <limits>     // std::numeric_limits
#include <random>     // std::mt19937_64, std::normal_distribution, std::uniform_int_distribution
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string
#include <vector>     // std::vector

#include "support/catch.hpp"

namespace test_ops_quant_matmul {

using headwise::Index;
using headwise::MatrixMap;
using headwise::ops::QuantKernels;
using headwise::ops::QuantMatrix;
using headwise::quant::Type;

namespace {

/// A [rows, cols] weight of `type`: random normal floats quantized by quant::quantize_row,
/// or, for Q4_K and Q6_K (which headwise does not quantize), random blocks with small scales.
struct Weight {
    Type type;
    Index rows, cols;
    std::vector<std::uint8_t> bytes;
    std::vector<float> deq;  // [rows, cols] the dequantized values

    Weight(Type t, Index r, Index c, std::mt19937_64& rng) : type(t), rows(r), cols(c) {
        const auto row_bytes = static_cast<Index>(headwise::quant::row_bytes(t, c));
        bytes.resize(static_cast<std::size_t>(r * row_bytes));
        if (t == Type::q4_k || t == Type::q6_k) {
            std::uniform_int_distribution<int> byte(0, 255);
            for (auto& b : bytes) b = static_cast<std::uint8_t>(byte(rng));
            std::uniform_real_distribution<float> scale(0.001f, 0.02f);
            const Index block = t == Type::q4_k ? 144 : 210;
            for (Index at = 0; at < static_cast<Index>(bytes.size()); at += block) {
                std::uint8_t* p = bytes.data() + at;
                const auto put = [](std::uint8_t* q, float v) {
                    const std::uint16_t h = headwise::quant::float_to_half(v);
                    q[0] = static_cast<std::uint8_t>(h);
                    q[1] = static_cast<std::uint8_t>(h >> 8);
                };
                if (t == Type::q4_k) {
                    put(p, scale(rng));
                    put(p + 2, scale(rng));
                } else {
                    put(p + 208, scale(rng));
                }
            }
        } else {
            std::normal_distribution<float> normal(0.0f, 1.0f);
            std::vector<float> f(static_cast<std::size_t>(c));
            for (Index i = 0; i < r; ++i) {
                for (auto& v : f) v = normal(rng);
                headwise::quant::quantize_row(t, f.data(), bytes.data() + i * row_bytes, c);
            }
        }
        deq.resize(static_cast<std::size_t>(r * c));
        for (Index i = 0; i < r; ++i)
            headwise::quant::dequantize_row(t, bytes.data() + i * row_bytes, deq.data() + i * c, c);
    }
    QuantMatrix matrix() const {
        return QuantMatrix{type, bytes.data(), rows, cols,
                           static_cast<std::uint64_t>(bytes.size())};
    }
    double at(Index i, Index j) const { return deq[static_cast<std::size_t>(i * cols + j)]; }
};

/// X [N, in] rounded as quant_matmul rounds it (unchanged for the float formats).
std::vector<float> rounded_activations(Type type, const std::vector<float>& x, Index N, Index in) {
    if (!headwise::ops::quant_rounds_activations(type, N)) return x;
    std::vector<float> out(x.size());
    std::vector<std::int8_t> q(static_cast<std::size_t>(in));
    std::vector<float> ds(static_cast<std::size_t>(2 * (in / 32)));
    for (Index n = 0; n < N; ++n) {
        headwise::detail::quantize_activations(x.data() + n * in, in, q.data(), ds.data());
        for (Index i = 0; i < in; ++i)
            out[static_cast<std::size_t>(n * in + i)] =
                static_cast<float>(static_cast<double>(q[static_cast<std::size_t>(i)]) *
                                   ds[static_cast<std::size_t>(2 * (i / 32))]);
    }
    return out;
}

const Type kTypes[] = {Type::q8_0, Type::q4_0, Type::q4_1, Type::q5_0, Type::q5_1,
                       Type::q4_k, Type::q6_k, Type::f16,  Type::bf16, Type::f32};

}  // namespace

TEST_CASE("quant_matmul is the product of the dequantized weights and the rounded activations",
          "[quant_matmul]") {
    const Type type = GENERATE(from_range(std::begin(kTypes), std::end(kTypes)));
    const QuantKernels kernels = GENERATE(QuantKernels::portable, QuantKernels::avx2);
    const auto [N, in, out] = GENERATE(table<Index, Index, Index>({{1, 256, 1},
                                                                   {1, 512, 7},
                                                                   {1, 768, 33},
                                                                   {2, 256, 5},
                                                                   {3, 512, 9},
                                                                   {5, 256, 3},
                                                                   {7, 512, 11},
                                                                   {9, 256, 1},
                                                                   {13, 768, 5},
                                                                   {31, 256, 3},
                                                                   {32, 256, 65},
                                                                   {45, 512, 67},
                                                                   {70, 256, 129}}));
    if (kernels == QuantKernels::avx2 &&
        std::string(headwise::ops::quant_matmul_kernels()) != "avx2") {
        WARN("skipped: this CPU has no AVX2 + FMA + F16C");
        return;
    }
    const bool bias_on = N % 2 == 1;
    CAPTURE(headwise::quant::block_format(type).name, kernels == QuantKernels::avx2, N, in, out,
            bias_on);
    std::mt19937_64 rng(static_cast<std::uint64_t>(N * 100000 + in * 100 + out));
    const Weight W(type, out, in, rng);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(static_cast<std::size_t>(N * in)), b(static_cast<std::size_t>(out));
    for (auto& v : x) v = normal(rng);
    for (auto& v : b) v = normal(rng);
    const std::vector<float> xr = rounded_activations(type, x, N, in);

    // Y as a column block of a wider matrix: the kernels honour its row stride.
    const Index y_stride = out + 3;
    std::vector<float> ybuf(static_cast<std::size_t>(N * y_stride), -7.0f);
    headwise::StridedMatrixMap<float> Y(ybuf.data(), N, out, Eigen::OuterStride<>(y_stride));
    headwise::ops::QuantMatmulWorkspace ws;
    headwise::ops::quant_matmul(MatrixMap<const float>(x.data(), N, in), W.matrix(),
                                bias_on ? b.data() : nullptr, Y, ws, kernels);

    double worst_tight = 0, worst_float = 0;
    for (Index n = 0; n < N; ++n) {
        for (Index o = 0; o < out; ++o) {
            double ref = bias_on ? b[static_cast<std::size_t>(o)] : 0.0, ref_float = ref;
            double magnitude = 0, rounding_bound = 0;
            for (Index i = 0; i < in; ++i) {
                const double w = W.at(o, i);
                ref += w * xr[static_cast<std::size_t>(n * in + i)];
                ref_float += w * x[static_cast<std::size_t>(n * in + i)];
                magnitude += std::abs(w * xr[static_cast<std::size_t>(n * in + i)]);
                rounding_bound += std::abs(w * (xr[static_cast<std::size_t>(n * in + i)] -
                                                x[static_cast<std::size_t>(n * in + i)]));
            }
            const double y = ybuf[static_cast<std::size_t>(n * y_stride + o)];
            // Float accumulation of `in` products: a few ulps of the sum of magnitudes.
            const double tight = 1e-5 * magnitude + 1e-6;
            // Against the float activations the rounding adds at most sum |w (xr - x)|, each
            // |xr - x| being at most half the block's step max|x| / 127.
            const double loose = tight + rounding_bound;
            worst_tight = std::max(worst_tight, std::abs(y - ref) / tight);
            worst_float = std::max(worst_float, std::abs(y - ref_float) / loose);
            if (std::abs(y - ref) > tight || std::abs(y - ref_float) > loose) {
                CAPTURE(n, o, y, ref, ref_float, tight, loose);
                FAIL("quant_matmul differs from the reference");
            }
        }
        // Nothing beyond the block was written.
        for (Index o = out; o < y_stride; ++o)
            REQUIRE(ybuf[static_cast<std::size_t>(n * y_stride + o)] == -7.0f);
    }
    CAPTURE(worst_tight, worst_float);
    SUCCEED();
}

TEST_CASE("quant_matmul: both kernel sets agree, threads or not, and N = 0 writes nothing",
          "[quant_matmul]") {
    if (std::string(headwise::ops::quant_matmul_kernels()) != "avx2") {
        WARN("skipped: this CPU has no AVX2 + FMA + F16C");
        return;
    }
    std::mt19937_64 rng(5);
    const Type type = GENERATE(from_range(std::begin(kTypes), std::end(kTypes)));
    const Index N = 6, in = 512, out = 301;
    const Weight W(type, out, in, rng);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(static_cast<std::size_t>(N * in));
    for (auto& v : x) v = normal(rng);
    std::vector<float> y1(static_cast<std::size_t>(N * out)), y2(y1.size());
    headwise::ops::QuantMatmulWorkspace ws;
    headwise::ops::quant_matmul(MatrixMap<const float>(x.data(), N, in), W.matrix(), nullptr,
                                MatrixMap<float>(y1.data(), N, out), ws, QuantKernels::portable);
    headwise::ops::quant_matmul(MatrixMap<const float>(x.data(), N, in), W.matrix(), nullptr,
                                MatrixMap<float>(y2.data(), N, out), ws);
    for (std::size_t i = 0; i < y1.size(); ++i)
        REQUIRE(std::abs(y1[i] - y2[i]) <= 1e-4f * (1.0f + std::abs(y1[i])));
    float untouched = 3.0f;
    headwise::ops::quant_matmul(MatrixMap<const float>(x.data(), 0, in), W.matrix(), nullptr,
                                MatrixMap<float>(&untouched, 0, out), ws);
    REQUIRE(untouched == 3.0f);
}

TEST_CASE("quant_matmul: the GEMV's groups of rows agree with the portable kernels",
          "[quant_matmul]") {
    // The AVX2 GEMV multiplies 4 rows at a time, then a pair, then one (Q8_0 only for rows of
    // at least 1024 bytes): every count of rows from 1 to 9, the shortest rows (one block of 32
    // or 256 values) and long ones, and a NaN in one activation block reaching every row.
    if (std::string(headwise::ops::quant_matmul_kernels()) != "avx2") {
        WARN("skipped: this CPU has no AVX2 + FMA + F16C");
        return;
    }
    const Type type = GENERATE(Type::q8_0, Type::q4_0, Type::q4_1, Type::q5_0, Type::q5_1,
                               Type::q4_k, Type::q6_k);
    const Index block = headwise::quant::block_format(type).block_size;
    const bool one_block = GENERATE(true, false);
    const Index in = one_block ? block : 1024;
    const bool nan = GENERATE(false, true);
    for (Index out = 1; out <= 9; ++out) {
        CAPTURE(headwise::quant::block_format(type).name, in, out, nan);
        std::mt19937_64 rng(static_cast<std::uint64_t>(in * 10 + out));
        const Weight W(type, out, in, rng);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> x(static_cast<std::size_t>(in)), b(static_cast<std::size_t>(out));
        for (auto& v : x) v = normal(rng);
        for (auto& v : b) v = normal(rng);
        if (nan) x[static_cast<std::size_t>(in - 5)] = std::numeric_limits<float>::quiet_NaN();
        std::vector<float> y1(static_cast<std::size_t>(out)), y2(y1.size());
        headwise::ops::QuantMatmulWorkspace ws;
        headwise::ops::quant_matmul(MatrixMap<const float>(x.data(), 1, in), W.matrix(), b.data(),
                                    MatrixMap<float>(y1.data(), 1, out), ws,
                                    QuantKernels::portable);
        headwise::ops::quant_matmul(MatrixMap<const float>(x.data(), 1, in), W.matrix(), b.data(),
                                    MatrixMap<float>(y2.data(), 1, out), ws, QuantKernels::avx2);
        for (Index o = 0; o < out; ++o) {
            const float a = y1[static_cast<std::size_t>(o)], v = y2[static_cast<std::size_t>(o)];
            CAPTURE(o, a, v);
            if (nan) {
                REQUIRE(std::isnan(v));
            } else {
                REQUIRE(std::abs(a - v) <= 1e-4f * (1.0f + std::abs(a)));
            }
        }
    }
}

TEST_CASE("quant_matmul: the GEMV gives the same bits on 1 thread as on 2", "[quant_matmul]") {
    // The threads split the output rows at multiples of 4, where the AVX2 GEMV's groups of
    // rows start: a split elsewhere would multiply a row in another group (another order of
    // sums) on 2 threads than on 1. 1030 rows of 256 values split in two (each thread's share
    // is above kQuantParallelGrain) at a row that is not a multiple of 4 unless aligned.
#if HEADWISE_PARALLEL
    const Type type = GENERATE(Type::q4_1, Type::q4_k, Type::q6_k, Type::q8_0);
    CAPTURE(headwise::quant::block_format(type).name);
    const Index in = 256, out = 1030;
    std::mt19937_64 rng(23);
    const Weight W(type, out, in, rng);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(static_cast<std::size_t>(in));
    for (auto& v : x) v = normal(rng);
    const int saved = omp_get_max_threads();
    std::vector<float> y1(static_cast<std::size_t>(out)), y2(y1.size());
    headwise::ops::QuantMatmulWorkspace ws;
    omp_set_num_threads(1);
    headwise::ops::quant_matmul(MatrixMap<const float>(x.data(), 1, in), W.matrix(), nullptr,
                                MatrixMap<float>(y1.data(), 1, out), ws);
    omp_set_num_threads(2);
    headwise::ops::quant_matmul(MatrixMap<const float>(x.data(), 1, in), W.matrix(), nullptr,
                                MatrixMap<float>(y2.data(), 1, out), ws);
    omp_set_num_threads(saved);
    for (Index o = 0; o < out; ++o) {
        CAPTURE(o);
        REQUIRE(y1[static_cast<std::size_t>(o)] == y2[static_cast<std::size_t>(o)]);
    }
#else
    SUCCEED("a build without OpenMP runs the products on one thread");
#endif
}

TEST_CASE("quant_matmul: a non-finite activation makes the outputs that read it NaN",
          "[quant_matmul]") {
    std::mt19937_64 rng(9);
    const Weight W(Type::q4_1, 3, 64, rng);
    std::vector<float> x(64, 0.5f);
    x[40] = std::numeric_limits<float>::infinity();
    for (const QuantKernels k : {QuantKernels::portable, QuantKernels::automatic}) {
        std::vector<float> y(3);
        headwise::ops::QuantMatmulWorkspace ws;
        headwise::ops::quant_matmul(MatrixMap<const float>(x.data(), 1, 64), W.matrix(), nullptr,
                                    MatrixMap<float>(y.data(), 1, 3), ws, k);
        for (float v : y) REQUIRE(std::isnan(v));
    }
}

TEST_CASE("quant_matmul refuses bad shapes and buffers, naming what it expected",
          "[quant_matmul]") {
    std::mt19937_64 rng(3);
    const Weight W(Type::q4_1, 7, 64, rng);
    std::vector<float> x(2 * 64, 1.0f), y(2 * 7, 5.0f);
    headwise::ops::QuantMatmulWorkspace ws;
    const auto run = [&](QuantMatrix m, Index x_cols, Index y_cols) {
        headwise::ops::quant_matmul(MatrixMap<const float>(x.data(), 2, x_cols), m, nullptr,
                                    MatrixMap<float>(y.data(), 2, y_cols), ws);
    };
    QuantMatrix m = W.matrix();
    m.cols = 40;
    REQUIRE_THROWS_WITH(run(m, 40, 7),
                        "headwise::ops::quant_matmul: W.cols (in): expected a "
                        "multiple of 32 (Q4_1's block size), got 40");
    REQUIRE_THROWS_AS(run(m, 40, 7), std::invalid_argument);
    QuantMatrix k = W.matrix();
    k.type = Type::q4_k;
    REQUIRE_THROWS_WITH(run(k, 64, 7),
                        "headwise::ops::quant_matmul: W.cols (in): expected a "
                        "multiple of 256 (Q4_K's block size), got 64");
    REQUIRE_THROWS_WITH(run(W.matrix(), 32, 7),
                        "headwise::ops::quant_matmul: X: expected shape [2, 64], got [2, 32]");
    REQUIRE_THROWS_AS(run(W.matrix(), 32, 7), headwise::shape_error);
    REQUIRE_THROWS_WITH(run(W.matrix(), 64, 6),
                        "headwise::ops::quant_matmul: Y: expected shape [2, 7], got [2, 6]");
    QuantMatrix short_buffer = W.matrix();
    short_buffer.bytes -= 20;
    REQUIRE_THROWS_WITH(run(short_buffer, 64, 7),
                        "headwise::ops::quant_matmul: W.bytes: expected 280 (7 rows of 40 bytes "
                        "of Q4_1), got 260");
    QuantMatrix null_data = W.matrix();
    null_data.data = nullptr;
    REQUIRE_THROWS_WITH(run(null_data, 64, 7),
                        "headwise::ops::quant_matmul: W.data: expected a "
                        "buffer of 280 bytes, got null");
    QuantMatrix unknown = W.matrix();
    unknown.type = static_cast<Type>(16);
    REQUIRE_THROWS_WITH(run(unknown, 64, 7),
                        "headwise::ops::quant_matmul: type IQ2_XXS (16) is not one headwise reads "
                        "(F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q6_K)");
    for (float v : y) REQUIRE(v == 5.0f);  // nothing written by a refused call
}

}  // namespace test_ops_quant_matmul
