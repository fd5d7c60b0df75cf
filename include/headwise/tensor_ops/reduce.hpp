// SPDX-License-Identifier: MIT
// Reductions: sum, mean and max along one axis (keepdim or not), and sum and mean of everything.
// tensor_ops/: functions that allocate and return new tensors; ops/ holds the kernels that write
// into buffers the caller provides.
#pragma once

#include <Eigen/Core>

#include <string>  // std::to_string
#include <vector>  // std::vector

#include "../config.hpp"
#include "../detail/tensor_like.hpp"
#include "../error.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"
#include "detail/axis.hpp"
#include "detail/loops.hpp"

namespace headwise {

/// Sum along `axis` (negative counts from the back). The axis is removed from the shape, or kept
/// with extent 1 when `keepdim`: sum of [2, 3, 4] along 1 is [2, 4] ([2, 1, 4] with keepdim).
/// A sum over an empty axis is 0.
template <class X, detail::require_tensors<X> = 0>
Tensor<detail::scalar_t<X>> sum(const X& x, int axis, bool keepdim = false);

/// Mean along `axis`, shaped as for sum; the axis must not be empty.
template <class X, detail::require_tensors<X> = 0>
Tensor<detail::scalar_t<X>> mean(const X& x, int axis, bool keepdim = false);

/// Largest element along `axis`, shaped as for sum; the axis must not be empty.
template <class X, detail::require_tensors<X> = 0>
Tensor<detail::scalar_t<X>> max(const X& x, int axis, bool keepdim = false);

/// Sum of all elements (0 for an empty tensor).
template <class X, detail::require_tensors<X> = 0>
detail::scalar_t<X> sum(const X& x);

/// Mean of all elements; the tensor must not be empty.
template <class X, detail::require_tensors<X> = 0>
detail::scalar_t<X> mean(const X& x);

// ---- definitions ---------------------------------------------------------------------------

template <class X, detail::require_tensors<X>>
Tensor<detail::scalar_t<X>> sum(const X& x, int axis, bool keepdim) {
    return detail::reduce_axis("headwise::sum", detail::Reduction::sum, detail::const_view(x), axis,
                               keepdim);
}

template <class X, detail::require_tensors<X>>
Tensor<detail::scalar_t<X>> mean(const X& x, int axis, bool keepdim) {
    return detail::reduce_axis("headwise::mean", detail::Reduction::mean, detail::const_view(x),
                               axis, keepdim);
}

template <class X, detail::require_tensors<X>>
Tensor<detail::scalar_t<X>> max(const X& x, int axis, bool keepdim) {
    return detail::reduce_axis("headwise::max", detail::Reduction::max, detail::const_view(x), axis,
                               keepdim);
}

template <class X, detail::require_tensors<X>>
detail::scalar_t<X> sum(const X& x) {
    using T = detail::scalar_t<X>;
    HEADWISE_STATIC_ASSERT_REAL(T);
    const TensorView<const T> v = detail::const_view(x);
    if (v.numel() == 0) return T(0);
    return Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(v.data(), v.numel()).sum();
}

template <class X, detail::require_tensors<X>>
detail::scalar_t<X> mean(const X& x) {
    using T = detail::scalar_t<X>;
    HEADWISE_STATIC_ASSERT_REAL(T);
    const TensorView<const T> v = detail::const_view(x);
    if (v.numel() == 0)
        throw_invalid_argument("headwise::mean", "x", "must not be empty", v.shape().str());
    return Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(v.data(), v.numel()).mean();
}

}  // namespace headwise
