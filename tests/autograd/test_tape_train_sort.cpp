// SPDX-License-Identifier: MIT
// examples/train_sort's model trained by its tape and by a hand-written backward: one loss curve.
#include <algorithm>  // std::min
#include <cmath>      // std::cos
#include <cstddef>    // std::size_t
#include <cstdint>    // std::int64_t
#include <cstring>    // std::memcmp
#include <vector>     // std::vector

#include "../../examples/sort_model.hpp"  // SortModel, sort_loss, make_batch
#include "support/catch.hpp"
#include "support/instantiations.hpp"
#include "support/sort_model_by_hand.hpp"  // the hand-written backward

namespace test_tape_train_sort {

using headwise::Index;
using headwise::Tensor;
using sort_model::SortModel;
using T = sort_model::T;

namespace {

struct Curve {
    std::vector<T> losses;
    headwise::StateDict<T> parameters;  // after the last step
};

/// train_sort's run: its model, seeds, AdamW, warm-up and cosine schedule and clipping, for
/// `steps` steps of `batch` sequences (train_sort's 64 make a Debug build slow), the gradients
/// from the tape or from the hand-written backward.
Curve train(int steps, Index batch_size, bool by_tape, double dropout) {
    headwise::TransformerEncoderLayerOptions o;
    o.d_model = 64;
    o.nhead = 4;
    o.dim_feedforward = 128;
    o.dropout = dropout;
    headwise::Generator init_rng(1), data_rng(2);
    SortModel model(o, /*num_layers=*/2, init_rng);
    headwise::AdamOptions ao;
    ao.lr = 2e-3;
    ao.weight_decay = 0.01;
    headwise::AdamW<T> opt(model.parameters(), ao);
    const int warmup = 10;
    Curve c;
    for (int step = 1; step <= steps; ++step) {
        opt.set_lr(ao.lr * std::min(1.0, static_cast<double>(step) / warmup) *
                   (0.55 + 0.45 * std::cos(3.141592653589793 * step / steps)));
        const sort_model::Batch batch = sort_model::make_batch(batch_size, data_rng, nullptr);
        opt.zero_grad();
        if (by_tape) {
            headwise::autograd::Tape<T> tape;
            const headwise::autograd::Var<T> loss = sort_model::sort_loss(model, tape, batch);
            tape.backward(loss);
            c.losses.push_back(loss.value().data()[0]);
        } else {
            const headwise::test::SortByHand f =
                headwise::test::sort_forward_by_hand(model, batch.seq);
            const headwise::LossResult<T> loss = headwise::cross_entropy<T>(f.logits, batch.target);
            headwise::test::sort_backward_by_hand(model, batch.seq, f, loss.grad);
            c.losses.push_back(static_cast<T>(loss.value));
        }
        headwise::clip_grad_norm(opt.parameters(), 1.0);
        opt.step();
    }
    c.parameters = model.state_dict();
    return c;
}

}  // namespace

// Bit for bit, not to a tolerance: the tape calls the same forwards and backwards on the same
// inputs in the same order, and sums no gradient itself here (every recorded value is used
// once; the residual sums happen inside the encoder layers' own backward), so no float
// operation differs. Dropout on: its masks are drawn in the same order either way.
TEST_CASE("tape: train_sort's 100 steps give the hand-written backward's loss curve bit for bit") {
    // Dropout 0 (train_sort's default) on a full batch for a few steps, dropout 0.1 for 100.
    const auto [dropout, steps, batch_size] =
        GENERATE(table<double, int, Index>({{0.0, 10, 64}, {0.1, 100, 16}}));
    CAPTURE(dropout, steps, batch_size);
    const Curve by_tape = train(steps, batch_size, true, dropout);
    const Curve by_hand = train(steps, batch_size, false, dropout);
    REQUIRE(by_tape.losses.size() == by_hand.losses.size());
    int first_difference = 0;  // 1-based step, 0 for none
    for (std::size_t i = 0; i < by_hand.losses.size() && first_difference == 0; ++i)
        if (std::memcmp(&by_tape.losses[i], &by_hand.losses[i], sizeof(T)) != 0)
            first_difference = static_cast<int>(i) + 1;
    CAPTURE(first_difference);
    CHECK(first_difference == 0);
    CHECK(by_tape.losses.back() < by_tape.losses.front());  // it learns
    for (const auto& [name, expected] : by_hand.parameters) {
        CAPTURE(name);
        const Tensor<T>& actual = by_tape.parameters.at(name);
        CHECK(std::memcmp(actual.data(), expected.data(),
                          static_cast<std::size_t>(expected.numel()) * sizeof(T)) == 0);
    }
}

}  // namespace test_tape_train_sort
