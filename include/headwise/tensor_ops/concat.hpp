// SPDX-License-Identifier: MIT
// Joining tensors along an axis (concat) and cutting one into consecutive pieces (split).
// tensor_ops/: functions that allocate and return new tensors; ops/ holds the kernels that write
// into buffers the caller provides.
#pragma once

#include <algorithm>    // std::copy_n
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::remove_const_t
#include <vector>       // std::vector

#include "../config.hpp"
#include "../detail/tensor_like.hpp"
#include "../error.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"
#include "detail/axis.hpp"
#include "detail/loops.hpp"

namespace headwise {

/// The parts joined along `axis` (negative counts from the back): every part has the rank and
/// extents of parts[0] except along `axis`, where the extents add up. Any element type (bool
/// masks too). With tensors, name the scalar type: `concat<float>({a, b}, -1)`.
template <class T>
Tensor<T> concat(const std::vector<TensorView<const T>>& parts, int axis = 0);

/// Consecutive pieces of `x` along `axis` with extents `sizes`, which must be non-negative and
/// add up to that axis's extent; the inverse of concat. Each piece is a contiguous copy.
template <class X, detail::require_tensors<X> = 0>
std::vector<Tensor<detail::scalar_t<X>>> split(const X& x, const std::vector<Index>& sizes,
                                               int axis = 0);

// ---- definitions ---------------------------------------------------------------------------

template <class T>
Tensor<T> concat(const std::vector<TensorView<const T>>& parts, int axis) {
    constexpr const char* fn = "headwise::concat";
    if (parts.empty()) throw_invalid_argument(fn, "parts", "must hold at least one tensor", "0");
    const Shape& first = parts[0].shape();
    const int ax = detail::checked_axis(fn, "axis", first, axis);
    Index extent = 0;
    for (std::size_t i = 0; i < parts.size(); ++i) {
        const Shape& s = parts[i].shape();
        bool ok = s.rank() == first.rank();
        for (int a = 0; ok && a < s.rank(); ++a) ok = a == ax || s[a] == first[a];
        if (!ok)
            throw shape_error(fn, "parts[" + std::to_string(i) + "]",
                              detail::shape_with_free_axis(first, ax), s);
        extent += s[ax];
    }
    Shape out_shape = first;
    out_shape[ax] = extent;
    Tensor<T> out(out_shape);  // [..., sum of extents, ...]

    // As [outer, extent, inner]: for each outer index, part p contributes one contiguous run of
    // extent_p * inner elements, placed after the runs of the parts before it.
    const detail::AxisSplit s = detail::split_at(out_shape, ax);
    T* dst = out.data();
    for (Index o = 0; o < s.outer; ++o)
        for (const TensorView<const T>& p : parts) {
            const Index run = p.shape()[ax] * s.inner;
            std::copy_n(p.data() + o * run, run, dst);
            dst += run;
        }
    return out;
}

template <class X, detail::require_tensors<X>>
std::vector<Tensor<detail::scalar_t<X>>> split(const X& x, const std::vector<Index>& sizes,
                                               int axis) {
    using T = detail::scalar_t<X>;
    constexpr const char* fn = "headwise::split";
    const TensorView<const T> in = detail::const_view(x);
    const int ax = detail::checked_axis(fn, "axis", in.shape(), axis);
    const detail::AxisSplit s = detail::split_at(in.shape(), ax);
    Index total = 0;
    bool ok = true;
    std::string listed = "[";
    for (std::size_t i = 0; i < sizes.size(); ++i) {
        ok = ok && sizes[i] >= 0;
        total += sizes[i];
        listed += (i ? ", " : "") + std::to_string(sizes[i]);
    }
    listed += "]";
    if (!ok || total != s.extent)
        throw_invalid_argument(fn, "sizes",
                               "must be non-negative and add up to " + std::to_string(s.extent) +
                                   ", the extent of axis " + std::to_string(ax) + " of x (shape " +
                                   in.shape().str() + ")",
                               listed);

    std::vector<Tensor<T>> pieces;
    pieces.reserve(sizes.size());
    for (const Index size : sizes) {
        Shape piece_shape = in.shape();
        piece_shape[ax] = size;
        pieces.emplace_back(piece_shape);  // [..., size, ...]
    }
    // The inverse walk of concat: for each outer index, piece p takes the next run of
    // size_p * inner contiguous elements.
    const T* src = in.data();
    for (Index o = 0; o < s.outer; ++o)
        for (Tensor<T>& p : pieces) {
            const Index run = p.shape()[ax] * s.inner;
            std::copy_n(src, run, p.data() + o * run);
            src += run;
        }
    return pieces;
}

}  // namespace headwise
