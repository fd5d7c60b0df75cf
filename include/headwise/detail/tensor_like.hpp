// SPDX-License-Identifier: MIT
// Traits that let free functions take a Tensor, a TensorView or a read-only view alike.
#pragma once

#include <type_traits>  // std::enable_if_t, std::is_const_v, std::remove_cv_t, ...

#include "../config.hpp"
#include "../tensor.hpp"

namespace headwise::detail {

// A function template cannot deduce T of `TensorView<const T>` from a `Tensor<T>` argument
// (deduction ignores conversions), so the tensor operations take any tensor-like `X` under the
// constraint below and turn it into a view inside.

template <class X>
struct tensor_traits {
    static constexpr bool is_tensor = false;
    static constexpr bool is_mutable = false;
};
template <class T>
struct tensor_traits<Tensor<T>> {
    static constexpr bool is_tensor = true;
    static constexpr bool is_mutable = true;
};
template <class T>
struct tensor_traits<TensorView<T>> {
    static constexpr bool is_tensor = true;
    static constexpr bool is_mutable = !std::is_const_v<T>;
};

/// True for Tensor<T>, TensorView<T> and TensorView<const T> (any cv-ref qualification).
template <class X>
inline constexpr bool is_tensor_v =
    tensor_traits<std::remove_cv_t<std::remove_reference_t<X>>>::is_tensor;

/// True when elements can be written through an lvalue of type X: a non-const Tensor<T> or a
/// TensorView<T> of mutable T.
template <class X>
inline constexpr bool is_mutable_tensor_v =
    !std::is_const_v<std::remove_reference_t<X>> &&
    tensor_traits<std::remove_cv_t<std::remove_reference_t<X>>>::is_mutable;

/// `int` when every X is tensor-like; the SFINAE guard `detail::require_tensors<X, Y> = 0`.
template <class... X>
using require_tensors = std::enable_if_t<(is_tensor_v<X> && ...), int>;

/// `int` when X is a writable tensor (see is_mutable_tensor_v).
template <class X>
using require_mutable_tensor = std::enable_if_t<is_mutable_tensor_v<X>, int>;

/// The element type of a tensor-like X, without const: float for TensorView<const float>.
template <class X>
using scalar_t = typename std::remove_cv_t<std::remove_reference_t<X>>::value_type;

/// Read-only view of a tensor-like argument (no copy).
template <class X>
TensorView<const scalar_t<X>> const_view(const X& x) noexcept {
    return TensorView<const scalar_t<X>>(x);
}

/// Writable view of a non-const Tensor<T> or a TensorView<T> (no copy).
template <class T>
TensorView<T> mutable_view(Tensor<T>& x) noexcept {
    return x.view();
}
template <class T>
TensorView<T> mutable_view(TensorView<T> x) noexcept {
    return x;
}

}  // namespace headwise::detail
