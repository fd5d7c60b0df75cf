// SPDX-License-Identifier: MIT
// The shape checks every kernel and layer runs on its arguments before writing anything.
#pragma once

#include <string>  // std::to_string

#include "../config.hpp"
#include "../error.hpp"
#include "../shape.hpp"

namespace headwise::detail {

/// The one shape check: throws shape_error unless `actual == expected`.
inline void check_shape(const char* function, const char* argument, const Shape& actual,
                        const Shape& expected) {
    if (actual != expected) throw shape_error(function, argument, expected.str(), actual);
}

/// Throws shape_error unless the matrix `M` (anything with rows() and cols(), e.g. an Eigen
/// block) is [rows, cols]. Kernels call it on every argument before writing anything.
template <class Matrix>
void check_matrix(const char* function, const char* argument, const Matrix& M, Index rows,
                  Index cols) {
    check_shape(function, argument, Shape{M.rows(), M.cols()}, Shape{rows, cols});
}

/// Throws shape_error unless `actual` has the given rank and last extent, describing the
/// expectation as "[..., last]" (rank >= 1, any leading extents) or "[rows, last]".
inline void check_last_dim(const char* function, const char* argument, const Shape& actual,
                           Index last) {
    if (actual.rank() < 1 || actual.back() != last)
        throw shape_error(function, argument, "[..., " + std::to_string(last) + "]", actual);
}

}  // namespace headwise::detail
