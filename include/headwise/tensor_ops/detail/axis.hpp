// SPDX-License-Identifier: MIT
// Checked axis arguments (negative axes count from the back) and the row-major split around one.
#pragma once

#include <string>  // std::string, std::to_string

#include "../../config.hpp"
#include "../../error.hpp"
#include "../../shape.hpp"

namespace headwise::detail {

/// `axis` in [0, rank) after counting a negative axis from the back (-1 is the last axis);
/// throws std::invalid_argument naming `function` and `argument` when it is out of range.
inline int checked_axis(const char* function, const char* argument, const Shape& shape, int axis) {
    const int rank = shape.rank();
    if (axis < -rank || axis >= rank)
        throw_invalid_argument(function, argument,
                               "must lie in [" + std::to_string(-rank) + ", " +
                                   std::to_string(rank) + ") for a tensor of shape " + shape.str(),
                               std::to_string(axis));
    return axis < 0 ? axis + rank : axis;
}

/// A row-major tensor seen as [outer, extent, inner] around `axis`: `outer` is the product of
/// the extents before it, `inner` of those after it.
struct AxisSplit {
    Index outer = 1;
    Index extent = 1;
    Index inner = 1;
};

inline AxisSplit split_at(const Shape& shape, int axis) {
    AxisSplit s;
    for (int a = 0; a < axis; ++a) s.outer *= shape[a];
    s.extent = shape[axis];
    for (int a = axis + 1; a < shape.rank(); ++a) s.inner *= shape[a];
    return s;
}

}  // namespace headwise::detail
