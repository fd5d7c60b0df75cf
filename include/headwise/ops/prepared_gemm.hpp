// SPDX-License-Identifier: MIT
// PreparedMatrix: a float weight held in the layout of the kernel that multiplies it (oneDNN's
// matmul, weights reordered once), and the product Y = X W^T + b against it.
// ops/: stateless kernels that write into buffers the caller provides (nothing allocated per
// call); tensor_ops/ holds the functions that return new tensors.
#pragma once

#include <algorithm>  // std::max
#include <cstddef>    // std::size_t
#include <memory>     // std::shared_ptr
#include <mutex>      // std::mutex, std::lock_guard
#include <stdexcept>  // std::runtime_error
#include <string>     // std::string, std::to_string
#include <utility>    // std::pair
#include <vector>     // std::vector

#include "../config.hpp"
#include "../detail/parallel.hpp"
#include "../error.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"
#include "gemm.hpp"  // HEADWISE_GEMM_CBLAS, HEADWISE_GEMM_OPENMP (and <cblas.h>, <omp.h> with them)

// Backend. With HEADWISE_USE_DNNL defined non-zero (CMake: HEADWISE_BF16, which links oneDNN 2)
// a weight is prepared for oneDNN's f32 matmul: the primitive is made once, for any number of
// rows (a run-time M), with the weight in the layout it asks for (format any: blocked panels on
// CPUs with AVX-512, the transposed [in, out] matrix for its jit GEMM on AVX2 machines), and the
// weight reordered into that layout once. A product then runs the primitive on the caller's X
// and Y with no packing of the weight. Without oneDNN nothing is prepared
// (prepared_gemm_available() is false) and callers keep the plain product, ops::linear_forward.
//
// oneDNN f32 matmul sums in an order of its own (its kernel, its blocking of k), so its results
// differ from ops::gemm's (Eigen's or the CBLAS's) by rounding: at most a few units of float
// rounding of sum_k |x_k w_k| per element (tests/layers/test_prepared_weights.cpp bounds it). It
// has no f64 matmul: double weights are never prepared.
//
// Threads: oneDNN's CPU engine runs on OpenMP (Debian's libdnnl is built so). A product below
// kPreparedSplitMinMacs multiply-adds runs on the calling thread alone (starting and joining
// threads costs more than they save there: detail::kSerialProductMacs); a larger one
// on as many threads as ops::gemm uses (OpenMP's count in an OpenMP build, else the CBLAS's).
#if defined(HEADWISE_USE_DNNL) && HEADWISE_USE_DNNL
#include <dlfcn.h>             // dlsym, RTLD_DEFAULT
#include <oneapi/dnnl/dnnl.h>  // dnnl_matmul_desc_init, dnnl_reorder_primitive_desc_create, ...
#if DNNL_VERSION_MAJOR != 2
#error "headwise: HEADWISE_USE_DNNL needs oneDNN 2 (oneDNN 3 changed its C API)"
#endif
#define HEADWISE_PREPARED_DNNL 1
#else
#define HEADWISE_PREPARED_DNNL 0
#endif

namespace headwise::ops {

/// Whether float weights can be prepared in this build on this machine (oneDNN linked and its
/// CPU engine made). False without oneDNN: WeightMatrix then keeps the plain product.
inline bool prepared_gemm_available() noexcept;

/// "dnnl" when prepared_gemm_available(), else "none".
inline const char* prepared_gemm_backend() noexcept {
    return prepared_gemm_available() ? "dnnl" : "none";
}

/// Products below this many multiply-adds (M N K) run on one thread (detail/parallel.hpp).
inline constexpr double kPreparedSplitMinMacs = detail::kSerialProductMacs;

/// A weight W [rows, cols] (out, in) prepared for Y [N, rows] = X [N, cols] W^T + b, for any N.
/// Immutable once made; forward may run from several threads at once.
class PreparedMatrix {
public:
    /// W prepared from `W` [rows, cols] with rows `stride` floats apart (read, not kept), or
    /// null when this build or machine has no prepared product (prepared_gemm_available()) or
    /// oneDNN refuses the shape.
    static std::shared_ptr<const PreparedMatrix> make(const float* W, Index rows, Index cols,
                                                      Index stride);
    ~PreparedMatrix();
    PreparedMatrix(const PreparedMatrix&) = delete;
    PreparedMatrix& operator=(const PreparedMatrix&) = delete;

