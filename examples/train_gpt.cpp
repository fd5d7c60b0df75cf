// SPDX-License-Identifier: MIT
// Trains a small GPT-style causal language model with an autograd::Tape (the forward only, no
// backward written) to add numbers: "1 2 3 4 + 9 0 0 0 = 0 3 3 4 0" (4321 + 9 = 4330, every
// number least significant digit first, so that each digit of the sum follows its carry).
//
//   train_gpt                    until 99% of 1000 held-out sums come out right, or 3000 steps
//                                (exit 1 then)
//   train_gpt --steps N          the step budget (the schedule's length)
//   train_gpt --seed S           the seed of the initial weights and of the training batches
//   train_gpt --task reverse     reverse the digits instead: "3 1 4 1 = 1 4 1 3" (learnt fast)
//   train_gpt --digits N         digits per operand (default 4)
//   train_gpt --layers N         blocks (default 2); --d-model E (default 64, 4 heads)
//   train_gpt --batch B          sequences per step (default 64)
//   train_gpt --target A         the held-out sequence accuracy to reach (default 0.99)
//
// The model (gpt_model.hpp) sees the prompt and then the answer and learns to predict each next
// token; the loss counts the answer's tokens only (the operands are random). A held-out sequence
// counts as right when every answer token is the model's most likely next token given the tokens
// before it: exactly when greedy decoding from the prompt produces the whole answer.
#include <headwise/autograd/functions.hpp>  // cross_entropy
#include <headwise/autograd/tape.hpp>       // Tape, Var
#include <headwise/headwise.hpp>
#include <headwise/optim/lr_scheduler.hpp>  // LRScheduler
#include <headwise/optim/schedules.hpp>     // SequentialLR, LinearLR, CosineAnnealingLR

#include "gpt_model.hpp"  // Config, GPT

#include <algorithm>  // std::max, std::max_element, std::copy_n
#include <chrono>     // std::chrono::steady_clock
#include <cmath>      // std::isfinite
#include <cstdint>    // std::int64_t, std::uint64_t
#include <cstdio>     // std::printf, std::fprintf
#include <cstdlib>    // std::atoi, std::atof, std::strtoull
#include <cstring>    // std::strcmp
#include <set>        // std::set
#include <vector>     // std::vector

using headwise::Index;
using headwise::Shape;
using headwise::Tensor;
using T = float;

