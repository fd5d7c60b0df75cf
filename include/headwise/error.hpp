// SPDX-License-Identifier: MIT
// shape_error and the checks every public function runs on its arguments before computing.
#pragma once

#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string

#include "shape.hpp"

namespace headwise {

/// Thrown when an argument has the wrong shape. `what()` names the function, the argument, the
/// expected shape and the shape received, e.g.
/// "headwise::Linear::forward: input: expected shape [..., 512], got [4, 256]".
class shape_error : public std::invalid_argument {
public:
    shape_error(const std::string& function, const std::string& argument,
                const std::string& expected, const Shape& actual)
        : std::invalid_argument(function + ": " + argument + ": expected shape " + expected +
                                ", got " + actual.str()),
          function_(function),
          argument_(argument) {}

    const std::string& function() const noexcept { return function_; }
    const std::string& argument() const noexcept { return argument_; }

private:
    std::string function_;
    std::string argument_;
};

/// Thrown for an invalid option or argument value that is not a shape:
/// "headwise::MultiheadAttention: num_heads: must divide embed_dim = 512, got 3".
[[noreturn]] inline void throw_invalid_argument(const std::string& function,
                                                const std::string& argument,
                                                const std::string& requirement,
                                                const std::string& actual) {
    throw std::invalid_argument(function + ": " + argument + ": " + requirement + ", got " +
                                actual);
}

namespace detail {

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

}  // namespace detail
}  // namespace headwise
