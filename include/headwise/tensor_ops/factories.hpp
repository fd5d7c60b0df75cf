// SPDX-License-Identifier: MIT
// Free-function spellings of the Tensor factories: headwise::zeros<float>({2, 3}) and friends.
// tensor_ops/: functions that allocate and return new tensors; ops/ holds the kernels that write
// into buffers the caller provides.
#pragma once

#include "../config.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"

namespace headwise {

/// Tensor<T>::zeros(shape).
template <class T>
Tensor<T> zeros(const Shape& shape) {
    return Tensor<T>::zeros(shape);
}

/// Tensor<T>::ones(shape).
template <class T>
Tensor<T> ones(const Shape& shape) {
    return Tensor<T>::ones(shape);
}

/// Tensor<T>::full(shape, value).
template <class T>
Tensor<T> full(const Shape& shape, T value) {
    return Tensor<T>::full(shape, value);
}

/// Tensor<T>::arange(n): [0, 1, ..., n-1].
template <class T>
Tensor<T> arange(Index n) {
    return Tensor<T>::arange(n);
}

/// Tensor<T>::randn(shape, rng): standard normal entries from an explicit generator.
template <class T, class Rng>
Tensor<T> randn(const Shape& shape, Rng& rng) {
    return Tensor<T>::template randn<Rng>(shape, rng);
}

/// Tensor<T>::uniform(shape, lo, hi, rng): entries uniform in [lo, hi) from an explicit generator.
template <class T, class Rng>
Tensor<T> uniform(const Shape& shape, double lo, double hi, Rng& rng) {
    return Tensor<T>::template uniform<Rng>(shape, lo, hi, rng);
}

}  // namespace headwise
