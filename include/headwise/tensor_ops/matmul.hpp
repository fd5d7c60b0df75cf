// SPDX-License-Identifier: MIT
// Matrix products of rank-2 tensors and of batches of them, optionally with transposed operands.
// tensor_ops/: functions that allocate and return new tensors; ops/ holds the kernels that write
// into buffers the caller provides.
#pragma once

#include <Eigen/Core>

#include <string>       // std::string, std::to_string
#include <type_traits>  // std::is_same_v

#include "../config.hpp"
#include "../detail/tensor_like.hpp"
#include "../error.hpp"
#include "../ops/gemm.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"
#include "detail/loops.hpp"

namespace headwise {

/// C = op(a) op(b) with op(a) = a^T when transpose_a (likewise b): a [m, k] (or [k, m]),
/// b [k, n] (or [n, k]) -> C [m, n]. No transposed copy is made; Eigen reads the operands in place.
template <class X, class Y, detail::require_tensors<X, Y> = 0>
Tensor<detail::scalar_t<X>> matmul(const X& a, const Y& b, bool transpose_a = false,
                                   bool transpose_b = false);

/// C[i] = op(a[i]) op(b[i]) for every i of the leading batch axis: a [N, m, k], b [N, k, n]
/// -> C [N, m, n], with the same transpose flags as matmul (applied to each matrix).
template <class X, class Y, detail::require_tensors<X, Y> = 0>
Tensor<detail::scalar_t<X>> batched_matmul(const X& a, const Y& b, bool transpose_a = false,
                                           bool transpose_b = false);

// ---- definitions ---------------------------------------------------------------------------

template <class X, class Y, detail::require_tensors<X, Y>>
Tensor<detail::scalar_t<X>> matmul(const X& a, const Y& b, bool transpose_a, bool transpose_b) {
    using T = detail::scalar_t<X>;
    HEADWISE_STATIC_ASSERT_REAL(T);
    static_assert(std::is_same_v<T, detail::scalar_t<Y>>,
                  "headwise::matmul: a and b must hold the same scalar type; convert one first");
    constexpr const char* fn = "headwise::matmul";
    const TensorView<const T> A = detail::const_view(a);  // [m, k] or [k, m]
    const TensorView<const T> B = detail::const_view(b);  // [k, n] or [n, k]
    if (A.rank() != 2)
        throw shape_error(fn, "a", detail::matrix_pattern("", "m", "k", transpose_a), A.shape());
    const Index m = transpose_a ? A.shape()[1] : A.shape()[0];
    const Index k = transpose_a ? A.shape()[0] : A.shape()[1];
    const Index b_inner =
        transpose_b ? (B.rank() == 2 ? B.shape()[1] : -1) : (B.rank() == 2 ? B.shape()[0] : -1);
    if (B.rank() != 2 || b_inner != k)
        throw shape_error(fn, "b", detail::matrix_pattern("", std::to_string(k), "n", transpose_b),
                          B.shape());
    const Index n = transpose_b ? B.shape()[0] : B.shape()[1];

    Tensor<T> C(Shape{m, n});  // [m, n]
    detail::matmul_into(A.data(), A.shape()[0], A.shape()[1], transpose_a, B.data(), B.shape()[0],
                        B.shape()[1], transpose_b, C.data());
    return C;
}

template <class X, class Y, detail::require_tensors<X, Y>>
Tensor<detail::scalar_t<X>> batched_matmul(const X& a, const Y& b, bool transpose_a,
                                           bool transpose_b) {
    using T = detail::scalar_t<X>;
    HEADWISE_STATIC_ASSERT_REAL(T);
    static_assert(std::is_same_v<T, detail::scalar_t<Y>>,
                  "headwise::batched_matmul: a and b must hold the same scalar type; convert one "
                  "first");
    constexpr const char* fn = "headwise::batched_matmul";
    const TensorView<const T> A = detail::const_view(a);  // [N, m, k] or [N, k, m]
    const TensorView<const T> B = detail::const_view(b);  // [N, k, n] or [N, n, k]
    if (A.rank() != 3)
        throw shape_error(fn, "a", detail::matrix_pattern("N, ", "m", "k", transpose_a), A.shape());
    const Index N = A.shape()[0];
    const Index m = transpose_a ? A.shape()[2] : A.shape()[1];
    const Index k = transpose_a ? A.shape()[1] : A.shape()[2];
    const bool b_ok =
        B.rank() == 3 && B.shape()[0] == N && (transpose_b ? B.shape()[2] : B.shape()[1]) == k;
    if (!b_ok)
        throw shape_error(
            fn, "b",
            detail::matrix_pattern(std::to_string(N) + ", ", std::to_string(k), "n", transpose_b),
            B.shape());
    const Index n = transpose_b ? B.shape()[1] : B.shape()[2];

    Tensor<T> C(Shape{N, m, n});  // [N, m, n]
    const Index a_step = A.shape()[1] * A.shape()[2];
    const Index b_step = B.shape()[1] * B.shape()[2];
    for (Index i = 0; i < N; ++i)
        detail::matmul_into(A.data() + i * a_step, A.shape()[1], A.shape()[2], transpose_a,
                            B.data() + i * b_step, B.shape()[1], B.shape()[2], transpose_b,
                            C.data() + i * m * n);
    return C;
}

}  // namespace headwise