namespace {

constexpr std::int64_t kPlus = 10, kEquals = 11;  // tokens 0..9 are the digits
constexpr std::int64_t kIgnore = -100;            // targets the loss skips (CrossEntropyOptions)

/// The task: `add` (a + b = s, every number least significant digit first, s one digit longer)
/// or `reverse` (digits = the same digits in reverse order), over `digits`-digit operands.
struct Task {
    bool add = true;
    Index digits = 4;
    Index prompt() const { return add ? 2 * digits + 2 : digits + 1; }  // through "="
    Index answer() const { return add ? digits + 1 : digits; }
    Index context() const { return prompt() + answer() - 1; }  // the model's input length
};

/// Inputs [B, L] (the prompt and the answer but its last token) and next-token targets [B L],
/// kIgnore before the last prompt token's position.
struct Batch {
    Tensor<std::int64_t> ids, targets;
};

/// A number naming the operands of a sequence (to keep held-out ones out of training).
std::int64_t code(const std::int64_t* seq, const Task& task) {
    std::int64_t c = 0;
    for (Index i = 0; i < task.prompt(); ++i)
        if (seq[i] < 10) c = c * 10 + seq[i];  // at most 18 digits: no overflow
    return c;
}

/// B random sequences, none whose code is in `exclude` (if given).
Batch make_batch(Index B, const Task& task, headwise::Generator& rng,
                 const std::set<std::int64_t>* exclude) {
    const Index n = task.digits, P = task.prompt(), L = task.context();
    Batch b{Tensor<std::int64_t>(Shape{B, L}), Tensor<std::int64_t>(Shape{B * L})};
    std::vector<std::int64_t> seq(static_cast<std::size_t>(L + 1));
    for (Index s = 0; s < B; ++s) {
        std::int64_t* x = seq.data();
        do {
            for (Index i = 0; i < P; ++i) x[i] = static_cast<std::int64_t>(rng() % 10);
            if (task.add) {
                x[n] = kPlus;
                x[2 * n + 1] = kEquals;
            } else {
                x[n] = kEquals;
            }
        } while (exclude && exclude->count(code(x, task)));
        if (task.add) {
            std::int64_t carry = 0;
            for (Index i = 0; i <= n; ++i) {
                const std::int64_t sum = (i < n ? x[i] + x[n + 1 + i] : 0) + carry;
                x[P + i] = sum % 10;
                carry = sum / 10;
            }
        } else {
            for (Index i = 0; i < n; ++i) x[P + i] = x[n - 1 - i];
        }
        std::copy_n(x, L, b.ids.data() + s * L);
        for (Index t = 0; t < L; ++t) b.targets.data()[s * L + t] = t + 1 < P ? kIgnore : x[t + 1];
    }
    return b;
}

/// Fraction of the held-out sequences whose every counted target is the argmax (eval mode, a
/// no-grad tape: nothing recorded).
double sequence_accuracy(gpt_model::GPT<T>& model, const Batch& held_out) {
    model.eval();
    headwise::autograd::Tape<T> tape(headwise::autograd::Tape<T>::no_grad);
    const headwise::autograd::Var<T> logits = model.forward(tape, held_out.ids);
    model.train();
    const Index B = held_out.ids.shape()[0], L = held_out.ids.shape()[1];
    const Index V = logits.shape()[1];
    Index right = 0;
    for (Index s = 0; s < B; ++s) {
        bool all = true;
        for (Index t = 0; t < L; ++t) {
            const std::int64_t want = held_out.targets.data()[s * L + t];
            if (want == kIgnore) continue;
            const T* row = logits.value().data() + (s * L + t) * V;
            all = all && std::max_element(row, row + V) - row == want;
        }
        right += all;
    }
    return static_cast<double>(right) / static_cast<double>(B);
}

}  // namespace

int usage() {
    std::fprintf(stderr,
                 "usage: train_gpt [--steps N] [--seed S] [--task add|reverse] [--digits N] "
                 "[--layers N] [--d-model E] [--batch B] [--target A]\n");
    return 2;
}

