// SPDX-License-Identifier: MIT
// train_sort on several processes: the same model, schedule and data as train_sort, each rank
// training on its share of every batch, gradients averaged over MPI (distributed::DataParallel).
//
//   mpirun -np 2 ./train_sort_ddp                   until 99% of held-out sequences are sorted
//   mpirun -np 2 ./train_sort_ddp --steps 12        a short run (what ctest runs)
//   mpirun --hostfile hosts -np 16 ./train_sort_ddp several machines (docs/distributed.md)
//
// Options:
//   --steps N             the schedule's length (default 3000, as train_sort)
//   --batch G             the global batch (default 64, as train_sort); the ranks split it, so
//                         it must be a multiple of the rank count
//   --batch-per-rank B    instead of --batch: G = B x ranks (weak scaling: more ranks, more data)
//   --dropout P           the encoder layers' dropout; each rank draws its own masks
//   --checkpoint FILE     rank 0 saves model, optimiser, step and every rank's random state to
//                         FILE every 100 steps and at the end
//   --resume FILE         continue from FILE (every rank reads it: a shared file system, or a
//                         copy on each machine), with the same number of ranks
//   --stop-after K        stop after step K
//   --bucket-mb M         gradient bytes per all-reduce, in MiB (default 25)
//   --timing              no held-out evaluation until the end; print the time per step, the
//                         share in all-reduce and the all-reduce calls per step
// With --batch 64, any rank count trains the trajectory of one train_sort process up to the
// order of the gradient sums. A rank that fails ends the whole job (distributed::run).
#include <headwise/distributed/checkpoint.hpp>
#include <headwise/distributed/communicator.hpp>
#include <headwise/distributed/data_parallel.hpp>
#include <headwise/distributed/environment.hpp>
#include <headwise/distributed/random_streams.hpp>
#include <headwise/distributed/sampler.hpp>
#include <headwise/headwise.hpp>

#include "sort_model.hpp"  // SortModel, make_batch, sequence_accuracy

#include <algorithm>  // std::min, std::max, std::copy_n
#include <chrono>     // std::chrono::steady_clock
#include <cmath>      // std::cos, std::isfinite
#include <cstdint>    // std::int64_t, std::uint64_t
#include <cstdio>     // std::printf
#include <cstdlib>    // std::atoi, std::atof
#include <cstring>    // std::strcmp
#include <set>        // std::set
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string
#include <vector>     // std::vector

namespace hd = headwise::distributed;
using headwise::Index;
using headwise::Shape;
using headwise::Tensor;
using sort_model::Batch;
using sort_model::kLength;
using sort_model::SortModel;
using sort_model::T;

