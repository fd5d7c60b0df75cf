// SPDX-License-Identifier: MIT
// The bfloat16 matrix product C = alpha op(A) op(B) + beta C: bf16 operands, float accumulation
// and float output, and linear_forward_bf16 / linear_backward_bf16 built on it.
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
#include "linear.hpp"

// Backend. With HEADWISE_USE_DNNL defined non-zero (CMake: HEADWISE_BF16, which also links
// oneDNN), a product goes to oneDNN's bf16 matmul when this CPU has one (AVX512_BF16 or AMX
// instructions, asked once at run time), which multiplies bf16 at up to twice the float rate.
// Otherwise, and always without oneDNN, the portable path runs: the bf16 operands are widened to
// float (exact: a bfloat16 is the top half of a float) and multiplied by ops::gemm<float>. Both
// give the product of the bf16 operands accumulated in float; the portable one stores and moves
// half the bytes but multiplies at float speed, plus the widening (a few percent at GEMM-bound
// shapes). docs/precision.md has the measurements.
#if defined(HEADWISE_USE_DNNL) && HEADWISE_USE_DNNL
#include <oneapi/dnnl/dnnl.h>  // dnnl_matmul_desc_init, dnnl_primitive_execute, ...
#if DNNL_VERSION_MAJOR != 2
#error "headwise: HEADWISE_USE_DNNL needs oneDNN 2 (oneDNN 3 changed its C API)"
#endif
#define HEADWISE_GEMM_BF16_DNNL 1
#else
#define HEADWISE_GEMM_BF16_DNNL 0
#endif

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
    /// Columns [first, first + count), rows still `stride` apart.
    ConstBf16Matrix middle_cols(Index first, Index count) const {
        return ConstBf16Matrix(data + first, rows, count, stride);
    }
};

// gemm_bf16 and the linear_*_bf16 functions are templates of an unused parameter, Deferred, so
// that only a file that calls them compiles them, and with them the float GEMM of the portable
// path: as plain inline functions every file including this header compiled ops::gemm<float>,
// which with the Eigen backend was 4.6 of the 9.6 s (g++ 12, -g) the umbrella header took.
// Callers write gemm_bf16(...), as for a function.

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
template <class Deferred = void>
void gemm_bf16(float alpha, ConstBf16Matrix A, Op op_a, ConstBf16Matrix B, Op op_b, float beta,
               MatrixRef<float> C, float* workspace);

/// "dnnl" when products go to oneDNN's bf16 matmul on this CPU, else "portable".
inline const char* gemm_bf16_backend() noexcept;

/// Buffers linear_forward_bf16 reuses from call to call: the input rounded to bf16 and the
/// product's workspace. Grows only.
struct Bf16LinearWorkspace {
    std::vector<BFloat16> x;  // [N, in]
    std::vector<float> gemm;  // gemm_bf16_workspace(N, in, out, in)
};

/// Y[N, out] = bf16(X)[N, in] W[out, in]^T + b[out] with W in bf16, b (may be null) and Y
/// float: linear_forward with the products in bf16. X is rounded to bf16 first.
template <class Deferred = void>
void linear_forward_bf16(ConstMatrixRef<float> X, ConstBf16Matrix W, const float* b,
                         MatrixRef<float> Y, Bf16LinearWorkspace& workspace);

/// X [rows, cols] (any row stride) rounded to bf16 (nearest even) into `dst`, resized to
/// rows x cols and contiguous; returns it as a matrix.
ConstBf16Matrix rounded_to_bf16(ConstMatrixRef<float> X, std::vector<BFloat16>& dst);

/// dX[N, in] += dY[N, out] W[out, in] with bf16 dY and W, float accumulation and dX.
/// `workspace` is resized as gemm_bf16 needs.
template <class Deferred = void>
void linear_backward_input_bf16(ConstBf16Matrix dY, ConstBf16Matrix W, MatrixRef<float> dX,
                                std::vector<float>& workspace);

/// dW[out, in] += dY[N, out]^T X[N, in] with bf16 dY and X, float accumulation and dW.
template <class Deferred = void>
void linear_backward_weight_bf16(ConstBf16Matrix dY, ConstBf16Matrix X, MatrixRef<float> dW,
                                 std::vector<float>& workspace);

/// Buffers linear_backward_bf16 reuses from call to call. Grows only.
struct Bf16BackwardWorkspace {
    std::vector<BFloat16> dy;  // [N, out]
    std::vector<BFloat16> x;   // [N, in]
    std::vector<BFloat16> w;   // [out, in]
    std::vector<float> gemm;   // the products' widened operands
};

