// SPDX-License-Identifier: MIT
// Reordering the axes of a tensor into a new contiguous tensor: permute and transpose.
// tensor_ops/: functions that allocate and return new tensors; ops/ holds the kernels that write
// into buffers the caller provides.
#pragma once

#include <algorithm>  // std::copy_n
#include <string>     // std::string, std::to_string
#include <vector>     // std::vector

#include "../config.hpp"
#include "../detail/tensor_like.hpp"
#include "../error.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"
#include "detail/axis.hpp"
#include "detail/loops.hpp"

namespace headwise {

/// A contiguous copy of `x` whose axis i is axis `axes[i]` of x: out.shape()[i] ==
/// x.shape()[axes[i]]. `axes` lists every axis of x once; negative axes count from the back.
/// E.g. permute(x, {0, 2, 1, 3}) turns [B, L, H, D] into [B, H, L, D] (and back).
/// Works for any element type, bool masks included.
template <class X, detail::require_tensors<X> = 0>
Tensor<detail::scalar_t<X>> permute(const X& x, const std::vector<int>& axes);

/// A contiguous copy of `x` with axes `axis0` and `axis1` swapped; by default the last two, so
/// transpose(m) of an [r, c] matrix is its [c, r] transpose.
template <class X, detail::require_tensors<X> = 0>
Tensor<detail::scalar_t<X>> transpose(const X& x, int axis0 = -2, int axis1 = -1);

// ---- definitions ---------------------------------------------------------------------------

template <class X, detail::require_tensors<X>>
Tensor<detail::scalar_t<X>> permute(const X& x, const std::vector<int>& axes) {
    using T = detail::scalar_t<X>;
    const TensorView<const T> in = detail::const_view(x);
    const int rank = in.rank();
    // Validate before allocating: every axis in range and listed exactly once.
    int normalized[Shape::kMaxRank] = {};
    bool seen[Shape::kMaxRank] = {};
    bool ok = static_cast<int>(axes.size()) == rank;
    for (int i = 0; ok && i < rank; ++i) {
        const int a = axes[static_cast<std::size_t>(i)];
        const int n = a < 0 ? a + rank : a;
        ok = n >= 0 && n < rank && !seen[n];
        if (ok) {
            seen[n] = true;
            normalized[i] = n;
        }
    }
    if (!ok)
        throw_invalid_argument("headwise::permute", "axes",
                               "must list each of the " + std::to_string(rank) +
                                   " axes of x (shape " + in.shape().str() + ") once",
                               detail::axes_string(axes));
    std::vector<Index> dims(static_cast<std::size_t>(rank));
    for (int i = 0; i < rank; ++i) dims[static_cast<std::size_t>(i)] = in.shape()[normalized[i]];
    Tensor<T> out{Shape(dims)};  // [x.shape permuted]
    detail::permute_into(in.data(), in.shape(), normalized, out.data());
    return out;
}

template <class X, detail::require_tensors<X>>
Tensor<detail::scalar_t<X>> transpose(const X& x, int axis0, int axis1) {
    const Shape shape = detail::const_view(x).shape();
    const int a0 = detail::checked_axis("headwise::transpose", "axis0", shape, axis0);
    const int a1 = detail::checked_axis("headwise::transpose", "axis1", shape, axis1);
    std::vector<int> axes(static_cast<std::size_t>(shape.rank()));
    for (int i = 0; i < shape.rank(); ++i) axes[static_cast<std::size_t>(i)] = i;
    axes[static_cast<std::size_t>(a0)] = a1;
    axes[static_cast<std::size_t>(a1)] = a0;
    return permute(x, axes);
}

}  // namespace headwise
