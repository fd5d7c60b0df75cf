// SPDX-License-Identifier: MIT
// The product of float activations and a quantized weight matrix, Y = X W^T + b, read block by
// block from the stored format (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q6_K; F16, BF16, F32), with
// AVX2 kernels chosen at run time and a portable fallback.
#pragma once

#include <Eigen/Core>

#include <algorithm>    // std::max, std::min
#include <cmath>        // std::fabs, std::isfinite, std::nearbyint
#include <cstdint>      // std::uint8_t, std::int8_t, std::uint16_t, std::uint32_t, std::uint64_t
#include <cstring>      // std::memcpy
#include <limits>       // std::numeric_limits
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::is_same_v
#include <vector>       // std::vector

#include "../config.hpp"
#include "../detail/parallel.hpp"
#include "../error.hpp"
#include "../quant/dequantize.hpp"
#include "../quant/half.hpp"
#include "../quant/types.hpp"
#include "../tensor.hpp"
#include "detail/cpu_features.hpp"
#include "gemm.hpp"

namespace headwise::ops {

// ---- declarations ----------------------------------------------------------------------------

/// A read-only weight matrix W [rows, cols] = [out, in] in one of the stored formats: `rows`
/// consecutive rows of quant::row_bytes(type, cols) bytes each at `data` (any alignment), in a
/// buffer of `bytes` bytes. A view: the caller keeps the memory (a GGUF mapping, a vector).
struct QuantMatrix {
    quant::Type type = quant::Type::f32;
    const void* data = nullptr;
    Index rows = 0;           // out
    Index cols = 0;           // in
    std::uint64_t bytes = 0;  // size of the buffer at `data`
};

/// Which kernels quant_matmul runs. `automatic` asks the CPU (AVX2 + FMA + F16C when it has
/// them); the others force a path, so that both can be tested on one machine.
enum class QuantKernels { automatic, portable, avx2 };

/// "portable" or "avx2": what `automatic` runs on this CPU.
inline const char* quant_matmul_kernels() noexcept;

/// Buffers quant_matmul reuses from call to call: the activations rounded to 8-bit blocks.
/// Grows only; one per thread of the caller.
struct QuantMatmulWorkspace {
    std::vector<std::int8_t> q;  // [N, in]          the 8-bit values
    std::vector<float> ds;       // [N, in / 32, 2]  each block's scale d, and d times the sum
                                 //                  of its values (the kernels load the pair)
    std::vector<float> panel;    // [kQuantPanelRows, in]  dequantized weight rows (GEMM path)
};

/// From this many rows of X on, quant_matmul multiplies by dequantized weight panels (see
/// there); below it, by the integer kernels.
inline constexpr Index kQuantGemmRows = 32;

/// Weight rows the GEMM path dequantizes at a time.
inline constexpr Index kQuantPanelRows = 64;

/// Y[N, out] = X[N, in] W[out, in]^T + b[out] (b may be null), W quantized, X, b and Y float.
///
/// Two schemes, chosen by N (measured: docs/formats.md):
///
/// GEMV and small batches (N < kQuantGemmRows): for the block formats (Q8_0 ... Q6_K) each row
/// of X is first rounded to 8-bit blocks of 32 values, x ~ d q with d = max|x| / 127 and
/// q = round-to-nearest-even(x 127 / max|x|) in [-127, 127], once per call; every weight block
/// then meets its activation block in an integer dot product (32 products of an 8-bit and an at
/// most 6-bit integer, summed exactly in 32 bits), scaled in float by the two blocks' scales.
/// This is llama.cpp's scheme (its Q8_0 / Q8_1 / Q8_K activations; here the scale is a float,
/// not a half, and the K-quants meet blocks of 32 too). It reads each weight byte once and
/// unpacks it in registers, which is what a decode step (bound by reading the weights) needs.
/// It changes the result against the float product of the dequantized weights by the
/// activation rounding: at most half a step d / 2 per value, a relative error of about 0.5% of
/// |y| on random data. F16, BF16 and F32 weights meet the float activations unrounded. A block
/// of X holding an infinity or a NaN makes the outputs that read it NaN.
///
/// Batches (N >= kQuantGemmRows, prefill): panels of kQuantPanelRows weight rows are dequantized
/// (quant::dequantize_row, the exact values) into workspace.panel and multiplied by the float
/// GEMM (ops::gemm<float>, which threads as it does for Linear): the unpacking is paid once per
/// panel for all N rows, the product runs at the float GEMM's rate, above the integer kernels'
/// on AVX2, and X is not rounded. `kernels` does not apply to this path.
///
/// Nothing dequantizes the whole matrix. The integer kernels split output rows over the
/// threads (parallel_blocks) when each gets enough work.
///
/// Checks, in every build, before anything is written: X [N, in] and Y [N, out] with out =
/// W.rows and in = W.cols; in a multiple of the format's block size; W.bytes = out row_bytes;
/// W.data not null when it is; a readable type; `kernels` = avx2 on a CPU without AVX2, FMA and
/// F16C. Throws std::invalid_argument (shape_error for shapes) naming the function, the
/// argument, the expected and the actual value.
///
/// A template only for compile time: `Float` is always float (deduced from nothing, so calls
/// are written as for a function). The batch path instantiates Eigen's float GEMM, about 2 s of
/// compiling; as a template, that is paid only by the files that call quant_matmul, not by
/// every file that includes a layer.
template <class Float = float>
void quant_matmul(ConstMatrixRef<float> X, const QuantMatrix& W, const float* b, MatrixRef<float> Y,
                  QuantMatmulWorkspace& workspace, QuantKernels kernels = QuantKernels::automatic);

/// True when quant_matmul rounds the activations for a weight of `type` and N rows of X (the
/// block formats, N < kQuantGemmRows).
constexpr bool quant_rounds_activations(quant::Type type, Index N) noexcept;

}  // namespace headwise::ops