    Index rows() const noexcept { return rows_; }
    Index cols() const noexcept { return cols_; }
    /// Bytes of the prepared weight (its layout may pad).
    std::size_t bytes() const noexcept { return bytes_; }

    /// Y [N, rows] = X [N, cols] W^T + b (b [rows] or nullptr), Y overwritten; X and Y with any
    /// row stride. Shapes checked in every build (shape_error naming the argument).
    void forward(ConstMatrixRef<float> X, const float* b, MatrixRef<float> Y) const;

private:
    PreparedMatrix() = default;

    Index rows_ = 0, cols_ = 0;
    std::size_t bytes_ = 0;
    std::vector<float> zero_bias_;  // [rows]: the bias of a product without one
#if HEADWISE_PREPARED_DNNL
    /// The primitive for `threads` threads, made on first use: oneDNN fixes a primitive's thread
    /// count when it is made (from the OpenMP count then), so each count has its own.
    dnnl_primitive_t matmul(int threads) const;

    dnnl_matmul_desc_t desc_{};
    dnnl_memory_t weights_ = nullptr;  // in the primitives' layout, owned by oneDNN
    mutable std::mutex mutex_;         // guards matmuls_
    mutable std::vector<std::pair<int, dnnl_primitive_t>> matmuls_;  // by thread count
#endif
};

}  // namespace headwise::ops

// ---- definitions ----------------------------------------------------------------------------

namespace headwise::detail {

#if HEADWISE_PREPARED_DNNL
/// oneDNN's CPU engine for prepared products, made once.
inline dnnl_engine_t prepared_engine() noexcept {
    static const dnnl_engine_t engine = [] {
        dnnl_engine_t e = nullptr;
        if (dnnl_engine_create(&e, dnnl_cpu, 0) != dnnl_success) return dnnl_engine_t{nullptr};
        return e;
    }();
    return engine;
}

/// The OpenMP runtime's thread-count calls, which oneDNN's threads follow. An OpenMP build has
/// them from <omp.h>; otherwise they are looked up in the runtime oneDNN itself loaded (libgomp),
/// so that a build without OpenMP needs no OpenMP flag. Null when there is none.
struct OmpCalls {
    int (*get_max_threads)() = nullptr;
    void (*set_num_threads)(int) = nullptr;
};
inline const OmpCalls& omp_calls() noexcept {
    static const OmpCalls calls = [] {
        OmpCalls c;
#if HEADWISE_GEMM_OPENMP
        c.get_max_threads = &omp_get_max_threads;
        c.set_num_threads = &omp_set_num_threads;
#else
        c.get_max_threads = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
        c.set_num_threads =
            reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
        if (!c.get_max_threads || !c.set_num_threads) c = OmpCalls{};
#endif
        return c;
    }();
    return calls;
}

/// Threads a large prepared product uses: those ops::gemm uses (OpenMP's count in an OpenMP
/// build, else OpenBLAS's when it is the CBLAS), else the OpenMP runtime's.
inline int prepared_threads() noexcept {
#if HEADWISE_GEMM_OPENMP
    return omp_get_max_threads();
#elif HEADWISE_GEMM_CBLAS && defined(OPENBLAS_VERSION)
    return openblas_get_num_threads();
#else
    const OmpCalls& omp = omp_calls();
    return omp.get_max_threads ? omp.get_max_threads() : 1;
#endif
}

/// Sets the calling thread's OpenMP thread count (which oneDNN reads when a product starts) for
/// the scope, and restores it on leaving.
class PreparedThreadsScope {
public:
    explicit PreparedThreadsScope(int threads) noexcept {
        const OmpCalls& omp = omp_calls();
        if (!omp.set_num_threads) return;
        saved_ = omp.get_max_threads();
        if (saved_ != threads) omp.set_num_threads(threads);
    }
    ~PreparedThreadsScope() {
        const OmpCalls& omp = omp_calls();
        if (saved_ > 0 && omp.get_max_threads() != saved_) omp.set_num_threads(saved_);
    }
    PreparedThreadsScope(const PreparedThreadsScope&) = delete;
    PreparedThreadsScope& operator=(const PreparedThreadsScope&) = delete;

private:
    int saved_ = 0;
};
#endif

}  // namespace headwise::detail