/// The gradients of linear_forward_bf16 as mixed-precision training computes them (PyTorch's
/// autocast on CPU): dY, X and W rounded to bf16 for the products, which accumulate in float;
/// dX += bf16(dY) bf16(W), dW += bf16(dY)^T bf16(X), and db += sum_n dY in float unless db is
/// nullptr. X [N, in], W [out, in] (the float master weight), dY [N, out]; every shape checked
/// before any gradient is touched, as linear_backward's.
template <class Deferred = void>
void linear_backward_bf16(ConstMatrixRef<float> X, ConstMatrixRef<float> W,
                          ConstMatrixRef<float> dY, MatrixRef<float> dX, MatrixRef<float> dW,
                          float* db, Bf16BackwardWorkspace& workspace);

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

#if HEADWISE_GEMM_BF16_DNNL
/// oneDNN's CPU engine, made once.
inline dnnl_engine_t dnnl_cpu_engine() noexcept {
    static const dnnl_engine_t engine = [] {
        dnnl_engine_t e = nullptr;
        if (dnnl_engine_create(&e, dnnl_cpu, 0) != dnnl_success) return dnnl_engine_t{nullptr};
        return e;
    }();
    return engine;
}

/// C = alpha op(A) op(B) + beta C by oneDNN's bf16 matmul (f32 destination); false, having
/// written nothing, when oneDNN has no such primitive here (no bf16 instructions). oneDNN's
/// primitive cache makes the set-up of a shape seen before cheap.
inline bool dnnl_gemm_bf16(float alpha, const ops::ConstBf16Matrix& A, ops::Op op_a,
                           const ops::ConstBf16Matrix& B, ops::Op op_b, float beta,
                           MatrixRef<float>& C) {
    dnnl_engine_t engine = dnnl_cpu_engine();
    if (engine == nullptr) return false;
    const dnnl_dim_t m = C.rows(), n = C.cols(), k = op_a == ops::Op::none ? A.cols : A.rows;
    // op(X) as a [rows, cols] view of X's storage: transposed is strides {1, stride}.
    const auto describe = [](dnnl_memory_desc_t* md, dnnl_dim_t rows, dnnl_dim_t cols,
                             dnnl_dim_t stride, bool transposed, dnnl_data_type_t type) {
        const dnnl_dims_t dims = {rows, cols};
        const dnnl_dims_t strides = {transposed ? 1 : stride, transposed ? stride : 1};
        return dnnl_memory_desc_init_by_strides(md, 2, dims, type, strides) == dnnl_success;
    };
    dnnl_memory_desc_t a_md, b_md, c_md;
    if (!describe(&a_md, m, k, A.stride, op_a == ops::Op::transpose, dnnl_bf16) ||
        !describe(&b_md, k, n, B.stride, op_b == ops::Op::transpose, dnnl_bf16) ||
        !describe(&c_md, m, n, C.outerStride(), false, dnnl_f32))
        return false;
    dnnl_matmul_desc_t desc;
    if (dnnl_matmul_desc_init(&desc, &a_md, &b_md, nullptr, &c_md) != dnnl_success) return false;
    // dst = alpha (A B) + beta dst: output scale alpha, then a sum post-op with scale beta.
    dnnl_primitive_attr_t attr = nullptr;
    dnnl_post_ops_t post = nullptr;
    dnnl_primitive_desc_t pd = nullptr;
    dnnl_primitive_t prim = nullptr;
    dnnl_memory_t mem[3] = {nullptr, nullptr, nullptr};
    dnnl_stream_t stream = nullptr;
    bool ok = dnnl_primitive_attr_create(&attr) == dnnl_success &&
              (alpha == 1.0f ||
               dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha) == dnnl_success);
    if (ok && beta != 0.0f)
        ok = dnnl_post_ops_create(&post) == dnnl_success &&
             dnnl_post_ops_append_sum(post, beta) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, post) == dnnl_success;
    ok =
        ok && dnnl_primitive_desc_create(&pd, &desc, attr, engine, nullptr) == dnnl_success &&
        dnnl_primitive_create(&prim, pd) == dnnl_success &&
        dnnl_memory_create(&mem[0], &a_md, engine, const_cast<BFloat16*>(A.data)) == dnnl_success &&
        dnnl_memory_create(&mem[1], &b_md, engine, const_cast<BFloat16*>(B.data)) == dnnl_success &&
        dnnl_memory_create(&mem[2], &c_md, engine, C.data()) == dnnl_success &&
        dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) == dnnl_success;
    if (ok) {
        const dnnl_exec_arg_t args[3] = {
            {DNNL_ARG_SRC, mem[0]}, {DNNL_ARG_WEIGHTS, mem[1]}, {DNNL_ARG_DST, mem[2]}};
        ok = dnnl_primitive_execute(prim, stream, 3, args) == dnnl_success &&
             dnnl_stream_wait(stream) == dnnl_success;
    }
    if (stream) dnnl_stream_destroy(stream);
    for (dnnl_memory_t x : mem)
        if (x) dnnl_memory_destroy(x);
    if (prim) dnnl_primitive_destroy(prim);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (post) dnnl_post_ops_destroy(post);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return ok;
}

