// SPDX-License-Identifier: MIT
// Reductions: sum, mean and max along one axis (keepdim or not), and sum and mean of everything.
// tensor_ops/: functions that allocate and return new tensors; ops/ holds the kernels that write
// into buffers the caller provides.
#pragma once

#include <Eigen/Core>

#include <string>  // std::to_string
#include <vector>  // std::vector

#include "../config.hpp"
#include "../detail/axis.hpp"
#include "../detail/tensor_like.hpp"
#include "../error.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"

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

namespace detail {

enum class Reduction { sum, mean, max };

template <class T>
Tensor<T> reduce_axis(const char* function, Reduction op, TensorView<const T> x, int axis,
                      bool keepdim) {
    HEADWISE_STATIC_ASSERT_REAL(T);
    const int ax = checked_axis(function, "axis", x.shape(), axis);
    const AxisSplit s = split_at(x.shape(), ax);  // x seen as [outer, extent, inner]
    if (op != Reduction::sum && s.extent == 0)
        throw_invalid_argument(function, "x",
                               "must have a non-zero extent along axis " + std::to_string(ax),
                               x.shape().str());

    std::vector<Index> dims;
    for (int a = 0; a < x.rank(); ++a)
        if (a != ax || keepdim) dims.push_back(a == ax ? 1 : x.shape()[a]);
    Tensor<T> out{Shape(dims)};  // [outer, inner] laid out as x.shape without (or with 1 at) axis
    if (out.numel() == 0) return out;
    if (s.extent == 0) return out;  // an empty sum: zeros

    MatrixMap<T> O(out.data(), s.outer, s.inner);  // [outer, inner]
    if (s.inner == 1) {
        // Reducing the last axis (or one followed by extent-1 axes): one row-wise reduction of
        // the [outer, extent] matrix.
        const MatrixMap<const T> M(x.data(), s.outer, s.extent);  // [outer, extent]
        switch (op) {
            case Reduction::sum:
                O.col(0) = M.rowwise().sum();
                break;
            case Reduction::mean:
                O.col(0) = M.rowwise().mean();
                break;
            case Reduction::max:
                O.col(0) = M.rowwise().maxCoeff();
                break;
        }
        return out;
    }
    for (Index o = 0; o < s.outer; ++o) {
        // Slab o is an [extent, inner] matrix; reduce its columns into row o of the output.
        const MatrixMap<const T> M(x.data() + o * s.extent * s.inner, s.extent, s.inner);
        switch (op) {
            case Reduction::sum:
                O.row(o) = M.colwise().sum();
                break;
            case Reduction::mean:
                O.row(o) = M.colwise().mean();
                break;
            case Reduction::max:
                O.row(o) = M.colwise().maxCoeff();
                break;
        }
    }
    return out;
}

}  // namespace detail

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