int main(int argc, char** argv) {
    int max_steps = 3000;
    std::uint64_t seed = 1;
    double target = 0.99;
    Index batch_size = 64;
    gpt_model::Config config;
    Task task;
    for (int i = 1; i < argc; ++i) {
        const bool has_value = i + 1 < argc;
        if (has_value && std::strcmp(argv[i], "--steps") == 0) {
            max_steps = std::atoi(argv[++i]);
        } else if (has_value && std::strcmp(argv[i], "--seed") == 0) {
            seed = std::strtoull(argv[++i], nullptr, 10);
        } else if (has_value && std::strcmp(argv[i], "--digits") == 0) {
            task.digits = std::atoi(argv[++i]);
        } else if (has_value && std::strcmp(argv[i], "--task") == 0) {
            task.add = std::strcmp(argv[++i], "add") == 0;
            if (!task.add && std::strcmp(argv[i], "reverse") != 0) return usage();
        } else if (has_value && std::strcmp(argv[i], "--layers") == 0) {
            config.layers = std::atoi(argv[++i]);
        } else if (has_value && std::strcmp(argv[i], "--d-model") == 0) {
            config.d_model = std::atoi(argv[++i]);
        } else if (has_value && std::strcmp(argv[i], "--batch") == 0) {
            batch_size = std::atoi(argv[++i]);
        } else if (has_value && std::strcmp(argv[i], "--target") == 0) {
            target = std::atof(argv[++i]);
        } else {
            return usage();
        }
    }
    // At least 1000 distinct operands (the held-out ones are a fraction of them), at most 18
    // digits in a code.
    const Index min_digits = task.add ? 2 : 3;
    if (max_steps < 10 || batch_size < 1 || task.digits < min_digits || task.digits > 9 ||
        config.layers < 1 || config.d_model < 4 || config.d_model % 4 != 0 ||
        !(target > 0.0 && target <= 1.0)) {
        std::fprintf(stderr,
                     "train_gpt: need --steps >= 10, --batch >= 1, 2 <= --digits <= 9 (3 for "
                     "reverse), --layers >= 1, --d-model a positive multiple of 4 and "
                     "0 < --target <= 1\n");
        return 2;
    }
    config.context = task.context();

    // Held-out sequences (the same for every seed) that the training batches never contain;
    // fewer for a short run (ctest's, in a Debug build).
    const Index held = max_steps >= 500 ? 1000 : 100;
    headwise::Generator held_rng(12345);
    const Batch held_out = make_batch(held, task, held_rng, nullptr);
    std::set<std::int64_t> held_out_codes;
    for (Index s = 0; s < held; ++s)
        held_out_codes.insert(code(held_out.ids.data() + s * task.context(), task));

    headwise::Generator init_rng(seed), data_rng(seed + 1000);
    gpt_model::GPT<T> model(config, init_rng);
    headwise::AdamOptions ao;
    ao.lr = 3e-3;
    ao.weight_decay = 0.01;
    headwise::AdamW<T> opt(model.parameters(), ao);
    // Linear warm-up over 5% of the steps, then cosine decay to a tenth by the last step.
    const Index warmup = std::max(1, max_steps / 20);
    headwise::LRScheduler<headwise::AdamW<T>> scheduler(
        opt,
        headwise::SequentialLR({headwise::LinearLR(1.0 / static_cast<double>(warmup), 1.0, warmup),
                                headwise::CosineAnnealingLR(max_steps - warmup, ao.lr / 10)},
                               {warmup}));
    headwise::CrossEntropyOptions ce;
    ce.ignore_index = kIgnore;

    std::printf(
        "%s %d-digit numbers: GPT with %d blocks (d_model %d, %d heads), %d parameters, "
        "AdamW, batch %d, at most %d steps, target %.2f\n",
        task.add ? "adding" : "reversing", static_cast<int>(task.digits),
        static_cast<int>(config.layers), static_cast<int>(config.d_model),
        static_cast<int>(config.heads), static_cast<int>(model.parameter_count()),
        static_cast<int>(batch_size), max_steps, target);
    const auto start = std::chrono::steady_clock::now();
    const int every = max_steps >= 500 ? 50 : 10;
    double accuracy = 0.0;
    for (int step = 1; step <= max_steps; ++step) {
        const Batch batch = make_batch(batch_size, task, data_rng, &held_out_codes);
        opt.zero_grad();
        headwise::autograd::Tape<T> tape;  // one recording per step
        const headwise::autograd::Var<T> loss =
            headwise::autograd::cross_entropy(model.forward(tape, batch.ids), batch.targets, ce);
        tape.backward(loss);  // every module's backward, in reverse; the records are freed
        headwise::clip_grad_norm(opt.parameters(), 1.0);
        opt.step();
        scheduler.step();
        if (!std::isfinite(loss.item())) {
            std::printf("step %d: loss %g\nFAILED\n", step, loss.item());
            return 1;
        }
        if (step % every == 0 || step == max_steps) {
            accuracy = sequence_accuracy(model, held_out);
            const double seconds =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            std::printf("step %5d  loss %.4f  held-out sequence accuracy %.4f  elapsed %.1f s\n",
                        step, loss.item(), accuracy, seconds);
            if (accuracy >= target) {
                std::printf("reached %.2f at step %d in %.1f s\nok\n", target, step, seconds);
                return 0;
            }
        }
    }
    std::printf("held-out sequence accuracy %.4f after %d steps, below %.2f\nFAILED\n", accuracy,
                max_steps, target);
    return 1;
}