/// Whether oneDNN has a bf16 matmul on this CPU: asked once, with a [1, 1] product.
inline bool dnnl_bf16_available() noexcept {
    static const bool available = [] {
        BFloat16 a = BFloat16::from_float(1.0f), b = a;
        float c = 0.0f;
        Eigen::Map<RowMatrix<float>> cm(&c, 1, 1);
        MatrixRef<float> C(cm);
        return dnnl_gemm_bf16(1.0f, ops::ConstBf16Matrix(&a, 1, 1), ops::Op::none,
                              ops::ConstBf16Matrix(&b, 1, 1), ops::Op::none, 0.0f, C) &&
               c == 1.0f;
    }();
    return available;
}
#endif

}  // namespace headwise::detail

namespace headwise::ops {

inline const char* gemm_bf16_backend() noexcept {
#if HEADWISE_GEMM_BF16_DNNL
    if (detail::dnnl_bf16_available()) return "dnnl";
#endif
    return "portable";
}

template <class Deferred>
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
    if (m == 0 || n == 0) return;
#if HEADWISE_GEMM_BF16_DNNL
    // A failure (a layout oneDNN declines) leaves C unwritten: the portable path then runs.
    if (k > 0 && detail::dnnl_bf16_available() &&
        detail::dnnl_gemm_bf16(alpha, A, op_a, B, op_b, beta, C))
        return;
#endif
    // The portable path: widen both operands (exact), then the float product.
    float* a = workspace;                    // [A.rows, A.cols]
    float* b = workspace + A.rows * A.cols;  // [B.rows, B.cols]
    detail::widen(A, a);
    detail::widen(B, b);
    gemm<float>(alpha, MatrixMap<const float>(a, A.rows, A.cols), op_a,
                MatrixMap<const float>(b, B.rows, B.cols), op_b, beta, C);
}

template <class Deferred>
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

inline ConstBf16Matrix rounded_to_bf16(ConstMatrixRef<float> X, std::vector<BFloat16>& dst) {
    const Index rows = X.rows(), cols = X.cols();
    dst.resize(static_cast<std::size_t>(rows * cols));
    detail::parallel_blocks(rows,
                            std::max<Index>(1, detail::kParallelGrain / std::max<Index>(cols, 1)),
                            [&](Index first, Index count) {
                                for (Index r = first; r < first + count; ++r)
                                    to_bf16(X.row(r).data(), dst.data() + r * cols, cols);
                            });
    return ConstBf16Matrix(dst.data(), rows, cols);
}

template <class Deferred>
inline void linear_backward_input_bf16(ConstBf16Matrix dY, ConstBf16Matrix W, MatrixRef<float> dX,
                                       std::vector<float>& workspace) {
    // Y = X W^T  =>  dX = dY W
    workspace.resize(
        static_cast<std::size_t>(gemm_bf16_workspace(dY.rows, dY.cols, W.rows, W.cols)));
    gemm_bf16(1.0f, dY, Op::none, W, Op::none, 1.0f, dX, workspace.data());
}

template <class Deferred>
inline void linear_backward_weight_bf16(ConstBf16Matrix dY, ConstBf16Matrix X, MatrixRef<float> dW,
                                        std::vector<float>& workspace) {
    // Y = X W^T  =>  dW = dY^T X (a sum over the N rows)
    workspace.resize(
        static_cast<std::size_t>(gemm_bf16_workspace(dY.rows, dY.cols, X.rows, X.cols)));
    gemm_bf16(1.0f, dY, Op::transpose, X, Op::none, 1.0f, dW, workspace.data());
}

template <class Deferred>
inline void linear_backward_bf16(ConstMatrixRef<float> X, ConstMatrixRef<float> W,
                                 ConstMatrixRef<float> dY, MatrixRef<float> dX, MatrixRef<float> dW,
                                 float* db, Bf16BackwardWorkspace& workspace) {
    constexpr const char* fn = "headwise::ops::linear_backward_bf16";
    // X [N, in], W [out, in], dY [N, out], dX [N, in], dW [out, in], db [out]
    const Index N = X.rows(), in = X.cols(), out = W.rows();
    detail::check_shape(fn, "W", Shape{W.rows(), W.cols()}, Shape{out, in});
    detail::check_shape(fn, "dY", Shape{dY.rows(), dY.cols()}, Shape{N, out});
    detail::check_shape(fn, "dX", Shape{dX.rows(), dX.cols()}, Shape{N, in});
    detail::check_shape(fn, "dW", Shape{dW.rows(), dW.cols()}, Shape{out, in});
    const ConstBf16Matrix dY16 = rounded_to_bf16(dY, workspace.dy);  // [N, out]
    linear_backward_input_bf16(dY16, rounded_to_bf16(W, workspace.w), dX, workspace.gemm);
    linear_backward_weight_bf16(dY16, rounded_to_bf16(X, workspace.x), dW, workspace.gemm);
    // db = sum_n dY[n, :], in float from the float dY (autocast keeps the bias's gradient float).
    if (db != nullptr) linear_backward_bias<float>(dY, db);
}

}  // namespace headwise::ops
