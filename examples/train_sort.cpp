// SPDX-License-Identifier: MIT
// Trains a small transformer to sort digit sequences: embedding + encoder layers + linear head +
// cross-entropy + AdamW, then shows that the per_head projection gives fused's loss curve. The
// model is its forward alone (sort_model.hpp): an autograd::Tape runs the backward.
//
//   train_sort                 train until 99% of held-out sequences come out sorted (or max steps)
//   train_sort --steps 12      a short run (what ctest runs in a Debug build)
//
// Checkpoints: with any of the flags below, one run (fused) that can stop and continue exactly.
//   --checkpoint FILE   save model, optimiser, step and random state to FILE (one safetensors
//                       file) every 100 steps and at the end
//   --resume FILE       continue from FILE's step, on the same trajectory (same --steps and
//                       --dropout as the run that wrote it)
//   --stop-after K      stop after step K, as an interrupted run would
//   --dropout P         the encoder layers' dropout (default 0), so that the random streams matter
//
//   --warmup N          the learning rate from an LRScheduler: linear warm-up over N steps, then
//                       cosine decay to a tenth by the last step (SequentialLR of LinearLR and
//                       CosineAnnealingLR); without it, the same shape written out in the loop
//   --curve FILE        one run (fused); each step's loss to FILE ("step loss", 10 digits, which
//                       tell floats apart): runs on 1 and 2 threads must write the same file
//   --precision bf16    (or --bf16) mixed-precision training: the products with weights in bf16,
//                       float master weights, gradients and optimiser state. Alone: a float run,
//                       then the same run (same seeds) in bf16, their steps to 99% and loss
//                       curves; with the one-run flags above: that run in bf16.
//   --seed S            another initialisation and batch order (default 0; the held-out set
//                       stays the same)
//   --every N           with --precision bf16 alone: check the held-out accuracy every N steps
//                       (default 100)
// e.g. `train_sort --steps 3000 --checkpoint run.st --stop-after 500`, later
// `train_sort --steps 3000 --resume run.st --checkpoint run.st`: the parameters at step 3000 are
// bit for bit those of one uninterrupted run.
#include <headwise/headwise.hpp>
#include <headwise/optim/lr_scheduler.hpp>  // LRScheduler, SequentialLR, LinearLR, CosineAnnealingLR

#include "sort_model.hpp"  // SortModel, sort_loss, make_batch, sequence_accuracy

#if !__has_include(<nlohmann/json.hpp>)
#error "train_sort saves checkpoints with io/safetensors.hpp, which needs nlohmann/json"
#endif

#include <algorithm>  // std::sort, std::max
#include <chrono>     // std::chrono::steady_clock
#include <cmath>      // std::abs, std::cos, std::isfinite
#include <cstdint>    // std::int64_t
#include <cstdio>     // std::printf, std::fprintf, std::fopen, std::FILE
#include <cstdlib>    // std::atoi, std::atof
#include <cstring>    // std::strcmp
#include <exception>  // std::exception
#include <memory>     // std::unique_ptr
#include <optional>   // std::optional
#include <set>        // std::set
#include <string>     // std::string
#include <vector>     // std::vector

using headwise::Index;
using headwise::Shape;
using headwise::Tensor;
using T = float;

