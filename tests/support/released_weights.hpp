// SPDX-License-Identifier: MIT
// Test helpers for modules whose float weights with_precision(bf16, FloatWeights::release) freed.
#pragma once

#include <cstring>    // std::memcmp
#include <stdexcept>  // std::invalid_argument, std::logic_error
#include <string>     // std::string

#include <headwise/tensor.hpp>

#include "catch.hpp"

namespace headwise::test {

/// The opening of every error of a call refused because the float weights are released.
inline std::string released_message(const std::string& function) {
    return function +
           ": the float weights were released by with_precision(Precision::bf16, "
           "FloatWeights::release); ";
}

/// Runs `call`, which must throw std::logic_error whose message starts with
/// released_message(function) (a std::logic_error itself, not a std::invalid_argument: the
/// arguments are fine, the module's state refuses the call).
template <class Call>
void check_refused(const std::string& function, Call&& call) {
    CAPTURE(function);
    try {
        call();
        FAIL("no exception");
    } catch (const std::invalid_argument& e) {
        FAIL(std::string("std::invalid_argument instead of std::logic_error: ") + e.what());
    } catch (const std::logic_error& e) {
        CHECK_THAT(std::string(e.what()), StartsWith(released_message(function)));
    }
}

/// Whether a and b have the same shape and the same bits.
template <class T>
bool same_bits(TensorView<const T> a, TensorView<const T> b) {
    return a.shape() == b.shape() &&
           std::memcmp(a.data(), b.data(), sizeof(T) * static_cast<std::size_t>(a.numel())) == 0;
}

/// The same of two tensors.
template <class T>
bool same_bits(const Tensor<T>& a, const Tensor<T>& b) {
    return same_bits<T>(a.view(), b.view());
}

}  // namespace headwise::test
