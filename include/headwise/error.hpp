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
}  // namespace headwise

// The shape checks built on shape_error (detail::check_shape, check_matrix, check_last_dim), which
// every kernel and layer that includes this header calls.
#include "detail/shape_checks.hpp"  // IWYU pragma: export
