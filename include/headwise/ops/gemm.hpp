// SPDX-License-Identifier: MIT
// The one matrix product of headwise, C = alpha op(A) op(B) + beta C, on Eigen or on a CBLAS.
// ops/: stateless kernels that write into buffers the caller provides (nothing allocated per
// call); tensor_ops/ holds the functions that return new tensors.
#pragma once

#include <Eigen/Core>

#include <algorithm>  // std::max, std::min
#include <climits>    // INT_MAX
#include <string>     // std::string, std::to_string

#include "../config.hpp"
#include "../detail/parallel.hpp"  // kSerialProductMacs
#include "../error.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"

// Backend: Eigen unless HEADWISE_USE_CBLAS is defined non-zero (CMake: -DHEADWISE_BLAS=ON, which
// also links the BLAS), then cblas_sgemm / cblas_dgemm of whatever CBLAS is linked (OpenBLAS,
// BLIS, MKL, ...). A CBLAS picks its kernels for the CPU it runs on, so a build without -march
// gets the machine's vector units for its products.
#if defined(HEADWISE_USE_CBLAS) && HEADWISE_USE_CBLAS
#include <cblas.h>  // cblas_[sd]gemm, cblas_[sd]gemv, CblasRowMajor, CblasNoTrans, CblasTrans
#define HEADWISE_GEMM_CBLAS 1
#else
#define HEADWISE_GEMM_CBLAS 0
#endif

#if defined(HEADWISE_USE_OPENMP) && HEADWISE_USE_OPENMP && defined(_OPENMP)
#include <omp.h>  // omp_in_parallel, omp_get_max_threads, omp_get_thread_num, omp_get_num_threads
#define HEADWISE_GEMM_OPENMP 1
#else
#define HEADWISE_GEMM_OPENMP 0
#endif

// Threads. One runtime runs at a time: with HEADWISE_USE_OPENMP, gemm splits a large product
// into row (or column) blocks of C, one backend call per block, the blocks fixed by the shape
// and shared out over the OpenMP threads (on the calling thread alone inside a parallel region,
// such as the per-(batch, head) loops), so that the result is the same bits on any number of
// threads. Eigen never starts threads of its own (gemm runs it with one); a CBLAS must run one
// thread per call: set OPENBLAS_NUM_THREADS=1 (or BLIS_NUM_THREADS=1, ...) or link the BLAS's
// OpenMP build (which then threads the products gemm does not split by OMP_NUM_THREADS, so that
// their bits depend on it). Without HEADWISE_USE_OPENMP headwise starts no thread, and a CBLAS
// may use its own threads for each product (OPENBLAS_NUM_THREADS), whose results then depend on
// their count; OpenBLAS runs a product below detail::kSerialProductMacs on one thread (its
// count set to 1 for the call), where two threads took up to 3x as long as one.

namespace headwise::ops {

/// How gemm reads an operand: as stored, or transposed (read in place, never copied).
enum class Op { none, transpose };

/// C[m, n] = alpha op(A)[m, k] op(B)[k, n] + beta C[m, n], with op(X) = X or X^T.
/// A, B and C are row-major blocks with any row stride (a whole tensor's matrix(), a column
/// block, a head's slice), read and written in place. With beta = 0, C is only written (it may
/// hold anything, NaN included, before). C must not overlap A or B. Shapes are checked in every
/// build: a mismatch throws shape_error naming the argument.
template <class T>
void gemm(T alpha, ConstMatrixRef<T> A, Op op_a, ConstMatrixRef<T> B, Op op_b, T beta,
          MatrixRef<T> C);

/// "eigen" or "cblas": the backend this translation unit was compiled with.
constexpr const char* gemm_backend() noexcept { return HEADWISE_GEMM_CBLAS ? "cblas" : "eigen"; }

}  // namespace headwise::ops

// ---- definitions ----------------------------------------------------------------------------

