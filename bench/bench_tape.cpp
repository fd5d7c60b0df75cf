// SPDX-License-Identifier: MIT
// What an autograd::Tape costs: one training step with the tape against the same step with a
// hand-written backward.
//
//   tape_step/<model>/<how>   one whole training step: zero_grad, forward, loss, backward,
//                             clip_grad_norm, AdamW step; <how> = tape (the forward recorded,
//                             tape.backward) or by_hand (Forward records kept and the backwards
//                             called by the user's code)
//   tape_step_paired/<model>  both, alternately, each pair timed by this thread's CPU time: the
//                             counter tape/by_hand is the median ratio of the pairs, what a
//                             loaded machine still measures well
// Models:
//   train_sort         examples/train_sort's model: token and position embeddings, 2 encoder
//                      layers (d_model 64, 4 heads, feed-forward 128), a linear head, batch 64 of
//                      8 tokens, cross-entropy
//   mha/B:8/L:128/E:512/H:8   self-attention MultiheadAttention (fused projection) on a
//                      [8, 128, 512] batch, MSE against a fixed target
// Both sides compute the same floats (test_tape_train_sort checks it bit for bit); the difference
// is the tape's bookkeeping: a node and a std::function per call, the shared holders of the
// saved records, the copies of d loss that add and reshape hand back. Compare medians of
// interleaved repetitions, one thread:
//   OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 bench_tape --benchmark_repetitions=15
//       --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true

// GCC 12's own AVX-512 intrinsic headers trip -Wmaybe-uninitialized when Eigen's vectorised code
// is inlined here (a false positive, GCC bug 105593). Silenced for this file and GCC 12 only.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <benchmark/benchmark.h>

#include <time.h>  // clock_gettime, CLOCK_THREAD_CPUTIME_ID (POSIX)

#include <algorithm>  // std::sort
#include <vector>     // std::vector

#include <headwise/autograd/functions.hpp>
#include <headwise/autograd/tape.hpp>
#include <headwise/headwise.hpp>

#include "../examples/sort_model.hpp"               // SortModel, sort_loss, make_batch
#include "../tests/support/sort_model_by_hand.hpp"  // the hand-written backward