namespace {

using sort_model::Batch;
using sort_model::code;
using sort_model::kLength;
using sort_model::make_batch;
using sort_model::sequence_accuracy;
using sort_model::SortModel;

struct Run {
    std::vector<double> losses;  // of the steps this process ran
    double accuracy = 0.0;
    double seconds = 0.0;
    int steps = 0;  // the last step's number
};

/// Checkpointing: where to save and resume from ("" for neither), and the dropout; the warm-up
/// of an LRScheduler (0: the schedule written out in the loop).
struct Resumable {
    std::string checkpoint, resume;
    double dropout = 0.0;
    int warmup = 0;
    std::FILE* curve = nullptr;  // --curve: every step's loss, written exactly
    headwise::Precision precision = headwise::Precision::float32;  // --precision
    // --seed: the initialisation's and the batches' generators start at 1 + 2 seed, 2 + 2 seed
    int seed = 0;
    int every = 0;  // --every: the bf16 comparison's accuracy checks (0: every 100 steps)
};

/// Trains a fresh model (same seeds every time) with `projection` on a `max_steps` schedule,
/// stopping once the held-out sequence accuracy reaches `target` (checked every `every` steps)
/// or after `stop_after` steps. With `r.resume`, the model, optimiser, data generator and
/// dropout streams start from that checkpoint and training from the step after its step.
Run train(headwise::Projection projection, int max_steps, int stop_after, double target, int every,
          bool verbose, const Batch& held_out, const std::set<std::int64_t>& held_out_codes,
          const Resumable& r = {}) {
    headwise::TransformerEncoderLayerOptions o;
    o.d_model = 64;
    o.nhead = 4;
    o.dim_feedforward = 128;
    o.dropout = r.dropout;
    o.projection = projection;
    headwise::Generator init_rng(static_cast<std::uint64_t>(1 + 2 * r.seed)),
        data_rng(static_cast<std::uint64_t>(2 + 2 * r.seed));
    SortModel model(o, /*num_layers=*/2, init_rng);
    model.set_precision(r.precision);

    headwise::AdamOptions ao;
    ao.lr = 2e-3;
    ao.weight_decay = 0.01;
    headwise::AdamW<T> opt(model.parameters(), ao);
    const int warmup = std::min(100, std::max(1, max_steps / 10));
    const Index B = 64;
    // --warmup N: torch's recipe, with the rate of step s at the scheduler's epoch s - 1.
    std::optional<headwise::LRScheduler<headwise::AdamW<T>>> scheduler;
    if (r.warmup > 0)
        scheduler.emplace(opt, headwise::SequentialLR(
                                   {headwise::LinearLR(1.0 / r.warmup, 1.0, r.warmup),
                                    headwise::CosineAnnealingLR(max_steps - r.warmup, ao.lr / 10)},
                                   {r.warmup}));

    // Everything the next step depends on: weights, moments, step, and where the generators are
    // (the batches' and the dropout masks'). The learning rate follows from the step.
    auto save = [&](int step) {
        headwise::io::Checkpoint<T> c;
        c.model = model.state_dict();
        c.optimiser = opt.state_dict();
        c.model_random = model.random_state();
        c.step = static_cast<std::uint64_t>(step);
        c.integers["data_rng"] = headwise::generator_state(data_rng);
        headwise::io::save_checkpoint(r.checkpoint, c);
    };
    int first = 1;
    if (!r.resume.empty()) {
        const headwise::io::Checkpoint<T> c = headwise::io::load_checkpoint<T>(r.resume);
        model.load_state_dict(c.model);  // before the optimiser's: it holds views of the model
        opt.load_state_dict(c.optimiser);
        model.load_random_state(c.model_random);
        headwise::set_generator_state(data_rng, c.integers.at("data_rng"));
        first = static_cast<int>(c.step) + 1;
        // The schedule is a function of the epoch: step it to the checkpoint's.
        if (scheduler)
            for (int step = 1; step < first; ++step) scheduler->step();
        std::printf("resumed from %s at step %d\n", r.resume.c_str(), first - 1);
    }

    Run run;
    const auto start = std::chrono::steady_clock::now();
    auto elapsed = [&] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    for (int step = first; step <= stop_after; ++step) {
        if (!scheduler) {  // linear warm-up, then cosine decay to a tenth, written out
            const double progress = static_cast<double>(step) / max_steps;
            opt.set_lr(ao.lr * std::min(1.0, static_cast<double>(step) / warmup) *
                       (0.55 + 0.45 * std::cos(3.141592653589793 * progress)));
        }
        const Batch batch = make_batch(B, data_rng, &held_out_codes);
        opt.zero_grad();
        double loss = 0.0;
        {
            headwise::autograd::Tape<T> tape;  // this step's recording; its activations go with it
            const headwise::autograd::Var<T> l = sort_model::sort_loss(model, tape, batch);
            tape.backward(l);  // every layer's own backward, adding into the model's gradients
            loss = l.item();
        }
        headwise::clip_grad_norm(opt.parameters(), 1.0);
        opt.step();
        if (scheduler) scheduler->step();
        run.losses.push_back(loss);
        if (r.curve) std::fprintf(r.curve, "%d %.9e\n", step, loss);
        run.steps = step;
        const bool last = step == stop_after;
        if (!r.checkpoint.empty() && (step % 100 == 0 || last)) save(step);
        if (step % every == 0 || last) {
            run.accuracy = sequence_accuracy(model, held_out);
            if (verbose)
                std::printf(
                    "step %5d  loss %.4f  held-out sequence accuracy %.4f  elapsed %.1f s\n", step,
                    loss, run.accuracy, elapsed());
            if (step % every == 0 && run.accuracy >= target) {
                if (!r.checkpoint.empty()) save(step);
                break;
            }
        }
    }
    run.seconds = elapsed();
    return run;
}

/// --precision bf16 alone: the float run, then the same run (same seeds, same batches) in bf16;
/// their steps to 99% held-out accuracy and mean losses side by side. A full run passes when
/// both reach 99% and bf16 takes at most 1.2x float's steps; a short one when bf16's loss falls.
int compare_bf16(int max_steps, bool full, const Batch& held_out,
                 const std::set<std::int64_t>& held_out_codes, Resumable schedule) {
    const int every = full ? (schedule.every > 0 ? schedule.every : 100) : max_steps;
    schedule.precision = headwise::Precision::float32;
    const Run f32 = train(headwise::Projection::fused, max_steps, max_steps, 0.99, every, true,
                          held_out, held_out_codes, schedule);
    std::printf("float32: %d steps, held-out sequence accuracy %.4f, %.1f s\n", f32.steps,
                f32.accuracy, f32.seconds);
    schedule.precision = headwise::Precision::bf16;
    const Run bf16 = train(headwise::Projection::fused, max_steps, max_steps, 0.99, every, true,
                           held_out, held_out_codes, schedule);
    std::printf("bf16:    %d steps, held-out sequence accuracy %.4f, %.1f s\n", bf16.steps,
                bf16.accuracy, bf16.seconds);
    const int common = std::min(f32.steps, bf16.steps);
    const int window = full ? 100 : std::max(1, max_steps / 4);
    std::printf("mean loss per %d steps:   float32   bf16\n", window);
    for (int s0 = 0; s0 + window <= common; s0 += window) {
        double a = 0.0, b = 0.0;
        for (int s = s0; s < s0 + window; ++s) {
            a += f32.losses[s] / window;
            b += bf16.losses[s] / window;
        }
        std::printf("  steps %5d-%-5d      %.5f   %.5f\n", s0 + 1, s0 + window, a, b);
    }
    bool finite = true;
    for (double loss : bf16.losses) finite = finite && std::isfinite(loss);
    const bool ok = finite && (full ? f32.accuracy >= 0.99 && bf16.accuracy >= 0.99 &&
                                          bf16.steps <= 1.2 * f32.steps
                                    : bf16.losses.back() < bf16.losses.front());
    if (full)
        std::printf("bf16 / float32 steps to 99%%: %.2f (target <= 1.2)\n",
                    static_cast<double>(bf16.steps) / f32.steps);
    std::printf("%s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    int max_steps = 3000, stop_after = 0;
    Resumable r;
    std::string curve_path;
    for (int i = 1; i < argc; ++i) {
        const bool has_value = i + 1 < argc;
        if (has_value && std::strcmp(argv[i], "--steps") == 0) {
            max_steps = std::atoi(argv[++i]);
        } else if (has_value && std::strcmp(argv[i], "--stop-after") == 0) {
            stop_after = std::atoi(argv[++i]);
        } else if (has_value && std::strcmp(argv[i], "--dropout") == 0) {
            r.dropout = std::atof(argv[++i]);
        } else if (has_value && std::strcmp(argv[i], "--checkpoint") == 0) {
            r.checkpoint = argv[++i];
        } else if (has_value && std::strcmp(argv[i], "--resume") == 0) {
            r.resume = argv[++i];
        } else if (has_value && std::strcmp(argv[i], "--warmup") == 0) {
            r.warmup = std::atoi(argv[++i]);
        } else if (has_value && std::strcmp(argv[i], "--curve") == 0) {
            curve_path = argv[++i];
        } else if (has_value && std::strcmp(argv[i], "--precision") == 0 &&
                   (std::strcmp(argv[i + 1], "bf16") == 0 ||
                    std::strcmp(argv[i + 1], "float32") == 0)) {
            r.precision = std::strcmp(argv[++i], "bf16") == 0 ? headwise::Precision::bf16
                                                              : headwise::Precision::float32;
        } else if (std::strcmp(argv[i], "--bf16") == 0) {
            r.precision = headwise::Precision::bf16;
        } else if (has_value && std::strcmp(argv[i], "--seed") == 0) {
            r.seed = std::atoi(argv[++i]);
        } else if (has_value && std::strcmp(argv[i], "--every") == 0) {
            r.every = std::atoi(argv[++i]);
        } else {
            std::fprintf(stderr,
                         "usage: train_sort [--steps N] [--checkpoint FILE] [--resume FILE] "
                         "[--stop-after K] [--dropout P] [--warmup N] [--curve FILE] "
                         "[--precision float32|bf16] [--seed S] [--every N]\n"
                         "  --warmup N: linear warm-up over N steps, then cosine decay to a tenth "
                         "of the rate (LRScheduler)\n"
                         "  --curve FILE: one run; each step's loss to FILE, exactly\n"
                         "  --precision bf16 (--bf16): mixed-precision training; alone, compared "
                         "with float\n");
            return 2;
        }
    }
    if (max_steps < 1 || stop_after < 0 || stop_after > max_steps || r.warmup < 0 || r.seed < 0 ||
        r.every < 0 || r.warmup >= max_steps) {
        std::fprintf(stderr,
                     "train_sort: need 0 < --steps, 0 <= --stop-after <= --steps, "
                     "0 <= --warmup < --steps, 0 <= --seed, 0 <= --every\n");
        return 2;
    }
    const bool full = max_steps >= 1000;

    // Held-out sequences the training batches never contain (fewer for a short run).
    const Index held = full ? 2000 : 64;
    headwise::Generator held_rng(3);
    const Batch held_out = make_batch(held, held_rng, nullptr);
    std::set<std::int64_t> held_out_codes;
    for (Index n = 0; n < held; ++n) held_out_codes.insert(code(held_out.seq.data() + n * kLength));

    std::printf("sorting %d digits: 2 encoder layers (d_model 64, 4 heads), AdamW, batch 64\n",
                static_cast<int>(kLength));
    // --curve: the file closes when main returns, however it returns.
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> curve(nullptr, &std::fclose);
    if (!curve_path.empty()) {
        curve.reset(std::fopen(curve_path.c_str(), "w"));
        if (!curve) {
            std::fprintf(stderr, "train_sort: cannot write --curve file '%s'\n",
                         curve_path.c_str());
            return 1;
        }
        r.curve = curve.get();
    }
    if (stop_after || !r.checkpoint.empty() || !r.resume.empty() || r.dropout != 0.0 || r.curve) {
        // One run that may stop, save and continue; no per_head comparison, which needs the
        // whole loss curve of one process.
        try {
            const Run run =
                train(headwise::Projection::fused, max_steps, stop_after ? stop_after : max_steps,
                      0.99, full ? 100 : max_steps, true, held_out, held_out_codes, r);
            bool finite = true;
            for (double loss : run.losses) finite = finite && std::isfinite(loss);
            std::printf("step %d, held-out sequence accuracy %.4f, %.1f s\n%s\n", run.steps,
                        run.accuracy, run.seconds, finite ? "ok" : "FAILED");
            return finite ? 0 : 1;
        } catch (const std::exception& e) {  // a missing or foreign checkpoint file, a full disk
            std::fprintf(stderr, "train_sort: %s\n", e.what());
            return 1;
        }
    }
    Resumable schedule;  // no checkpoints; the warm-up and seed, if any
    schedule.warmup = r.warmup;
    schedule.seed = r.seed;
    schedule.every = r.every;
    if (r.precision == headwise::Precision::bf16)
        return compare_bf16(max_steps, full, held_out, held_out_codes, schedule);
    const Run fused = train(headwise::Projection::fused, max_steps, max_steps, 0.99,
                            full ? 100 : max_steps, true, held_out, held_out_codes, schedule);
    std::printf("fused: %d steps, held-out sequence accuracy %.4f, %.1f s\n", fused.steps,
                fused.accuracy, fused.seconds);

    // The same run with the per-head projection (3 H small GEMMs instead of one): the same
    // computation up to float rounding, hence the same loss curve. Training amplifies rounding
    // differences slowly, so the per-step losses agree closely at first and the curves (means
    // over 100 steps) throughout.
    const Run per_head = train(headwise::Projection::per_head, max_steps, max_steps, 0.99,
                               full ? 100 : max_steps, false, held_out, held_out_codes, schedule);
    std::printf("per_head: %d steps, held-out sequence accuracy %.4f, %.1f s\n", per_head.steps,
                per_head.accuracy, per_head.seconds);
    const int common = std::min(fused.steps, per_head.steps);
    int agree = 0;  // leading steps whose losses agree to 1e-4 relative
    while (agree < common &&
           std::abs(per_head.losses[agree] - fused.losses[agree]) <= 1e-4 * fused.losses[agree])
        ++agree;
    const int window = full ? 100 : std::max(1, max_steps / 4);
    std::printf("mean loss per %d steps:   fused     per_head\n", window);
    for (int s0 = 0; s0 + window <= common; s0 += window) {
        double a = 0.0, b = 0.0;
        for (int s = s0; s < s0 + window; ++s) {
            a += fused.losses[s] / window;
            b += per_head.losses[s] / window;
        }
        std::printf("  steps %5d-%-5d      %.5f   %.5f\n", s0 + 1, s0 + window, a, b);
    }
    std::printf("the first %d of %d steps have the same loss to 1e-4 relative\n", agree, common);

    const bool curves_agree = agree >= std::min(common, 50);
    const bool learnt = full ? fused.accuracy >= 0.99 && per_head.accuracy >= 0.99
                             : fused.losses.back() < fused.losses.front();
    std::printf("%s\n", curves_agree && learnt ? "ok" : "FAILED");
    return curves_agree && learnt ? 0 : 1;
}