namespace headwise::detail {

using ops::Op;

/// The four transpose combinations as Eigen expressions, evaluated straight into C.
template <class T, class OpA, class OpB>
void eigen_gemm(T alpha, const OpA& a, const OpB& b, T beta, MatrixRef<T>& C) {
    // Eigen folds a scalar factor of an operand into its GEMM (no pass over a or b), and
    // .noalias() lets it write C directly instead of through a temporary.
    if (beta == T(0)) {
        if (alpha == T(1))
            C.noalias() = a * b;
        else
            C.noalias() = (alpha * a) * b;
        return;
    }
    if (beta != T(1)) C *= beta;
    if (alpha == T(1))
        C.noalias() += a * b;
    else
        C.noalias() += (alpha * a) * b;
}

#if HEADWISE_GEMM_CBLAS
inline void cblas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
                       const float* a, int lda, const float* b, int ldb, float beta, float* c,
                       int ldc) {
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
inline void cblas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, double alpha,
                       const double* a, int lda, const double* b, int ldb, double beta, double* c,
                       int ldc) {
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

inline void cblas_gemv(CBLAS_TRANSPOSE t, int m, int n, float alpha, const float* a, int lda,
                       const float* x, int incx, float beta, float* y, int incy) {
    cblas_sgemv(CblasRowMajor, t, m, n, alpha, a, lda, x, incx, beta, y, incy);
}
inline void cblas_gemv(CBLAS_TRANSPOSE t, int m, int n, double alpha, const double* a, int lda,
                       const double* x, int incx, double beta, double* y, int incy) {
    cblas_dgemv(CblasRowMajor, t, m, n, alpha, a, lda, x, incx, beta, y, incy);
}

/// Row stride of a row-major block as BLAS wants it: at least max(1, columns).
template <class Ref>
int leading_dimension(const Ref& X) {
    HEADWISE_ASSERT(X.rows() <= 1 || X.outerStride() >= X.cols());
    return static_cast<int>(std::max<Index>({X.outerStride(), X.cols(), Index{1}}));
}
#endif

#if HEADWISE_GEMM_CBLAS
/// A product with one row or one column of output, C[1, n] or C[m, 1], is a matrix-vector
/// product: a GEMV streams the matrix once, where a BLAS's GEMM may pack it first (OpenBLAS
/// 0.3.21 packs a [512, 1536] B for C[1, 1536]: 252 us against 23 us at C[1, 768], which it
/// does not pack, in a decode step's projection). True when it ran.
template <class T>
bool cblas_vector_product(T alpha, const ConstMatrixRef<T>& A, Op op_a, const ConstMatrixRef<T>& B,
                          Op op_b, T beta, MatrixRef<T>& C) {
    const Index m = C.rows(), n = C.cols();
    if (m != 1 && n != 1) return false;
    const auto trans = [](bool t) { return t ? CblasTrans : CblasNoTrans; };
    // With beta = 0 the BLAS does not read y (as GEMM does not read C), so C may hold NaN.
    const int ldc = leading_dimension(C);
    if (m == 1) {
        // c^T [n] = op(B)^T [n, k] a^T [k]: the matrix is B as stored, [k, n] or [n, k].
        const int inc_a = op_a == Op::none ? 1 : leading_dimension(A);  // a: A's row, or column
        cblas_gemv(trans(op_b == Op::none), static_cast<int>(B.rows()), static_cast<int>(B.cols()),
                   alpha, B.data(), leading_dimension(B), A.data(), inc_a, beta, C.data(), 1);
    } else {
        // c [m] = op(A) [m, k] b [k]: the matrix is A as stored; b is B's column, or row.
        const int inc_b = op_b == Op::none ? leading_dimension(B) : 1;
        cblas_gemv(trans(op_a == Op::transpose), static_cast<int>(A.rows()),
                   static_cast<int>(A.cols()), alpha, A.data(), leading_dimension(A), B.data(),
                   inc_b, beta, C.data(), ldc);
    }
    return true;
}
#endif

/// One backend call on the calling thread; shapes are already checked and m, n, k > 0.
template <class T>
void gemm_serial(T alpha, const ConstMatrixRef<T>& A, Op op_a, const ConstMatrixRef<T>& B, Op op_b,
                 T beta, MatrixRef<T>& C) {
#if HEADWISE_GEMM_CBLAS
    if (cblas_vector_product(alpha, A, op_a, B, op_b, beta, C)) return;
    const Index k = op_a == Op::none ? A.cols() : A.rows();
    cblas_gemm(op_a == Op::none ? CblasNoTrans : CblasTrans,
               op_b == Op::none ? CblasNoTrans : CblasTrans, static_cast<int>(C.rows()),
               static_cast<int>(C.cols()), static_cast<int>(k), alpha, A.data(),
               leading_dimension(A), B.data(), leading_dimension(B), beta, C.data(),
               leading_dimension(C));
#else
    if (op_a == Op::none && op_b == Op::none)
        eigen_gemm(alpha, A, B, beta, C);
    else if (op_a == Op::none)
        eigen_gemm(alpha, A, B.transpose(), beta, C);
    else if (op_b == Op::none)
        eigen_gemm(alpha, A.transpose(), B, beta, C);
    else
        eigen_gemm(alpha, A.transpose(), B.transpose(), beta, C);
#endif
}

/// Rows [first, first + count) of op(X), as a block of X (columns of X when transposed).
template <class T>
ConstMatrixRef<T> op_rows(const ConstMatrixRef<T>& X, Op op, Index first, Index count) {
    if (op == Op::none) return X.middleRows(first, count);
    return X.middleCols(first, count);
}

/// Columns [first, first + count) of op(X), as a block of X (rows of X when transposed).
template <class T>
ConstMatrixRef<T> op_cols(const ConstMatrixRef<T>& X, Op op, Index first, Index count) {
    if (op == Op::none) return X.middleCols(first, count);
    return X.middleRows(first, count);
}

/// Products below this many multiply-adds run as one backend call: splitting them costs more in
/// start-up and repeated packing than it saves.
inline constexpr double kGemmSplitMinMacs = 1 << 20;
/// Row (or column) blocks are multiples of this, so that every block keeps whole register tiles.
inline constexpr Index kGemmSplitQuantum = 32;
/// The rows (or columns) of C per block of a split product: blocks large enough that packing the
/// other operand once per block costs little.
inline constexpr Index kGemmBlockExtent = 8 * kGemmSplitQuantum;

/// Blocks a product is split into along the longer side of C [m, n]: a function of the shape
/// alone, never of the thread count, so that every element of C comes out of the same backend
/// call (the same kernel, edge handling and blocking over k) on any number of threads, and a
/// run gives the same bits on 1 thread as on 8. 1 without OpenMP, where nothing is split.
inline Index gemm_blocks(Index m, Index n, Index k) {
#if HEADWISE_GEMM_OPENMP
    const double macs = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    if (macs < kGemmSplitMinMacs) return 1;
    return std::max<Index>(1, std::max(m, n) / kGemmBlockExtent);
#else
    static_cast<void>(m);
    static_cast<void>(n);
    static_cast<void>(k);
    return 1;
#endif
}

/// In a build without OpenMP on OpenBLAS (which threads each product itself), a product below
/// kSerialProductMacs multiply-adds runs with OpenBLAS's thread count set to 1 for the call and
/// restored on leaving; otherwise nothing.
class BlasSerialScope {
public:
#if HEADWISE_GEMM_CBLAS && !HEADWISE_GEMM_OPENMP && defined(OPENBLAS_VERSION)
    explicit BlasSerialScope(double macs) noexcept {
        if (macs >= kSerialProductMacs) return;
        const int threads = openblas_get_num_threads();
        if (threads <= 1) return;
        saved_ = threads;
        openblas_set_num_threads(1);
    }
    ~BlasSerialScope() {
        if (saved_ > 1) openblas_set_num_threads(saved_);
    }

private:
    int saved_ = 0;
#else
    explicit BlasSerialScope(double macs) noexcept { static_cast<void>(macs); }
#endif
public:
    BlasSerialScope(const BlasSerialScope&) = delete;
    BlasSerialScope& operator=(const BlasSerialScope&) = delete;
};

/// Keeps Eigen from starting threads of its own inside one backend call: Eigen splits a product
/// over omp_get_max_threads() threads when called outside a parallel region, with blocking that
/// depends on the thread count, so results would change with OMP_NUM_THREADS. Sets the calling
/// task's nthreads ICV to 1 for the scope (a per-task setting, not the process's) and restores
/// it on leaving.
class SingleThreadScope {
public:
#if HEADWISE_GEMM_OPENMP && !HEADWISE_GEMM_CBLAS
    SingleThreadScope() noexcept : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
    ~SingleThreadScope() { omp_set_num_threads(saved_); }
#else
    SingleThreadScope() noexcept = default;
#endif
    SingleThreadScope(const SingleThreadScope&) = delete;
    SingleThreadScope& operator=(const SingleThreadScope&) = delete;

private:
#if HEADWISE_GEMM_OPENMP && !HEADWISE_GEMM_CBLAS
    int saved_;
#endif
};

}  // namespace headwise::detail