namespace headwise::ops {

inline bool prepared_gemm_available() noexcept {
#if HEADWISE_PREPARED_DNNL
    return detail::prepared_engine() != nullptr;
#else
    return false;
#endif
}

inline std::shared_ptr<const PreparedMatrix> PreparedMatrix::make(const float* W, Index rows,
                                                                  Index cols, Index stride) {
#if HEADWISE_PREPARED_DNNL
    dnnl_engine_t engine = detail::prepared_engine();
    if (engine == nullptr || rows <= 0 || cols <= 0) return nullptr;
    std::shared_ptr<PreparedMatrix> p(new PreparedMatrix());
    p->rows_ = rows;
    p->cols_ = cols;
    p->zero_bias_.assign(static_cast<std::size_t>(rows), 0.0f);
    // The matmul: src X [M, K] and dst Y [M, N] with M and their row strides known at run time,
    // weights B = W^T [K, N] in the layout oneDNN picks (any), bias [1, N].
    const dnnl_dim_t K = cols, N = rows, rt = DNNL_RUNTIME_DIM_VAL;
    dnnl_memory_desc_t src_md, dst_md, any_md, bias_md, plain_md;
    const dnnl_dims_t src_dims = {rt, K}, src_strides = {rt, 1};
    const dnnl_dims_t dst_dims = {rt, N}, dst_strides = {rt, 1};
    const dnnl_dims_t w_dims = {K, N}, w_strides = {1, stride};  // !! W^T read in place !!
    const dnnl_dims_t bias_dims = {1, N};
    bool ok =
        dnnl_memory_desc_init_by_strides(&src_md, 2, src_dims, dnnl_f32, src_strides) ==
            dnnl_success &&
        dnnl_memory_desc_init_by_strides(&dst_md, 2, dst_dims, dnnl_f32, dst_strides) ==
            dnnl_success &&
        dnnl_memory_desc_init_by_tag(&any_md, 2, w_dims, dnnl_f32, dnnl_format_tag_any) ==
            dnnl_success &&
        dnnl_memory_desc_init_by_tag(&bias_md, 2, bias_dims, dnnl_f32, dnnl_ab) == dnnl_success &&
        dnnl_memory_desc_init_by_strides(&plain_md, 2, w_dims, dnnl_f32, w_strides) == dnnl_success;
    dnnl_primitive_desc_t pd = nullptr, reorder_pd = nullptr;
    dnnl_primitive_t reorder = nullptr;
    dnnl_memory_t plain = nullptr;
    dnnl_stream_t stream = nullptr;
    ok = ok &&
         dnnl_matmul_desc_init(&p->desc_, &src_md, &any_md, &bias_md, &dst_md) == dnnl_success &&
         dnnl_primitive_desc_create(&pd, &p->desc_, nullptr, engine, nullptr) == dnnl_success;
    const dnnl_memory_desc_t* w_md =
        ok ? dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0) : nullptr;
    ok = ok && w_md != nullptr &&
         dnnl_memory_create(&p->weights_, w_md, engine, DNNL_MEMORY_ALLOCATE) == dnnl_success &&
         dnnl_memory_create(&plain, &plain_md, engine, const_cast<float*>(W)) == dnnl_success &&
         dnnl_reorder_primitive_desc_create(&reorder_pd, &plain_md, engine, w_md, engine,
                                            nullptr) == dnnl_success &&
         dnnl_primitive_create(&reorder, reorder_pd) == dnnl_success &&
         dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) == dnnl_success;
    if (ok) {
        p->bytes_ = dnnl_memory_desc_get_size(w_md);
        const dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, plain}, {DNNL_ARG_TO, p->weights_}};
        ok = dnnl_primitive_execute(reorder, stream, 2, args) == dnnl_success &&
             dnnl_stream_wait(stream) == dnnl_success;
    }
    if (stream) dnnl_stream_destroy(stream);
    if (reorder) dnnl_primitive_destroy(reorder);
    if (reorder_pd) dnnl_primitive_desc_destroy(reorder_pd);
    if (plain) dnnl_memory_destroy(plain);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (!ok) return nullptr;  // the destructor frees what was made
    return p;
#else
    static_cast<void>(W);
    static_cast<void>(rows);
    static_cast<void>(cols);
    static_cast<void>(stride);
    return nullptr;
