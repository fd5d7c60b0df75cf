// SPDX-License-Identifier: MIT
// decode_by_token: a causal model's decode run one token at a time over a whole batch, the
// logits of every position gathered, for comparison with one forward (or another precision).
#pragma once

#include <headwise/tensor.hpp>

#include <cstdint>  // std::int64_t

namespace headwise::test {

/// Decodes ids [B, L] (padding [B, L], true where padded) one position at a time into `cache`:
/// the logits [B, L, V] of every step, in the model's scalar T.
template <class T, class Model, class Cache>
Tensor<T> decode_by_token(Model& model, const Tensor<std::int64_t>& ids,
                          const Tensor<bool>& padding, Cache& cache) {
    const Index B = ids.size(0), L = ids.size(1), V = model.config().vocab_size;
    Tensor<T> out(Shape{B, L, V});
    for (Index t = 0; t < L; ++t) {
        Tensor<std::int64_t> one(Shape{B, 1});
        Tensor<bool> pad(Shape{B, 1});
        for (Index b = 0; b < B; ++b) {
            one.data()[b] = ids.data()[b * L + t];
            pad.data()[b] = padding.data()[b * L + t];
        }
        const Tensor<T> step = model.decode(one, cache, pad);  // [B, 1, V]
        for (Index b = 0; b < B; ++b)
            for (Index v = 0; v < V; ++v) out.data()[(b * L + t) * V + v] = step.data()[b * V + v];
    }
    return out;
}

}  // namespace headwise::test
