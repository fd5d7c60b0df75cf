// SPDX-License-Identifier: MIT
// train_sort's model trained with an autograd::Tape: the forward only, no backward written, and
// the same loss curve as the hand-written backward of sort_model.hpp.
//
//   train_sort_tape             20 steps each way; exits 1 unless the losses agree to 1e-6
//   train_sort_tape --steps N   N steps
#include <headwise/autograd/functions.hpp>  // apply, reshape, cross_entropy
#include <headwise/autograd/tape.hpp>       // Tape, Var
#include <headwise/headwise.hpp>

#include "sort_model.hpp"  // SortModel, make_batch

#include <algorithm>  // std::max
#include <cmath>      // std::abs
#include <cstddef>    // std::size_t
#include <cstdint>    // std::int64_t
#include <cstdio>     // std::printf, std::fprintf
#include <cstdlib>    // std::atoi
#include <cstring>    // std::strcmp
#include <vector>     // std::vector

using headwise::Index;
using headwise::Shape;
using headwise::Tensor;
using headwise::autograd::Tape;
using headwise::autograd::Var;
using sort_model::kDigits;
using sort_model::kLength;
using sort_model::SortModel;
using T = float;

namespace {

/// SortModel's forward written on a tape: this is all the model code training needs.
Var<T> sort_loss(SortModel& m, Tape<T>& tape, const sort_model::Batch& batch) {
    namespace ag = headwise::autograd;
    const Index B = batch.seq.shape()[0];
    Tensor<std::int64_t> pos(Shape{B, kLength});  // [B, L]: 0, 1, ..., L - 1 per row
    for (Index b = 0; b < B; ++b)
        for (Index l = 0; l < kLength; ++l) pos(b, l) = l;
    Var<T> x = ag::apply(m.tokens, tape, batch.seq) + ag::apply(m.positions, tape, pos);
    for (auto& layer : m.layers) x = ag::apply(layer, x);  // [B, L, E]
    const Var<T> logits = ag::reshape(ag::apply(m.head, x), Shape{B * kLength, kDigits});
    return ag::cross_entropy(logits, batch.target);
}

/// `steps` AdamW steps from the same seeds; `tape` picks how the gradients are computed.
std::vector<double> train(int steps, bool tape) {
    headwise::TransformerEncoderLayerOptions o;
    o.d_model = 32;
    o.nhead = 4;
    o.dim_feedforward = 64;
    o.dropout = 0.1;  // the masks are drawn in the same order either way
    headwise::Generator init_rng(1), data_rng(2);
    SortModel model(o, /*num_layers=*/2, init_rng);
    headwise::AdamOptions ao;
    ao.lr = 2e-3;
    ao.weight_decay = 0.01;
    headwise::AdamW<T> opt(model.parameters(), ao);
    std::vector<double> losses;
    for (int step = 1; step <= steps; ++step) {
        const sort_model::Batch batch = sort_model::make_batch(32, data_rng, nullptr);
        opt.zero_grad();
        if (tape) {
            Tape<T> t;  // one recording per step; its saved activations go with it
            const Var<T> loss = sort_loss(model, t, batch);
            t.backward(loss);
            losses.push_back(loss.item());
        } else {
            const SortModel::Forward f = model.forward(batch.seq);
            const headwise::LossResult<T> loss = headwise::cross_entropy<T>(f.logits, batch.target);
            model.backward(batch.seq, f, loss.grad);
            losses.push_back(static_cast<double>(static_cast<T>(loss.value)));
        }
        headwise::clip_grad_norm(opt.parameters(), 1.0);
        opt.step();
    }
    return losses;
}

}  // namespace

int main(int argc, char** argv) {
    int steps = 20;
    if (argc == 3 && std::strcmp(argv[1], "--steps") == 0) steps = std::atoi(argv[2]);
    if (steps < 1 || (argc != 1 && argc != 3)) {
        std::fprintf(stderr, "usage: train_sort_tape [--steps N]\n");
        return 2;
    }
    const std::vector<double> by_tape = train(steps, true);
    const std::vector<double> by_hand = train(steps, false);
    double worst = 0.0;
    for (std::size_t i = 0; i < by_hand.size(); ++i) {
        const double rel =
            std::abs(by_tape[i] - by_hand[i]) / std::max(std::abs(by_hand[i]), 1e-30);
        worst = std::max(worst, rel);
        std::printf("step %3zu  loss (tape) %.7f  loss (hand-written backward) %.7f\n", i + 1,
                    by_tape[i], by_hand[i]);
    }
    std::printf("largest relative difference %.3g over %d steps\n", worst, steps);
    return worst <= 1e-6 ? 0 : 1;
}