namespace headwise::detail {

/// Values per activation block.
inline constexpr Index kQuantActBlock = 32;

/// The activation rounding quant_matmul applies, row by row: x[0, in) (in a multiple of 32)
/// into q[0, in) and, for block b, ds[2 b] = its scale d and ds[2 b + 1] = d times the sum of
/// its q. Public so that tests can round as it does.
void quantize_activations(const float* x, Index in, std::int8_t* q, float* ds) noexcept;

}  // namespace headwise::detail

// ---- definitions -----------------------------------------------------------------------------

#include "detail/quant_matmul_portable.hpp"
#if HEADWISE_X86_DISPATCH
#include "detail/quant_matmul_avx2.hpp"
#endif

namespace headwise::detail {

inline void quantize_activations(const float* x, Index in, std::int8_t* q, float* ds) noexcept {
    for (Index blk = 0; blk < in / kQuantActBlock; ++blk) {
        const float* xb = x + blk * kQuantActBlock;
        std::int8_t* qb = q + blk * kQuantActBlock;
        float amax = 0.0f;
        bool finite = true;
        for (Index l = 0; l < kQuantActBlock; ++l) {
            finite = finite && std::isfinite(xb[l]);
            amax = std::max(amax, std::fabs(xb[l]));
        }
        if (!finite) {
            // A NaN scale makes every product with this block NaN, as the float product of an
            // infinity or a NaN would be (or an infinity: NaN says the value is lost).
            for (Index l = 0; l < kQuantActBlock; ++l) qb[l] = 0;
            ds[2 * blk] = std::numeric_limits<float>::quiet_NaN();
            ds[2 * blk + 1] = ds[2 * blk];
            continue;
        }
        // x 127 / amax is in [-127, 127]; rounding to nearest even (the default mode, the same
        // in the AVX2 kernels' rounding) keeps it there.
        const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
        int sum = 0;
        for (Index l = 0; l < kQuantActBlock; ++l) {
            const int v = static_cast<int>(std::nearbyint(xb[l] * id));
            qb[l] = static_cast<std::int8_t>(v);
            sum += v;
        }
        ds[2 * blk] = amax / 127.0f;
        ds[2 * blk + 1] = ds[2 * blk] * static_cast<float>(sum);
    }
}

/// Whether quant_matmul's AVX2 kernels may run here.
inline bool quant_avx2_available() noexcept {
#if HEADWISE_X86_DISPATCH
    return cpu_simd_level() != SimdLevel::none && cpu_has_f16c();
#else
    return false;
#endif
}

/// Multiply-adds per thread below which quant_matmul's integer kernels stay on one thread. A
/// second thread pays back its start (microseconds) from about 100k multiply-adds on an idle
/// machine: at 2^17, every per-layer GEMV of SmolLM2-135M (576 x 576, 330k, and larger) splits
/// over 2 threads, but k_proj and v_proj (192 x 576, 110k) stay on one. Measured on the idle
/// machine (OpenMP build, Q4_1, `generate` of 256 tokens, whole run): 2 threads 1.91-2.04 s at
/// 2^17 against 2.56-2.84 s at 2^19 (which kept every per-layer GEMV on one thread), 1 thread
/// 2.8-3.0 s at both. Where the cores are shared a woken thread can wait a scheduler slice
/// (at load 4-5, 2 threads made the 576 x 576 GEMV 1.0-3.2x slower).
inline constexpr Index kQuantParallelGrain = Index{1} << 17;

/// The threads split a product's output rows at multiples of this many rows: the AVX2 GEMV
/// multiplies groups of 4 rows from the first row it is given (detail/quant_matmul_avx2.hpp),
/// and a row's sums run in another order in a group than alone.
inline constexpr Index kQuantRowGroup = 4;

}  // namespace headwise::detail

