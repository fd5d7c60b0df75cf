// SPDX-License-Identifier: MIT
// Fan-in and fan-out of a weight tensor, for the initialisers (init.hpp).
#pragma once

#include <utility>  // std::pair

#include "../config.hpp"
#include "../error.hpp"
#include "../shape.hpp"

namespace headwise::detail {

/// {fan_in, fan_out} of a weight of shape [out, in, k...], as
/// torch.nn.init._calculate_fan_in_and_fan_out: in * prod(k) and out * prod(k). Throws
/// shape_error naming `function` for rank < 2.
inline std::pair<Index, Index> weight_fans(const char* function, const Shape& shape) {
    if (shape.rank() < 2)
        throw shape_error(function, "tensor", "[out, in, ...] (rank >= 2)", shape);
    Index receptive_field = 1;  // product of the kernel extents of a convolution weight
    for (int axis = 2; axis < shape.rank(); ++axis) receptive_field *= shape[axis];
    return {shape[1] * receptive_field, shape[0] * receptive_field};
}

}  // namespace headwise::detail
