// SPDX-License-Identifier: MIT
// The bfloat16 matrix product C = alpha op(A) op(B) + beta C: bf16 operands, float accumulation
// and float output, and linear_forward_bf16 built on it.
// ops/: stateless kernels that write into buffers the caller provides (nothing allocated per
// call); tensor_ops/ holds the functions that return new tensors.
#pragma once

#include <Eigen/Core>

#include <algorithm>  // std::max
#include <string>     // std::to_string
#include <vector>     // std::vector

#include "../bf16.hpp"
#include "../config.hpp"
#include "../detail/parallel.hpp"
#include "../error.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"
#include "gemm.hpp"

// Backend. Every product here runs on the portable path: the bf16 operands are widened to float
// (exact: a bfloat16 is the top half of a float) and multiplied by ops::gemm<float>, so the
// result is the float product of the bf16-rounded operands, accumulated in float. It stores and
// moves half the bytes but multiplies at float speed, plus the widening (a few percent at
// GEMM-bound shapes). A bf16 GEMM library (oneDNN, libxsmm) multiplies bf16 at up to twice the
// float rate, but only on CPUs with bf16 dot-product instructions (AVX512_BF16, AMX); on one
// without them neither offers a bf16 product at all (docs/precision.md has the measurements).

namespace headwise::ops {

/// A read-only row-major bf16 matrix [rows, cols] whose rows are `stride` elements apart.
struct ConstBf16Matrix {
    const BFloat16* data = nullptr;
    Index rows = 0;
    Index cols = 0;
    Index stride = 0;  // >= cols

    ConstBf16Matrix() = default;
    ConstBf16Matrix(const BFloat16* d, Index r, Index c) : data(d), rows(r), cols(c), stride(c) {}
    ConstBf16Matrix(const BFloat16* d, Index r, Index c, Index s)
        : data(d), rows(r), cols(c), stride(s) {}
    /// Rows [first, first + count).
    ConstBf16Matrix middle_rows(Index first, Index count) const {
        return ConstBf16Matrix(data + first * stride, count, cols, stride);
    }
};

/// Floats of workspace gemm_bf16 needs for operands A [a_rows, a_cols] and B [b_rows, b_cols]
/// (as stored): the portable path widens both.
constexpr Index gemm_bf16_workspace(Index a_rows, Index a_cols, Index b_rows,
                                    Index b_cols) noexcept {
    return a_rows * a_cols + b_rows * b_cols;
}

/// C[m, n] = alpha op(A)[m, k] op(B)[k, n] + beta C[m, n] with bf16 A and B, products summed in
/// float, C float. As ops::gemm otherwise: op(X) = X or X^T read in place, beta = 0 only writes
/// C, shapes checked in every build (shape_error naming the argument). `workspace` holds at
/// least gemm_bf16_workspace(A.rows, A.cols, B.rows, B.cols) floats and must not overlap C.
void gemm_bf16(float alpha, ConstBf16Matrix A, Op op_a, ConstBf16Matrix B, Op op_b, float beta,
               MatrixRef<float> C, float* workspace);

/// Buffers linear_forward_bf16 reuses from call to call: the input rounded to bf16 and the
/// product's workspace. Grows only.
struct Bf16LinearWorkspace {
    std::vector<BFloat16> x;  // [N, in]
    std::vector<float> gemm;  // gemm_bf16_workspace(N, in, out, in)
};

/// Y[N, out] = bf16(X)[N, in] W[out, in]^T + b[out] with W in bf16, b (may be null) and Y
/// float: linear_forward with the products in bf16. X is rounded to bf16 first.
void linear_forward_bf16(ConstMatrixRef<float> X, ConstBf16Matrix W, const float* b,
                         MatrixRef<float> Y, Bf16LinearWorkspace& workspace);

}  // namespace headwise::ops

// ---- definitions ----------------------------------------------------------------------------