namespace headwise::ops {

inline const char* quant_matmul_kernels() noexcept {
    return detail::quant_avx2_available() ? "avx2" : "portable";
}

constexpr bool quant_rounds_activations(quant::Type type, Index N) noexcept {
    return N < kQuantGemmRows && type != quant::Type::f32 && type != quant::Type::f16 &&
           type != quant::Type::bf16;
}

template <class Float>
void quant_matmul(ConstMatrixRef<float> X, const QuantMatrix& W, const float* b, MatrixRef<float> Y,
                  QuantMatmulWorkspace& workspace, QuantKernels kernels) {
    static_assert(std::is_same_v<Float, float>, "quant_matmul multiplies float activations");
    constexpr const char* fn = "headwise::ops::quant_matmul";
    // X [N, in], W [out, in] (blocks), b [out], Y [N, out]
    const quant::BlockFormat format = quant::block_format(W.type, fn);
    const Index N = X.rows(), in = W.cols, out = W.rows;
    if (W.rows < 0 || W.cols < 0)
        throw_invalid_argument(fn, "W", "expected non-negative rows and cols",
                               "[" + std::to_string(W.rows) + ", " + std::to_string(W.cols) + "]");
    if (in % format.block_size != 0)
        throw_invalid_argument(fn, "W.cols (in)",
                               "expected a multiple of " + std::to_string(format.block_size) +
                                   " (" + format.name + "'s block size)",
                               std::to_string(in));
    detail::check_shape(fn, "X", Shape{X.rows(), X.cols()}, Shape{N, in});
    detail::check_shape(fn, "Y", Shape{Y.rows(), Y.cols()}, Shape{N, out});
    const std::uint64_t row_bytes = quant::row_bytes(W.type, in, fn);
    const std::uint64_t expected = row_bytes * static_cast<std::uint64_t>(out);
    if (W.bytes != expected)
        throw_invalid_argument(fn, "W.bytes",
                               "expected " + std::to_string(expected) + " (" + std::to_string(out) +
                                   " rows of " + std::to_string(row_bytes) + " bytes of " +
                                   format.name + ")",
                               std::to_string(W.bytes));
    if (W.data == nullptr && expected > 0)
        throw_invalid_argument(
            fn, "W.data", "expected a buffer of " + std::to_string(expected) + " bytes", "null");
    bool avx2 = false;
    if (kernels == QuantKernels::avx2) {
        if (!detail::quant_avx2_available())
            throw_invalid_argument(fn, "kernels", "expected a kernel set this CPU runs (portable)",
                                   "avx2 (this CPU lacks AVX2, FMA or F16C)");
        avx2 = true;
    } else if (kernels == QuantKernels::automatic) {
        avx2 = detail::quant_avx2_available();
    }
    if (N == 0 || out == 0) return;

    const auto* w = static_cast<const std::uint8_t*>(W.data);
    if (N >= kQuantGemmRows && in > 0) {
        // Y[:, o0 : o0 + rows] = X panel^T, panel [rows, in] dequantized; the bias first. One
        // parallel region over the panels, each thread with its own scratch and a serial GEMM:
        // a threaded GEMM per panel started and joined the threads once per 64 weight rows.
        const Index panels = (out + kQuantPanelRows - 1) / kQuantPanelRows;
        const Index threads = std::min<Index>(detail::max_threads(), panels);
        workspace.panel.resize(static_cast<std::size_t>(threads * kQuantPanelRows * in));
        const auto panel_product = [&](Index p, int thread) {
            const Index o0 = p * kQuantPanelRows, rows = std::min(kQuantPanelRows, out - o0);
            float* panel = workspace.panel.data() + thread * kQuantPanelRows * in;  // [rows, in]
            for (Index r = 0; r < rows; ++r)
                quant::dequantize_row(W.type, w + static_cast<std::uint64_t>(o0 + r) * row_bytes,
                                      panel + r * in, in);
            MatrixRef<float> Yp = Y.middleCols(o0, rows);  // [N, rows]
            float beta = 0.0f;
            if (b != nullptr) {
                const Eigen::Map<const Eigen::Matrix<float, 1, Eigen::Dynamic>> bias(b + o0, rows);
                for (Index n = 0; n < N; ++n) Yp.row(n) = bias;
                beta = 1.0f;
            }
            [[maybe_unused]] const detail::SingleThreadScope one_thread;
            detail::gemm_serial<Float>(1.0f, X, Op::none, MatrixMap<const float>(panel, rows, in),
                                       Op::transpose, beta, Yp);
        };
        if (threads > 1)
            detail::parallel_for(panels, panel_product);
        else
            for (Index p = 0; p < panels; ++p) panel_product(p, 0);
        return;
    }
    const bool rounds = quant_rounds_activations(W.type, N);
    // The activations as the kernels read them: rounded to 8-bit blocks, or X itself (float
    // formats) when X's rows are contiguous.
    const Index nb = in / detail::kQuantActBlock;
    detail::QuantActivations act{};
    act.in = in;
    if (rounds) {
        workspace.q.resize(static_cast<std::size_t>(N * in));
        workspace.ds.resize(static_cast<std::size_t>(2 * N * nb));
        detail::parallel_blocks(
            N, std::max<Index>(1, detail::kParallelGrain / std::max<Index>(in, 1)),
            [&](Index first, Index count) {
                for (Index r = first; r < first + count; ++r)
                    detail::quantize_activations(X.row(r).data(), in, workspace.q.data() + r * in,
                                                 workspace.ds.data() + 2 * r * nb);
            });
        act.q = workspace.q.data();
        act.ds = workspace.ds.data();
    }
    act.x = X.data();
    act.x_stride = X.outerStride();

    // The threads take whole groups of kQuantRowGroup rows, so that every row is computed in
    // the same group (the same order of sums) whatever the thread count: the same bits on 1
    // thread as on 2.
    const Index work = std::max<Index>(in, 1) * N;  // multiply-adds per output row
    const Index groups = (out + detail::kQuantRowGroup - 1) / detail::kQuantRowGroup;
    const Index grain =
        std::max<Index>(1, detail::kQuantParallelGrain / (work * detail::kQuantRowGroup));
    float* y = Y.data();
    const Index y_stride = Y.outerStride();
    detail::parallel_blocks(groups, grain, [&](Index first_group, Index group_count) {
        const Index first = first_group * detail::kQuantRowGroup;
        const Index count =
            std::min(out, (first_group + group_count) * detail::kQuantRowGroup) - first;
        const detail::QuantRows rows{W.type, w + static_cast<std::uint64_t>(first) * row_bytes,
                                     static_cast<Index>(row_bytes), count};
#if HEADWISE_X86_DISPATCH
        if (avx2) {
            detail::quant_rows_avx2(rows, act, N, y + first, y_stride, b ? b + first : nullptr);
            return;
        }
#endif
        detail::quant_rows_portable(rows, act, N, y + first, y_stride, b ? b + first : nullptr);
    });
    static_cast<void>(avx2);
}

}  // namespace headwise::ops
