// SPDX-License-Identifier: MIT
// Prints a tensor's elements as nested brackets (operator<< of Tensor and TensorView).
#pragma once

#include <ostream>  // std::ostream

#include "../config.hpp"
#include "../shape.hpp"

namespace headwise::detail {

template <class T>
void print_tensor(std::ostream& os, const T* data, const Shape& shape) {
    os << "tensor" << shape.str() << " ";
    if (shape.rank() == 0) {
        os << +data[0];
        return;
    }
    // Recursive nested brackets, outermost axis first.
    struct Printer {
        std::ostream& os;
        const Shape& shape;
        const T* data;
        Index print(int axis, Index offset) const {
            os << '[';
            const Index n = shape[axis];
            Index inner = 1;
            for (int a = axis + 1; a < shape.rank(); ++a) inner *= shape[a];
            for (Index i = 0; i < n; ++i) {
                if (i) os << (axis + 1 == shape.rank() ? ", " : ",\n");
                if (axis + 1 == shape.rank())
                    os << +data[offset + i];
                else
                    print(axis + 1, offset + i * inner);
            }
            os << ']';
            return 0;
        }
    };
    Printer{os, shape, data}.print(0, 0);
}

}  // namespace headwise::detail