namespace headwise::ops {

template <class T>
void gemm(T alpha, ConstMatrixRef<T> A, Op op_a, ConstMatrixRef<T> B, Op op_b, T beta,
          MatrixRef<T> C) {
    HEADWISE_STATIC_ASSERT_REAL(T);
    constexpr const char* fn = "headwise::ops::gemm";
    // op(A) [m, k], op(B) [k, n], C [m, n]
    const Index m = op_a == Op::none ? A.rows() : A.cols();
    const Index k = op_a == Op::none ? A.cols() : A.rows();
    const Index n = op_b == Op::none ? B.cols() : B.rows();
    const Index kb = op_b == Op::none ? B.rows() : B.cols();
    if (kb != k)
        throw shape_error(
            fn, op_b == Op::none ? "B" : "B (transposed)",
            op_b == Op::none ? "[" + std::to_string(k) + ", n]" : "[n, " + std::to_string(k) + "]",
            Shape{B.rows(), B.cols()});
    detail::check_shape(fn, "C", Shape{C.rows(), C.cols()}, Shape{m, n});
#if HEADWISE_GEMM_CBLAS
    // CBLAS takes int extents and strides.
    for (const Index extent : {m, n, k, A.outerStride(), B.outerStride(), C.outerStride()})
        if (extent > INT_MAX)
            throw_invalid_argument(fn, "A, B, C", "extents and row strides up to INT_MAX (CBLAS)",
                                   std::to_string(extent));
#endif
    if (m == 0 || n == 0) return;
    if (k == 0) {  // an empty sum: C = beta C, and beta = 0 means C is not read
        if (beta == T(0))
            C.setZero();
        else if (beta != T(1))
            C *= beta;
        return;
    }

    const Index blocks = detail::gemm_blocks(m, n, k);
    if (blocks <= 1) {
        [[maybe_unused]] const detail::SingleThreadScope one_thread;
        [[maybe_unused]] const detail::BlasSerialScope small(
            static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k));
        detail::gemm_serial(alpha, A, op_a, B, op_b, beta, C);
        return;
    }
    // Split C along its longer side into `blocks` blocks of whole quanta, fixed by the shape;
    // each multiplies its block of op(A) (or op(B)) by the whole other operand. The threads
    // (none more than blocks, one inside a parallel region) share the blocks out.
    const bool by_rows = m >= n;
    const Index extent = by_rows ? m : n;
    const Index quanta = (extent + detail::kGemmSplitQuantum - 1) / detail::kGemmSplitQuantum;
    auto block = [&](Index b) {
        const Index first = std::min(extent, (quanta * b / blocks) * detail::kGemmSplitQuantum);
        const Index last =
            std::min(extent, (quanta * (b + 1) / blocks) * detail::kGemmSplitQuantum);
        if (last <= first) return;
        [[maybe_unused]] const detail::SingleThreadScope one_thread;
        if (by_rows) {
            MatrixRef<T> Cb = C.middleRows(first, last - first);
            detail::gemm_serial<T>(alpha, detail::op_rows<T>(A, op_a, first, last - first), op_a, B,
                                   op_b, beta, Cb);
        } else {
            MatrixRef<T> Cb = C.middleCols(first, last - first);
            detail::gemm_serial<T>(alpha, A, op_a, detail::op_cols<T>(B, op_b, first, last - first),
                                   op_b, beta, Cb);
        }
    };
#if HEADWISE_GEMM_OPENMP
    const int threads =
        omp_in_parallel() ? 1 : static_cast<int>(std::min<Index>(omp_get_max_threads(), blocks));
#pragma omp parallel for num_threads(threads) schedule(static)
    for (Index b = 0; b < blocks; ++b) block(b);
#else
    for (Index b = 0; b < blocks; ++b) block(b);
#endif
}

}  // namespace headwise::ops
