// SPDX-License-Identifier: MIT
// Elementwise arithmetic on tensors of one shape, with scalars, and a row broadcast over rows.
// tensor_ops/: functions that allocate and return new tensors; ops/ holds the kernels that write
// into buffers the caller provides.
#pragma once

#include <Eigen/Core>

#include <type_traits>  // std::is_same_v

#include "../config.hpp"
#include "../detail/tensor_like.hpp"
#include "../error.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"
#include "detail/loops.hpp"

// Every function checks shapes first (throwing shape_error), then computes with Eigen array
// maps over the flat data, and returns a new tensor. The compound assignments (+= ...) write into
// their left operand, which may be a Tensor or a writable TensorView (e.g. a slice). There is no
// implicit broadcasting: shapes match exactly, except in broadcast_add.

namespace headwise {

// ---- tensor (op) tensor of the same shape --------------------------------------------------
template <class X, class Y, detail::require_tensors<X, Y> = 0>
Tensor<detail::scalar_t<X>> add(const X& a, const Y& b);
template <class X, class Y, detail::require_tensors<X, Y> = 0>
Tensor<detail::scalar_t<X>> sub(const X& a, const Y& b);
template <class X, class Y, detail::require_tensors<X, Y> = 0>
Tensor<detail::scalar_t<X>> mul(const X& a, const Y& b);  // Hadamard product a ⊙ b
template <class X, class Y, detail::require_tensors<X, Y> = 0>
Tensor<detail::scalar_t<X>> div(const X& a, const Y& b);

// ---- tensor (op) scalar --------------------------------------------------------------------
template <class X, detail::require_tensors<X> = 0>
Tensor<detail::scalar_t<X>> add(const X& a, detail::scalar_t<X> s);
template <class X, detail::require_tensors<X> = 0>
Tensor<detail::scalar_t<X>> sub(const X& a, detail::scalar_t<X> s);
template <class X, detail::require_tensors<X> = 0>
Tensor<detail::scalar_t<X>> mul(const X& a, detail::scalar_t<X> s);
template <class X, detail::require_tensors<X> = 0>
Tensor<detail::scalar_t<X>> div(const X& a, detail::scalar_t<X> s);

// ---- unary ---------------------------------------------------------------------------------
template <class X, detail::require_tensors<X> = 0>
Tensor<detail::scalar_t<X>> neg(const X& x);
template <class X, detail::require_tensors<X> = 0>
Tensor<detail::scalar_t<X>> exp(const X& x);

/// x [..., n] + row [n]: `row` added to every row of the last axis (a bias over leading axes).
template <class X, class Y, detail::require_tensors<X, Y> = 0>
Tensor<detail::scalar_t<X>> broadcast_add(const X& x, const Y& row);

// ---- operators -----------------------------------------------------------------------------
template <class X, class Y, detail::require_tensors<X, Y> = 0>
Tensor<detail::scalar_t<X>> operator+(const X& a, const Y& b);
template <class X, class Y, detail::require_tensors<X, Y> = 0>
Tensor<detail::scalar_t<X>> operator-(const X& a, const Y& b);
template <class X, class Y, detail::require_tensors<X, Y> = 0>
Tensor<detail::scalar_t<X>> operator*(const X& a, const Y& b);  // elementwise, not matmul
template <class X, class Y, detail::require_tensors<X, Y> = 0>
Tensor<detail::scalar_t<X>> operator/(const X& a, const Y& b);

template <class X, detail::require_tensors<X> = 0>
Tensor<detail::scalar_t<X>> operator+(const X& a, detail::scalar_t<X> s);
template <class X, detail::require_tensors<X> = 0>
Tensor<detail::scalar_t<X>> operator-(const X& a, detail::scalar_t<X> s);
template <class X, detail::require_tensors<X> = 0>
Tensor<detail::scalar_t<X>> operator*(const X& a, detail::scalar_t<X> s);
template <class X, detail::require_tensors<X> = 0>
Tensor<detail::scalar_t<X>> operator/(const X& a, detail::scalar_t<X> s);

template <class X, detail::require_tensors<X> = 0>
Tensor<detail::scalar_t<X>> operator+(detail::scalar_t<X> s, const X& a);
template <class X, detail::require_tensors<X> = 0>
Tensor<detail::scalar_t<X>> operator-(detail::scalar_t<X> s, const X& a);
template <class X, detail::require_tensors<X> = 0>
Tensor<detail::scalar_t<X>> operator*(detail::scalar_t<X> s, const X& a);
template <class X, detail::require_tensors<X> = 0>
Tensor<detail::scalar_t<X>> operator/(detail::scalar_t<X> s, const X& a);  // s / a[i]

template <class X, detail::require_tensors<X> = 0>
Tensor<detail::scalar_t<X>> operator-(const X& x);

template <class X, class Y, detail::require_mutable_tensor<X> = 0, detail::require_tensors<Y> = 0>
X& operator+=(X& a, const Y& b);
template <class X, class Y, detail::require_mutable_tensor<X> = 0, detail::require_tensors<Y> = 0>
X& operator-=(X& a, const Y& b);
template <class X, class Y, detail::require_mutable_tensor<X> = 0, detail::require_tensors<Y> = 0>
X& operator*=(X& a, const Y& b);
template <class X, class Y, detail::require_mutable_tensor<X> = 0, detail::require_tensors<Y> = 0>
X& operator/=(X& a, const Y& b);

template <class X, detail::require_mutable_tensor<X> = 0>
X& operator+=(X& a, detail::scalar_t<X> s);
template <class X, detail::require_mutable_tensor<X> = 0>
X& operator-=(X& a, detail::scalar_t<X> s);
template <class X, detail::require_mutable_tensor<X> = 0>
X& operator*=(X& a, detail::scalar_t<X> s);
template <class X, detail::require_mutable_tensor<X> = 0>
X& operator/=(X& a, detail::scalar_t<X> s);

// ---- definitions ---------------------------------------------------------------------------

template <class X, class Y, detail::require_tensors<X, Y>>
Tensor<detail::scalar_t<X>> add(const X& a, const Y& b) {
    return detail::elementwise("headwise::add", detail::ElementwiseOp::add, a, b);
}
template <class X, class Y, detail::require_tensors<X, Y>>
Tensor<detail::scalar_t<X>> sub(const X& a, const Y& b) {
    return detail::elementwise("headwise::sub", detail::ElementwiseOp::sub, a, b);
}
template <class X, class Y, detail::require_tensors<X, Y>>
Tensor<detail::scalar_t<X>> mul(const X& a, const Y& b) {
    return detail::elementwise("headwise::mul", detail::ElementwiseOp::mul, a, b);
}
template <class X, class Y, detail::require_tensors<X, Y>>
Tensor<detail::scalar_t<X>> div(const X& a, const Y& b) {
    return detail::elementwise("headwise::div", detail::ElementwiseOp::div, a, b);
}

template <class X, detail::require_tensors<X>>
Tensor<detail::scalar_t<X>> add(const X& a, detail::scalar_t<X> s) {
    return detail::elementwise(detail::ElementwiseOp::add, a, s);
}
template <class X, detail::require_tensors<X>>
Tensor<detail::scalar_t<X>> sub(const X& a, detail::scalar_t<X> s) {
    return detail::elementwise(detail::ElementwiseOp::sub, a, s);
}
template <class X, detail::require_tensors<X>>
Tensor<detail::scalar_t<X>> mul(const X& a, detail::scalar_t<X> s) {
    return detail::elementwise(detail::ElementwiseOp::mul, a, s);
}
template <class X, detail::require_tensors<X>>
Tensor<detail::scalar_t<X>> div(const X& a, detail::scalar_t<X> s) {
    return detail::elementwise(detail::ElementwiseOp::div, a, s);
}

template <class X, detail::require_tensors<X>>
Tensor<detail::scalar_t<X>> neg(const X& x) {
    using T = detail::scalar_t<X>;
    return detail::elementwise(detail::ElementwiseOp::rsub, x, T(0));
}

template <class X, detail::require_tensors<X>>
Tensor<detail::scalar_t<X>> exp(const X& x) {
    using T = detail::scalar_t<X>;
    HEADWISE_STATIC_ASSERT_REAL(T);
    const TensorView<const T> xv = detail::const_view(x);
    Tensor<T> out(xv.shape());  // [x.shape]
    detail::flat_array(out.view()) = detail::flat_array(xv).exp();
    return out;
}

template <class X, class Y, detail::require_tensors<X, Y>>
Tensor<detail::scalar_t<X>> broadcast_add(const X& x, const Y& row) {
    using T = detail::scalar_t<X>;
    HEADWISE_STATIC_ASSERT_REAL(T);
    static_assert(std::is_same_v<T, detail::scalar_t<Y>>,
                  "headwise::broadcast_add: x and row must hold the same scalar type; convert "
                  "one of them first");
    const TensorView<const T> xv = detail::const_view(x);   // [..., n]
    const TensorView<const T> r = detail::const_view(row);  // [n]
    if (xv.rank() < 1) throw shape_error("headwise::broadcast_add", "x", "[..., n]", xv.shape());
    const Index n = xv.shape().back();
    detail::check_shape("headwise::broadcast_add", "row", r.shape(), Shape{n});
    const Index rows = n == 0 ? 0 : xv.numel() / n;
    Tensor<T> out(xv.shape());                                                   // [..., n]
    const MatrixMap<const T> M(xv.data(), rows, n);                              // [rows, n]
    MatrixMap<T> O(out.data(), rows, n);                                         // [rows, n]
    const Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>> b(r.data(), n);  // [1, n]
    O = M.rowwise() + b;
    return out;
}

template <class X, class Y, detail::require_tensors<X, Y>>
Tensor<detail::scalar_t<X>> operator+(const X& a, const Y& b) {
    return detail::elementwise("headwise::operator+", detail::ElementwiseOp::add, a, b);
}
template <class X, class Y, detail::require_tensors<X, Y>>
Tensor<detail::scalar_t<X>> operator-(const X& a, const Y& b) {
    return detail::elementwise("headwise::operator-", detail::ElementwiseOp::sub, a, b);
}
template <class X, class Y, detail::require_tensors<X, Y>>
Tensor<detail::scalar_t<X>> operator*(const X& a, const Y& b) {
    return detail::elementwise("headwise::operator*", detail::ElementwiseOp::mul, a, b);
}
template <class X, class Y, detail::require_tensors<X, Y>>
Tensor<detail::scalar_t<X>> operator/(const X& a, const Y& b) {
    return detail::elementwise("headwise::operator/", detail::ElementwiseOp::div, a, b);
}

template <class X, detail::require_tensors<X>>
Tensor<detail::scalar_t<X>> operator+(const X& a, detail::scalar_t<X> s) {
    return detail::elementwise(detail::ElementwiseOp::add, a, s);
}
template <class X, detail::require_tensors<X>>
Tensor<detail::scalar_t<X>> operator-(const X& a, detail::scalar_t<X> s) {
    return detail::elementwise(detail::ElementwiseOp::sub, a, s);
}
template <class X, detail::require_tensors<X>>
Tensor<detail::scalar_t<X>> operator*(const X& a, detail::scalar_t<X> s) {
    return detail::elementwise(detail::ElementwiseOp::mul, a, s);
}
template <class X, detail::require_tensors<X>>
Tensor<detail::scalar_t<X>> operator/(const X& a, detail::scalar_t<X> s) {
    return detail::elementwise(detail::ElementwiseOp::div, a, s);
}

template <class X, detail::require_tensors<X>>
Tensor<detail::scalar_t<X>> operator+(detail::scalar_t<X> s, const X& a) {
    return detail::elementwise(detail::ElementwiseOp::add, a, s);
}
template <class X, detail::require_tensors<X>>
Tensor<detail::scalar_t<X>> operator-(detail::scalar_t<X> s, const X& a) {
    return detail::elementwise(detail::ElementwiseOp::rsub, a, s);
}
template <class X, detail::require_tensors<X>>
Tensor<detail::scalar_t<X>> operator*(detail::scalar_t<X> s, const X& a) {
    return detail::elementwise(detail::ElementwiseOp::mul, a, s);
}
template <class X, detail::require_tensors<X>>
Tensor<detail::scalar_t<X>> operator/(detail::scalar_t<X> s, const X& a) {
    return detail::elementwise(detail::ElementwiseOp::rdiv, a, s);
}

template <class X, detail::require_tensors<X>>
Tensor<detail::scalar_t<X>> operator-(const X& x) {
    return neg(x);
}

template <class X, class Y, detail::require_mutable_tensor<X>, detail::require_tensors<Y>>
X& operator+=(X& a, const Y& b) {
    return detail::elementwise_assign("headwise::operator+=", detail::ElementwiseOp::add, a, b);
}
template <class X, class Y, detail::require_mutable_tensor<X>, detail::require_tensors<Y>>
X& operator-=(X& a, const Y& b) {
    return detail::elementwise_assign("headwise::operator-=", detail::ElementwiseOp::sub, a, b);
}
template <class X, class Y, detail::require_mutable_tensor<X>, detail::require_tensors<Y>>
X& operator*=(X& a, const Y& b) {
    return detail::elementwise_assign("headwise::operator*=", detail::ElementwiseOp::mul, a, b);
}
template <class X, class Y, detail::require_mutable_tensor<X>, detail::require_tensors<Y>>
X& operator/=(X& a, const Y& b) {
    return detail::elementwise_assign("headwise::operator/=", detail::ElementwiseOp::div, a, b);
}

template <class X, detail::require_mutable_tensor<X>>
X& operator+=(X& a, detail::scalar_t<X> s) {
    return detail::elementwise_assign(detail::ElementwiseOp::add, a, s);
}
template <class X, detail::require_mutable_tensor<X>>
X& operator-=(X& a, detail::scalar_t<X> s) {
    return detail::elementwise_assign(detail::ElementwiseOp::sub, a, s);
}
template <class X, detail::require_mutable_tensor<X>>
X& operator*=(X& a, detail::scalar_t<X> s) {
    return detail::elementwise_assign(detail::ElementwiseOp::mul, a, s);
}
template <class X, detail::require_mutable_tensor<X>>
X& operator/=(X& a, detail::scalar_t<X> s) {
    return detail::elementwise_assign(detail::ElementwiseOp::div, a, s);
}

}  // namespace headwise