namespace {

using headwise::Index;
using headwise::Shape;
using headwise::Tensor;
using T = float;

/// This thread's CPU time in seconds: what a step costs, whatever else the machine runs.
double thread_seconds() {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

/// Times steps in pairs, by hand and by tape back to back (in turn first) so that both see the
/// same load, and reports the median of the pairs' ratios as the counter `tape/by_hand`.
template <class Step>
void paired(benchmark::State& state, Step&& step) {
    std::vector<double> ratios;
    bool tape_first = false;  // alternates, so that neither always runs second
    for (auto _ : state) {
        const double t0 = thread_seconds();
        step(tape_first);
        const double t1 = thread_seconds();
        step(!tape_first);
        const double t2 = thread_seconds();
        const double first = t1 - t0, second = t2 - t1;
        ratios.push_back(tape_first ? first / second : second / first);
        tape_first = !tape_first;
    }
    std::sort(ratios.begin(), ratios.end());
    state.counters["tape/by_hand"] = ratios.empty() ? 0.0 : ratios[ratios.size() / 2];
}

/// examples/train_sort's training step; `by_tape` picks how the gradients are computed.
struct TrainSortStep {
    sort_model::SortModel model;
    headwise::AdamW<T> opt;
    sort_model::Batch batch;

    static headwise::TransformerEncoderLayerOptions options() {
        headwise::TransformerEncoderLayerOptions o;
        o.d_model = 64;
        o.nhead = 4;
        o.dim_feedforward = 128;
        return o;
    }
    static headwise::AdamOptions adam() {
        headwise::AdamOptions ao;
        ao.lr = 1e-4;  // small: the loss stays where it is over many iterations
        return ao;
    }
    explicit TrainSortStep(headwise::Generator&& init_rng, headwise::Generator&& data_rng)
        : model(options(), /*num_layers=*/2, init_rng),
          opt(model.parameters(), adam()),
          batch(sort_model::make_batch(64, data_rng, nullptr)) {}

    void operator()(bool by_tape) {
        opt.zero_grad();
        if (by_tape) {
            headwise::autograd::Tape<T> tape;
            const headwise::autograd::Var<T> loss = sort_model::sort_loss(model, tape, batch);
            tape.backward(loss);
            benchmark::DoNotOptimize(loss.item());
        } else {
            const headwise::test::SortByHand f =
                headwise::test::sort_forward_by_hand(model, batch.seq);
            const headwise::LossResult<T> loss = headwise::cross_entropy<T>(f.logits, batch.target);
            headwise::test::sort_backward_by_hand(model, batch.seq, f, loss.grad);
            benchmark::DoNotOptimize(loss.value);
        }
        headwise::clip_grad_norm(opt.parameters(), 1.0);
        opt.step();
    }
};

void BM_TrainSortStep(benchmark::State& state) {
    const bool by_tape = state.range(0) == 1;
    TrainSortStep step(headwise::Generator(1), headwise::Generator(2));
    for (auto _ : state) step(by_tape);
    state.SetLabel(by_tape ? "tape" : "by_hand");
}

void BM_TrainSortPaired(benchmark::State& state) {
    TrainSortStep step(headwise::Generator(1), headwise::Generator(2));
    paired(state, step);
}

/// One self-attention training step on [B, L, E]: MSE against a fixed target, AdamW.
struct MhaStep {
    headwise::MultiheadAttention<T> mha;
    headwise::AdamW<T> opt;
    Tensor<T> x, target;  // [B, L, E] each

    static headwise::MultiheadAttentionOptions options(Index E, Index H) {
        headwise::MultiheadAttentionOptions mo;
        mo.embed_dim = E;
        mo.num_heads = H;
        return mo;
    }
    static headwise::AdamOptions adam() {
        headwise::AdamOptions ao;
        ao.lr = 1e-4;
        return ao;
    }
    MhaStep(Index B, Index L, Index E, Index H, headwise::Generator&& rng)
        : mha(options(E, H), /*seed=*/1),
          opt(mha.parameters(), adam()),
          x(Tensor<T>::randn(Shape{B, L, E}, rng)),
          target(Tensor<T>::randn(Shape{B, L, E}, rng)) {}

    void operator()(bool by_tape) {
        opt.zero_grad();
        if (by_tape) {
            // A user hands each step's batch to the tape with std::move; here the batch is
            // reused, so one copy of it [B, L, E] is part of the tape's step.
            headwise::autograd::Tape<T> tape;
            const headwise::autograd::Var<T> in = tape.input(Tensor<T>(x));
            const headwise::autograd::Var<T> loss =
                headwise::autograd::mse_loss<T>(headwise::autograd::apply(mha, in), target);
            tape.backward(loss);
            benchmark::DoNotOptimize(loss.item());
        } else {
            const headwise::AttentionForward<T> f = mha.forward(x, x, x);
            const headwise::LossResult<T> loss = headwise::mse_loss<T>(f.output, target);
            const headwise::AttentionGradients<T> g = mha.backward(f, loss.grad);
            benchmark::DoNotOptimize(g.query.data());
            benchmark::DoNotOptimize(loss.value);
        }
        opt.step();
    }
};

void BM_MhaStep(benchmark::State& state) {
    const bool by_tape = state.range(0) == 1;
    MhaStep step(state.range(1), state.range(2), state.range(3), state.range(4),
                 headwise::Generator(2));
    for (auto _ : state) step(by_tape);
    state.SetLabel(by_tape ? "tape" : "by_hand");
}

void BM_MhaPaired(benchmark::State& state) {
    MhaStep step(state.range(0), state.range(1), state.range(2), state.range(3),
                 headwise::Generator(2));
    paired(state, step);
}

}  // namespace

BENCHMARK(BM_TrainSortStep)
    ->Name("tape_step/train_sort")
    ->ArgName("tape")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MhaStep)
    ->Name("tape_step/mha")
    ->ArgNames({"tape", "B", "L", "E", "H"})
    ->Args({0, 8, 128, 512, 8})
    ->Args({1, 8, 128, 512, 8})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TrainSortPaired)->Name("tape_step_paired/train_sort")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MhaPaired)
    ->Name("tape_step_paired/mha")
    ->ArgNames({"B", "L", "E", "H"})
    ->Args({8, 128, 512, 8})
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
