// SPDX-License-Identifier: MIT
// The model and data of train_sort and train_sort_ddp: a small transformer that sorts digits.
#pragma once

#include <headwise/autograd/functions.hpp>  // apply, reshape, cross_entropy
#include <headwise/autograd/tape.hpp>       // Tape, Var
#include <headwise/headwise.hpp>

#include <algorithm>  // std::sort, std::max_element, std::copy
#include <cstdint>    // std::int64_t
#include <optional>   // std::nullopt
#include <set>        // std::set
#include <string>     // std::to_string
#include <vector>     // std::vector

namespace sort_model {

using headwise::Index;
using headwise::Shape;
using headwise::Tensor;
using T = float;

constexpr Index kDigits = 10;  // vocabulary: the digits 0..9
constexpr Index kLength = 8;   // L, tokens per sequence

/// The model, itself a module: its parameters are its children's under their prefixes, so that
/// parameters(), zero_grad(), state_dict() and train()/eval() cover the whole model. Only its
/// forward is written: training records it on an autograd::Tape, whose backward() runs every
/// layer's own backward.
struct SortModel : headwise::Module<SortModel, T> {
    static constexpr const char* kName = "SortModel";

    headwise::Embedding<T> tokens, positions;
    std::vector<headwise::TransformerEncoderLayer<T>> layers;
    headwise::Linear<T> head;

    SortModel(const headwise::TransformerEncoderLayerOptions& o, int num_layers,
              headwise::Generator& rng)
        : tokens(kDigits, o.d_model, std::nullopt, rng),
          positions(kLength, o.d_model, std::nullopt, rng),
          head(o.d_model, kDigits, true, rng) {
        for (int i = 0; i < num_layers; ++i) layers.emplace_back(o, /*seed=*/100 + i);
    }

    template <class Self, class Visit>
    static void visit_parameters(Self& self, Visit&& visit) {
        visit_child(self.tokens, "tokens.", visit);
        visit_child(self.positions, "positions.", visit);
        for (std::size_t i = 0; i < self.layers.size(); ++i)
            visit_child(self.layers[i], "layers." + std::to_string(i) + ".", visit);
        visit_child(self.head, "head.", visit);
    }
    template <class Self, class Visit>
    static void visit_children(Self& self, Visit&& visit) {
        for (auto& layer : self.layers) visit(layer);
    }

    void set_projection(headwise::Projection p) {
        for (auto& layer : layers) layer.with_projection(p);
    }

    /// Precision::bf16: mixed-precision training (and inference) of every product with weights,
    /// the attention's projections, the feed-forward and the head, in bf16 with float master
    /// weights, gradients and optimiser state; embeddings, normalisation, softmax, attention
    /// products and the loss stay float.
    void set_precision(headwise::Precision p) {
        for (auto& layer : layers) layer.with_precision(p);
        head.with_precision(p);
    }

    /// Logits [B L, digits] for tokens [B, L], recorded on `tape`: the whole model code
    /// training needs, since tape.backward() runs each layer's own backward in reverse.
    headwise::autograd::Var<T> forward(headwise::autograd::Tape<T>& tape,
                                       headwise::TensorView<const std::int64_t> seq) {
        namespace ag = headwise::autograd;
        const Index B = seq.shape()[0];
        Tensor<std::int64_t> pos(Shape{B, kLength});  // [B, L]: 0, 1, ..., L - 1 per row
        for (Index b = 0; b < B; ++b)
            for (Index l = 0; l < kLength; ++l) pos(b, l) = l;
        ag::Var<T> x = ag::apply(tokens, tape, seq) + ag::apply(positions, tape, pos);  // [B, L, E]
        for (auto& layer : layers) x = ag::apply(layer, x);                             // [B, L, E]
        return ag::reshape(ag::apply(head, x), Shape{B * kLength, kDigits});  // [B L, digits]
    }
};

/// A batch of random digit sequences [B, L] and their sorted versions [B L] (the targets),
/// never one of the held-out sequences.
struct Batch {
    Tensor<std::int64_t> seq, target;
};
inline std::int64_t code(const std::int64_t* s) {
    std::int64_t c = 0;
    for (Index l = 0; l < kLength; ++l) c = c * kDigits + s[l];
    return c;
}
inline Batch make_batch(Index B, headwise::Generator& rng, const std::set<std::int64_t>* exclude) {
    Batch batch{Tensor<std::int64_t>(Shape{B, kLength}), Tensor<std::int64_t>(Shape{B * kLength})};
    for (Index b = 0; b < B; ++b) {
        std::int64_t* s = batch.seq.data() + b * kLength;
        do {
            for (Index l = 0; l < kLength; ++l) s[l] = static_cast<std::int64_t>(rng() % kDigits);
        } while (exclude && exclude->count(code(s)));
        std::int64_t* t = batch.target.data() + b * kLength;
        std::copy(s, s + kLength, t);
        std::sort(t, t + kLength);
    }
    return batch;
}

/// The mean cross-entropy of the model's predictions for `batch`, recorded on `tape`, ready for
/// tape.backward().
inline headwise::autograd::Var<T> sort_loss(SortModel& model, headwise::autograd::Tape<T>& tape,
                                            const Batch& batch) {
    return headwise::autograd::cross_entropy(model.forward(tape, batch.seq), batch.target);
}

/// Fraction of sequences whose every position is predicted right (eval mode, no dropout, on a
/// tape that records nothing).
inline double sequence_accuracy(SortModel& model, const Batch& held_out) {
    model.eval();
    headwise::autograd::Tape<T> tape(headwise::autograd::Tape<T>::no_grad);
    const headwise::autograd::Var<T> logits = model.forward(tape, held_out.seq);  // [N L, digits]
    model.train();
    const Index N = held_out.seq.shape()[0];
    Index right = 0;
    for (Index n = 0; n < N; ++n) {
        bool all = true;
        for (Index l = 0; l < kLength; ++l) {
            const T* row = logits.value().data() + (n * kLength + l) * kDigits;
            const Index arg = std::max_element(row, row + kDigits) - row;
            all = all && arg == held_out.target.data()[n * kLength + l];
        }
        right += all;
    }
    return static_cast<double>(right) / static_cast<double>(N);
}

}  // namespace sort_model