namespace {

struct Options {
    int steps = 3000;
    int stop_after = 0;  // 0: steps
    Index batch = 64;
    Index batch_per_rank = 0;  // > 0: batch = batch_per_rank x ranks
    double dropout = 0.0;
    double bucket_mb = 25.0;
    std::string checkpoint, resume;
    bool timing = false;
};

/// The rows `rows` of a batch: this rank's share.
Batch rows_of(const Batch& all, const std::vector<Index>& rows) {
    const Index n = static_cast<Index>(rows.size());
    Batch b{Tensor<std::int64_t>(Shape{n, kLength}), Tensor<std::int64_t>(Shape{n * kLength})};
    for (Index i = 0; i < n; ++i) {
        const Index r = rows[static_cast<std::size_t>(i)];
        std::copy_n(all.seq.data() + r * kLength, kLength, b.seq.data() + i * kLength);
        std::copy_n(all.target.data() + r * kLength, kLength, b.target.data() + i * kLength);
    }
    return b;
}

/// The held-out accuracy over all ranks: each evaluates every world-th sequence, and one
/// all-reduce adds the counts.
double held_out_accuracy(SortModel& model, const Batch& held_out, hd::DataParallel<T>& dp) {
    const Index N = held_out.seq.shape()[0];
    std::vector<Index> mine;
    for (Index n = dp.rank(); n < N; n += dp.size()) mine.push_back(n);
    const double local =
        mine.empty() ? 0.0 : sort_model::sequence_accuracy(model, rows_of(held_out, mine));
    const std::vector<double> sums = dp.communicator().sum(std::vector<double>{
        local * static_cast<double>(mine.size()), static_cast<double>(mine.size())});
    return sums[0] / sums[1];
}

int train(hd::Communicator& world, const Options& o) {
    const bool root = world.is_root();
    const Index G = o.batch_per_rank > 0 ? o.batch_per_rank * world.size() : o.batch;
    if (G % world.size() != 0)
        throw std::invalid_argument("train_sort_ddp: --batch " + std::to_string(G) +
                                    " is not a multiple of the " + std::to_string(world.size()) +
                                    " ranks");
    const int stop_after = o.stop_after ? o.stop_after : o.steps;
    const bool full = o.steps >= 1000;

    // The held-out sequences, the same on every rank (train_sort's).
    const Index held = full ? 2000 : 64;
    headwise::Generator held_rng(3);
    const Batch held_out = sort_model::make_batch(held, held_rng, nullptr);
    std::set<std::int64_t> held_out_codes;
    for (Index n = 0; n < held; ++n)
        held_out_codes.insert(sort_model::code(held_out.seq.data() + n * kLength));

    headwise::TransformerEncoderLayerOptions lo;
    lo.d_model = 64;
    lo.nhead = 4;
    lo.dim_feedforward = 128;
    lo.dropout = o.dropout;
    headwise::Generator init_rng(1), data_rng(2);
    SortModel model(lo, /*num_layers=*/2, init_rng);
    // Each rank its own dropout masks, the same ones in every run of this rank.
    hd::seed_random_streams(model, /*seed=*/1234, world.rank());

    headwise::AdamOptions ao;
    ao.lr = 2e-3;
    ao.weight_decay = 0.01;
    headwise::AdamW<T> opt(model.parameters(), ao);
    hd::DataParallelOptions dpo;
    dpo.bucket_bytes = static_cast<std::size_t>(o.bucket_mb * 1024 * 1024);
    hd::DataParallel<T> dp(world, model.parameters(), dpo);  // every rank starts from rank 0's
    hd::DistributedSampler sampler(G, world.size(), world.rank(), /*seed=*/0);
    const int warmup = std::min(100, std::max(1, o.steps / 10));

    int first = 1;
    if (!o.resume.empty()) {
        const headwise::io::Checkpoint<T> c = headwise::io::load_checkpoint<T>(o.resume);
        model.load_state_dict(c.model);  // before the optimiser's: it holds views of the model
        opt.load_state_dict(c.optimiser);
        model.load_random_state(hd::rank_random_state(c, world.rank()));
        headwise::set_generator_state(data_rng, c.integers.at("data_rng"));
        first = static_cast<int>(c.step) + 1;
        if (root) std::printf("resumed from %s at step %d\n", o.resume.c_str(), first - 1);
    }
    auto save = [&](int step) {
        hd::save_checkpoint(world, o.checkpoint, model.random_state(), [&] {
            headwise::io::Checkpoint<T> c;
            c.model = model.state_dict();
            c.optimiser = opt.state_dict();
            c.step = static_cast<std::uint64_t>(step);
            c.integers["data_rng"] = headwise::generator_state(data_rng);
            return c;
        });
    };

    if (root)
        std::printf(
            "sorting %d digits: 2 encoder layers (d_model 64, 4 heads), AdamW, batch %d "
            "on %d ranks (%d each), %zu gradient bucket(s) of %lld parameters\n",
            static_cast<int>(kLength), static_cast<int>(G), world.size(),
            static_cast<int>(G / world.size()), dp.bucket_count(),
            static_cast<long long>(model.parameter_count()));
    double train_seconds = 0.0, wait_seconds = 0.0, accuracy = 0.0, first_loss = 0.0, loss = 0.0;
    bool finite = true;
    int step = first;
    for (; step <= stop_after; ++step) {
        const auto start = std::chrono::steady_clock::now();
        const double progress = static_cast<double>(step) / o.steps;
        opt.set_lr(ao.lr * std::min(1.0, static_cast<double>(step) / warmup) *
                   (0.55 + 0.45 * std::cos(3.141592653589793 * progress)));
        // Every rank draws the whole global batch (the same generator) and keeps its share.
        const Batch batch = sort_model::make_batch(G, data_rng, &held_out_codes);
        sampler.set_epoch(static_cast<std::uint64_t>(step));
        const Batch mine = rows_of(batch, sampler.indices());

        opt.zero_grad();
        double local_loss = 0.0;
        {
            headwise::autograd::Tape<T> tape;  // the forward recorded; backward from it
            const headwise::autograd::Var<T> l = sort_model::sort_loss(model, tape, mine);
            tape.backward(l);
            local_loss = l.item();
        }
        if (o.timing) {
            // How long this rank waits for the slowest one: what the all-reduce would count as
            // its own time otherwise.
            const auto before = std::chrono::steady_clock::now();
            world.barrier();
            wait_seconds +=
                std::chrono::duration<double>(std::chrono::steady_clock::now() - before).count();
        }
        dp.average_gradients();  // the global batch's gradient, on every rank
        headwise::clip_grad_norm(opt.parameters(), 1.0);
        opt.step();
        loss = dp.average(local_loss);  // the global batch's loss
        train_seconds +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (step == first) first_loss = loss;
        finite = finite && std::isfinite(loss);

        const bool last = step == stop_after;
        if (!o.checkpoint.empty() && (step % 100 == 0 || last)) save(step);
        const int every = full ? 100 : o.steps;
        if ((!o.timing && step % every == 0) || last) {
            accuracy = held_out_accuracy(model, held_out, dp);
            if (root)
                std::printf("step %5d  loss %.4f  held-out sequence accuracy %.4f  %.1f s\n", step,
                            loss, accuracy, train_seconds);
            if (!o.timing && step % every == 0 && accuracy >= 0.99) {
                if (!o.checkpoint.empty() && !last) save(step);
                break;
            }
        }
    }
    const int done = std::min(step, stop_after) - first + 1;
    const bool identical = dp.identical();

    // Timing: the slowest rank's (the job runs at its pace). Without --timing the all-reduce
    // time includes the wait for the other ranks to reach it; with it, the wait is apart.
    std::vector<double> t{train_seconds, dp.stats().seconds, wait_seconds};
    world.max(t.data(), t.size());
    if (root) {
        const double per_step = t[0] / done;
        std::printf(
            "ranks %d  global batch %d  steps %d  %.3f ms/step  %.0f samples/s  "
            "all-reduce %.1f%% (%.3f ms/step)  waiting for ranks %.1f%%  "
            "all-reduce calls/step %.2f (gradients %.2f)\n",
            world.size(), static_cast<int>(G), done, 1e3 * per_step,
            static_cast<double>(G) / per_step, 100.0 * t[1] / t[0], 1e3 * t[1] / done,
            100.0 * t[2] / t[0],
            static_cast<double>(dp.stats().gradient_calls + dp.stats().scalar_calls) / done,
            static_cast<double>(dp.stats().gradient_calls) / done);
    }
    const bool learnt = full ? accuracy >= 0.99 : loss < first_loss || done == 1;
    const bool ok = finite && identical && learnt;
    if (root)
        std::printf("parameters identical on all ranks: %s\n%s\n", identical ? "yes" : "NO",
                    ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const bool has_value = i + 1 < argc;
        if (has_value && std::strcmp(argv[i], "--steps") == 0) {
            o.steps = std::atoi(argv[++i]);
        } else if (has_value && std::strcmp(argv[i], "--stop-after") == 0) {
            o.stop_after = std::atoi(argv[++i]);
        } else if (has_value && std::strcmp(argv[i], "--batch") == 0) {
            o.batch = std::atoi(argv[++i]);
        } else if (has_value && std::strcmp(argv[i], "--batch-per-rank") == 0) {
            o.batch_per_rank = std::atoi(argv[++i]);
        } else if (has_value && std::strcmp(argv[i], "--dropout") == 0) {
            o.dropout = std::atof(argv[++i]);
        } else if (has_value && std::strcmp(argv[i], "--bucket-mb") == 0) {
            o.bucket_mb = std::atof(argv[++i]);
        } else if (has_value && std::strcmp(argv[i], "--checkpoint") == 0) {
            o.checkpoint = argv[++i];
        } else if (has_value && std::strcmp(argv[i], "--resume") == 0) {
            o.resume = argv[++i];
        } else if (std::strcmp(argv[i], "--timing") == 0) {
            o.timing = true;
        } else {
            std::fprintf(stderr,
                         "usage: train_sort_ddp [--steps N] [--batch G | --batch-per-rank B] "
                         "[--dropout P] [--checkpoint FILE] [--resume FILE] [--stop-after K] "
                         "[--bucket-mb M] [--timing]\n");
            return 2;
        }
    }
    if (o.steps < 1 || o.stop_after < 0 || o.stop_after > o.steps || o.batch < 1 ||
        o.batch_per_rank < 0 || !(o.bucket_mb > 0.0)) {
        std::fprintf(stderr,
                     "train_sort_ddp: need 0 < --steps, 0 <= --stop-after <= --steps, "
                     "0 < --batch, 0 <= --batch-per-rank, 0 < --bucket-mb\n");
        return 2;
    }
    // Every rank runs train(); one that throws (a missing checkpoint, a full disk) or fails
    // ends the job.
    return hd::run(argc, argv, [&](hd::Communicator& world) { return train(world, o); });
}
