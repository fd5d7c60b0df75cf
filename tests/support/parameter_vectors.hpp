// SPDX-License-Identifier: MIT
// A module's parameters as the list of tensors gradcheck varies: copied out, written back, and
// their gradients copied out.
#pragma once

#include <algorithm>  // std::copy_n
#include <cstddef>    // std::size_t
#include <vector>     // std::vector

#include <headwise/layers/module.hpp>
#include <headwise/tensor.hpp>

namespace headwise::test {

/// Appends a copy of each parameter's value to `out`, in the order of `params`.
template <class T>
void append_values(const std::vector<Parameter<T>>& params, std::vector<Tensor<T>>& out) {
    for (const Parameter<T>& p : params) out.emplace_back(TensorView<const T>(p.value));
}

/// Appends a copy of each parameter's gradient to `out`, in the order of `params`.
template <class T>
void append_grads(const std::vector<Parameter<T>>& params, std::vector<Tensor<T>>& out) {
    for (const Parameter<T>& p : params) out.emplace_back(TensorView<const T>(p.grad));
}

/// Writes in[first], in[first + 1], ... into the values of `params` (shapes as append_values
/// gave them).
template <class T>
void load_values(const std::vector<Parameter<T>>& params, const std::vector<Tensor<T>>& in,
                 std::size_t first) {
    for (std::size_t i = 0; i < params.size(); ++i)
        std::copy_n(in[first + i].data(), params[i].value.numel(), params[i].value.data());
}

}  // namespace headwise::test
