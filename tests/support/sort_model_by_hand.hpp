// SPDX-License-Identifier: MIT
// examples/train_sort's model with a hand-written backward: the reference its tape is held to.
#pragma once

#include <cstddef>  // std::size_t
#include <cstdint>  // std::int64_t
#include <utility>  // std::move
#include <vector>   // std::vector

#include "../../examples/sort_model.hpp"  // SortModel, kLength, kDigits

namespace headwise::test {

/// What the hand-written forward keeps for backward: each layer's Forward record and the head's
/// input, as a user wrote it before the tape.
struct SortByHand {
    using T = sort_model::T;
    Tensor<T> logits;                                       // [B L, digits]
    std::vector<TransformerEncoderLayerForward<T>> layers;  // one record per layer
    Tensor<T> last;                                         // [B, L, E], the head's input
};

/// Positions 0, 1, ..., L - 1 per row: [B, L].
inline Tensor<std::int64_t> sort_positions(Index B) {
    Tensor<std::int64_t> pos(Shape{B, sort_model::kLength});  // [B, L]
    for (Index b = 0; b < B; ++b)
        for (Index l = 0; l < sort_model::kLength; ++l) pos(b, l) = l;
    return pos;
}

/// SortModel::forward without a tape: embeddings, the layers, the head.
inline SortByHand sort_forward_by_hand(sort_model::SortModel& m, const Tensor<std::int64_t>& seq) {
    const Index B = seq.shape()[0];
    Tensor<sort_model::T> x = m.tokens.forward(seq);  // [B, L, E]
    x.matrix() += m.positions.forward(sort_positions(B)).matrix();
    SortByHand f;
    for (auto& layer : m.layers) {
        f.layers.push_back(layer.forward(x));
        x = f.layers.back().output;  // [B, L, E]
    }
    f.last = std::move(x);
    f.logits = m.head.forward(f.last).reshape(Shape{B * sort_model::kLength, sort_model::kDigits});
    return f;
}

/// Its backward, written out: the head, the layers in reverse, and the embeddings' common
/// gradient handed to both tables. Adds into the model's parameter gradients.
inline void sort_backward_by_hand(sort_model::SortModel& m, const Tensor<std::int64_t>& seq,
                                  const SortByHand& f, const Tensor<sort_model::T>& dlogits) {
    const Index B = seq.shape()[0];
    Tensor<sort_model::T> dx =  // [B, L, E]
        m.head.backward(f.last,
                        dlogits.reshape(Shape{B, sort_model::kLength, sort_model::kDigits}));
    for (std::size_t i = m.layers.size(); i-- > 0;) dx = m.layers[i].backward(f.layers[i], dx);
    m.tokens.backward(seq, dx);
    m.positions.backward(sort_positions(B), dx);
}

}  // namespace headwise::test