namespace headwise::detail {

/// X [rows, cols] (row stride X.stride) widened into dst [rows, cols], contiguous.
inline void widen(const ops::ConstBf16Matrix& X, float* dst) {
    parallel_blocks(X.rows, std::max<Index>(1, kParallelGrain / std::max<Index>(X.cols, 1)),
                    [&](Index first, Index count) {
                        for (Index r = first; r < first + count; ++r)
                            to_float(X.data + r * X.stride, dst + r * X.cols, X.cols);
                    });
}

}  // namespace headwise::detail

namespace headwise::ops {

inline void gemm_bf16(float alpha, ConstBf16Matrix A, Op op_a, ConstBf16Matrix B, Op op_b,
                      float beta, MatrixRef<float> C, float* workspace) {
    constexpr const char* fn = "headwise::ops::gemm_bf16";
    // op(A) [m, k], op(B) [k, n], C [m, n]
    const Index m = op_a == Op::none ? A.rows : A.cols;
    const Index k = op_a == Op::none ? A.cols : A.rows;
    const Index n = op_b == Op::none ? B.cols : B.rows;
    const Index kb = op_b == Op::none ? B.rows : B.cols;
    if (kb != k)
        throw shape_error(
            fn, op_b == Op::none ? "B" : "B (transposed)",
            op_b == Op::none ? "[" + std::to_string(k) + ", n]" : "[n, " + std::to_string(k) + "]",
            Shape{B.rows, B.cols});
    detail::check_shape(fn, "C", Shape{C.rows(), C.cols()}, Shape{m, n});
    if (A.stride < A.cols || B.stride < B.cols)
        throw_invalid_argument(fn, A.stride < A.cols ? "A" : "B", "a row stride >= columns",
                               std::to_string(A.stride < A.cols ? A.stride : B.stride));
    // The portable path: widen both operands (exact), then the float product.
    float* a = workspace;                    // [A.rows, A.cols]
    float* b = workspace + A.rows * A.cols;  // [B.rows, B.cols]
    detail::widen(A, a);
    detail::widen(B, b);
    gemm<float>(alpha, MatrixMap<const float>(a, A.rows, A.cols), op_a,
                MatrixMap<const float>(b, B.rows, B.cols), op_b, beta, C);
}

inline void linear_forward_bf16(ConstMatrixRef<float> X, ConstBf16Matrix W, const float* b,
                                MatrixRef<float> Y, Bf16LinearWorkspace& workspace) {
    constexpr const char* fn = "headwise::ops::linear_forward_bf16";
    // X [N, in], W [out, in], b [out], Y [N, out]
    const Index N = X.rows(), in = X.cols(), out = W.rows;
    detail::check_shape(fn, "W", Shape{W.rows, W.cols}, Shape{out, in});
    detail::check_shape(fn, "Y", Shape{Y.rows(), Y.cols()}, Shape{N, out});
    // Activations enter the product in bf16, as a bf16 GEMM library would read them.
    workspace.x.resize(static_cast<std::size_t>(N * in));
    detail::parallel_blocks(N, std::max<Index>(1, detail::kParallelGrain / std::max<Index>(in, 1)),
                            [&](Index first, Index rows) {
                                for (Index r = first; r < first + rows; ++r)
                                    to_bf16(X.row(r).data(), workspace.x.data() + r * in, in);
                            });
    workspace.gemm.resize(static_cast<std::size_t>(gemm_bf16_workspace(N, in, out, in)));
    // As linear_forward: the bias initialises Y and the product accumulates onto it.
    float beta = 0.0f;
    if (b != nullptr) {
        const Eigen::Map<const Eigen::Matrix<float, 1, Eigen::Dynamic>> bias(b, out);  // [out]
        for (Index r = 0; r < N; ++r) Y.row(r) = bias;
        beta = 1.0f;
    }
    gemm_bf16(1.0f, ConstBf16Matrix(workspace.x.data(), N, in), Op::none, W, Op::transpose, beta, Y,
              workspace.gemm.data());
}

}  // namespace headwise::ops