#endif
}

inline PreparedMatrix::~PreparedMatrix() {
#if HEADWISE_PREPARED_DNNL
    for (const auto& m : matmuls_) dnnl_primitive_destroy(m.second);
    if (weights_) dnnl_memory_destroy(weights_);
#endif
}

#if HEADWISE_PREPARED_DNNL
inline dnnl_primitive_t PreparedMatrix::matmul(int threads) const {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& m : matmuls_)
        if (m.first == threads) return m.second;
    // Made while the calling thread's OpenMP count is `threads` (the caller's scope).
    dnnl_primitive_desc_t pd = nullptr;
    dnnl_primitive_t prim = nullptr;
    const bool ok = dnnl_primitive_desc_create(&pd, &desc_, nullptr, detail::prepared_engine(),
                                               nullptr) == dnnl_success &&
                    dnnl_primitive_create(&prim, pd) == dnnl_success;
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (!ok) return nullptr;
    matmuls_.emplace_back(threads, prim);
    return prim;
}
#endif

inline void PreparedMatrix::forward(ConstMatrixRef<float> X, const float* b,
                                    MatrixRef<float> Y) const {
    constexpr const char* fn = "headwise::ops::PreparedMatrix::forward";
    const Index M = X.rows();
    detail::check_shape(fn, "X", Shape{X.rows(), X.cols()}, Shape{M, cols_});
    detail::check_shape(fn, "Y", Shape{Y.rows(), Y.cols()}, Shape{M, rows_});
    if (M == 0) return;
#if HEADWISE_PREPARED_DNNL
    dnnl_engine_t engine = detail::prepared_engine();
    const dnnl_dim_t K = cols_, N = rows_;
    const dnnl_dims_t src_dims = {M, K}, dst_dims = {M, N}, bias_dims = {1, N};
    const dnnl_dims_t src_strides = {std::max<Index>(X.outerStride(), K), 1};
    const dnnl_dims_t dst_strides = {std::max<Index>(Y.outerStride(), N), 1};
    dnnl_memory_desc_t src_md, dst_md, bias_md;
    dnnl_memory_t mem[3] = {nullptr, nullptr, nullptr};
    dnnl_stream_t stream = nullptr;
    bool ok =
        dnnl_memory_desc_init_by_strides(&src_md, 2, src_dims, dnnl_f32, src_strides) ==
            dnnl_success &&
        dnnl_memory_desc_init_by_strides(&dst_md, 2, dst_dims, dnnl_f32, dst_strides) ==
            dnnl_success &&
        dnnl_memory_desc_init_by_tag(&bias_md, 2, bias_dims, dnnl_f32, dnnl_ab) == dnnl_success &&
        dnnl_memory_create(&mem[0], &src_md, engine, const_cast<float*>(X.data())) ==
            dnnl_success &&
        dnnl_memory_create(&mem[1], &dst_md, engine, Y.data()) == dnnl_success &&
        dnnl_memory_create(&mem[2], &bias_md, engine,
                           const_cast<float*>(b ? b : zero_bias_.data())) == dnnl_success &&
        dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) == dnnl_success;
    const double macs = static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
    const int threads = macs < kPreparedSplitMinMacs ? 1 : detail::prepared_threads();
    const detail::PreparedThreadsScope scope(threads);
    const dnnl_primitive_t prim = ok ? matmul(threads) : nullptr;
    ok = ok && prim != nullptr;
    if (ok) {
        const dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, mem[0]},
                                         {DNNL_ARG_WEIGHTS, weights_},
                                         {DNNL_ARG_BIAS, mem[2]},
                                         {DNNL_ARG_DST, mem[1]}};
        ok = dnnl_primitive_execute(prim, stream, 4, args) == dnnl_success &&
             dnnl_stream_wait(stream) == dnnl_success;
    }
    if (stream) dnnl_stream_destroy(stream);
    for (dnnl_memory_t m : mem)
        if (m) dnnl_memory_destroy(m);
    if (!ok)  // made by make(), so only a failed allocation gets here
        throw std::runtime_error(std::string(fn) + ": oneDNN's matmul failed for X [" +
                                 std::to_string(M) + ", " + std::to_string(cols_) + "]");
#else
    static_cast<void>(b);
#endif
}

}  // namespace headwise::ops
