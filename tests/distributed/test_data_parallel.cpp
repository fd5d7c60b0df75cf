// SPDX-License-Identifier: MIT
// DataParallel over MPI: parameters identical on every rank after every step, equal to one
// process on the global batch, per-rank dropout streams, errors on mismatched models, root-only
// checkpoints. Run under mpiexec with any number of ranks (ctest runs 1, 2 and 3).
//
// Every rank runs every test case. A collective that one rank skips leaves the others waiting,
// so a REQUIRE here only ever tests a value all ranks agree on (from a collective, or computed
// identically everywhere); a rank-local comparison is first combined with Communicator::all.
#define CATCH_CONFIG_RUNNER  // Catch2 v2: this file has the main (MPI must start first)
// With v2 that compiles Catch's implementation here, under our warnings: GCC 12 at -O1 (the
// sanitizer build) sees a maybe-uninitialised std::function inside <regex>, which Catch uses.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "support/catch.hpp"
#if HEADWISE_CATCH2_VERSION_MAJOR == 3
#include <catch2/catch_session.hpp>  // Catch::Session
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include <headwise/distributed/checkpoint.hpp>
#include <headwise/distributed/communicator.hpp>
#include <headwise/distributed/data_parallel.hpp>
#include <headwise/distributed/environment.hpp>
#include <headwise/distributed/random_streams.hpp>
#include <headwise/distributed/sampler.hpp>
#include <headwise/io/checkpoint.hpp>
#include <headwise/layers/linear.hpp>
#include <headwise/layers/module.hpp>
#include <headwise/layers/transformer_encoder_layer.hpp>
#include <headwise/losses/cross_entropy.hpp>
#include <headwise/optim/adam.hpp>
#include <headwise/optim/clip_grad_norm.hpp>
#include <headwise/optim/sgd.hpp>
#include <headwise/random.hpp>

#include <algorithm>   // std::max, std::copy_n
#include <cmath>       // std::abs
#include <cstdint>     // std::uint64_t, std::int64_t
#include <cstdio>      // std::remove
#include <filesystem>  // std::filesystem::temp_directory_path
#include <stdexcept>   // std::invalid_argument, std::runtime_error
#include <string>      // std::string, std::to_string
#include <vector>      // std::vector

#include <mpi.h>
#include <unistd.h>  // getpid

#include "support/instantiations.hpp"

using namespace headwise;
namespace hd = headwise::distributed;

namespace {

constexpr Index kLength = 5;    // L, tokens per sequence
constexpr Index kFeatures = 8;  // E
constexpr Index kClasses = 3;

/// An encoder layer and a linear head: a small model with attention, layer norm and dropout.
template <class T>
struct Net : Module<Net<T>, T> {
    static constexpr const char* kName = "test::Net";

    static TransformerEncoderLayerOptions options(double dropout) {
        TransformerEncoderLayerOptions o;
        o.d_model = kFeatures;
        o.nhead = 2;
        o.dim_feedforward = 16;
        o.dropout = dropout;
        return o;
    }

    Generator rng;
    TransformerEncoderLayer<T> layer;
    Linear<T> head;

    explicit Net(std::uint64_t seed, double dropout = 0.0, Index classes = kClasses)
        : rng(seed), layer(options(dropout), seed), head(kFeatures, classes, true, rng) {}

    template <class Self, class Visit>
    static void visit_parameters(Self& self, Visit&& visit) {
        Net::visit_child(self.layer, "layer.", visit);
        Net::visit_child(self.head, "head.", visit);
    }
    template <class Self, class Visit>
    static void visit_children(Self& self, Visit&& visit) {
        visit(self.layer);
        visit(self.head);
    }

    /// Adds the gradients of the mean cross-entropy over x's tokens [B, L, E]; returns the loss.
    double forward_backward(const Tensor<T>& x, const Tensor<std::int64_t>& target) {
        const Index B = x.shape()[0];
        const TransformerEncoderLayerForward<T> f = layer.forward(x);
        const Tensor<T> logits = head.forward(f.output);  // [B, L, C]
        const LossResult<T> loss =
            cross_entropy<T>(logits.reshape(Shape{B * kLength, kClasses}), target);
        layer.backward(f, head.backward(f.output, loss.grad.reshape(logits.shape())));
        return loss.value;
    }
};

/// The global batch of step `step`, the same on every rank: x [G, L, E], targets [G L].
template <class T>
struct Batch {
    Tensor<T> x;
    Tensor<std::int64_t> target;
};
template <class T>
Batch<T> global_batch(Index G, int step) {
    Generator g(1000 + static_cast<std::uint64_t>(step));
    Batch<T> b{Tensor<T>::randn(Shape{G, kLength, kFeatures}, g),
               Tensor<std::int64_t>(Shape{G * kLength})};
    for (Index i = 0; i < G * kLength; ++i)
        b.target.data()[i] = static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(kClasses));
    return b;
}
/// The rows `rows` of a batch.
template <class T>
Batch<T> rows_of(const Batch<T>& all, const std::vector<Index>& rows) {
    const Index n = static_cast<Index>(rows.size());
    Batch<T> b{Tensor<T>(Shape{n, kLength, kFeatures}), Tensor<std::int64_t>(Shape{n * kLength})};
    for (Index i = 0; i < n; ++i) {
        const Index r = rows[static_cast<std::size_t>(i)];
        std::copy_n(all.x.data() + r * kLength * kFeatures, kLength * kFeatures,
                    b.x.data() + i * kLength * kFeatures);
        std::copy_n(all.target.data() + r * kLength, kLength, b.target.data() + i * kLength);
    }
    return b;
}

/// max over parameters of |a - b|_inf / |b|_inf.
template <class T>
double relative_difference(Net<T>& a, Net<T>& b) {
    const std::vector<Parameter<T>> pa = a.parameters(), pb = b.parameters();
    double worst = 0.0;
    for (std::size_t i = 0; i < pa.size(); ++i) {
        double diff = 0.0, scale = 0.0;
        for (Index k = 0; k < pa[i].value.numel(); ++k) {
            diff = std::max(diff, std::abs(static_cast<double>(pa[i].value.data()[k]) -
                                           static_cast<double>(pb[i].value.data()[k])));
            scale = std::max(scale, std::abs(static_cast<double>(pb[i].value.data()[k])));
        }
        worst = std::max(worst, scale > 0.0 ? diff / scale : diff);
    }
    return worst;
}

template <class T>
constexpr double kEquivalenceTolerance = std::is_same_v<T, float> ? 1e-5 : 1e-12;

}  // namespace

TEMPLATE_TEST_CASE("DataParallel starts every rank from the root's parameters", "[distributed]",
                   float, double) {
    using T = TestType;
    hd::Communicator world;
    Net<T> net(/*seed=*/10 + static_cast<std::uint64_t>(world.rank()));  // different per rank
    Net<T> root_net(10);                                                 // what rank 0 has
    hd::DataParallel<T> dp(world, net.parameters());
    REQUIRE(dp.identical());
    REQUIRE(world.all(relative_difference(net, root_net) == 0.0));
    REQUIRE(dp.bucket_count() == 1);  // 1.3 KB of gradients, far below 25 MiB
}

TEMPLATE_TEST_CASE(
    "DataParallel training: identical on every rank after every step, equal to "
    "one process on the global batch",
    "[distributed]", float, double) {
    using T = TestType;
    hd::Communicator world;
    // Small buckets as well as the default: the bucketing must not change a bit.
    const std::size_t bucket_bytes = GENERATE(std::size_t{25} << 20, std::size_t{256});
    CAPTURE(world.size(), bucket_bytes);
    const Index G = 4 * world.size();  // the global batch: equal shards

    // SGD with momentum: the update is linear in the gradient, so the runs differ by rounding
    // only. Adam divides by sqrt(v): a gradient that is zero in exact arithmetic (the key bias,
    // to which softmax is invariant) is rounding noise of either sign in both runs, and Adam
    // turns each into a step of size lr, as it would between two single-process runs that sum
    // in different orders.
    Net<T> net(1), single(1);
    SGDOptions so;
    so.lr = 0.1;
    so.momentum = 0.9;
    SGD<T> opt(net.parameters(), so), single_opt(single.parameters(), so);
    hd::DataParallelOptions options;
    options.bucket_bytes = bucket_bytes;
    hd::DataParallel<T> dp(world, net.parameters(), options);
    hd::DistributedSampler sampler(G, world.size(), world.rank(), /*seed=*/3);

    bool identical = true, equivalent = true;
    double worst = 0.0;
    for (int step = 0; step < 5; ++step) {
        const Batch<T> all = global_batch<T>(G, step);
        sampler.set_epoch(static_cast<std::uint64_t>(step));
        const Batch<T> mine = rows_of(all, sampler.indices());

        opt.zero_grad();
        const double loss = dp.average(net.forward_backward(mine.x, mine.target));
        dp.average_gradients();
        clip_grad_norm(opt.parameters(), 0.5);
        opt.step();

        single_opt.zero_grad();
        const double single_loss = single.forward_backward(all.x, all.target);
        clip_grad_norm(single_opt.parameters(), 0.5);
        single_opt.step();

        identical = dp.identical() && identical;
        const double d = relative_difference(net, single);
        worst = std::max(worst, d);
        equivalent = equivalent && d <= kEquivalenceTolerance<T> &&
                     std::abs(loss - single_loss) <= 1e-5 * std::abs(single_loss);
    }
    CAPTURE(worst);
    REQUIRE(identical);
    REQUIRE(world.all(equivalent));
    // One all-reduce per bucket and step, and one for the loss.
    const std::uint64_t buckets = dp.bucket_count();
    REQUIRE(dp.stats().gradient_calls == (world.size() > 1 ? 5 * buckets : 0));
    REQUIRE(dp.stats().scalar_calls == (world.size() > 1 ? 5 + 5 : 0));  // losses, identical()
    if (bucket_bytes == 256) {
        REQUIRE(buckets > 1);
        for (std::size_t b = 0; b < buckets; ++b) {
            std::size_t bytes = 0;
            for (std::size_t i : dp.bucket(b))
                bytes += sizeof(T) * static_cast<std::size_t>(dp.parameters()[i].value.numel());
            CAPTURE(b, bytes);
            REQUIRE((bytes <= 256 || dp.bucket(b).size() == 1));
        }
    }
}

namespace {

/// What `f` throws as std::invalid_argument, or says that it threw something else or nothing.
template <class F>
std::string message_of(F&& f) {
    try {
        f();
    } catch (const std::invalid_argument& e) {
        return e.what();
    } catch (const std::exception& e) {
        return std::string("another exception: ") + e.what();
    }
    return "no exception";
}

/// True on every rank when every rank's message is the one it expects (each rank's own
/// comparison is a CHECK, so that a failure prints both; REQUIRE only the agreed result).
bool all_say(const hd::Communicator& world, const std::string& got, const std::string& expected) {
    CHECK(got == expected);
    return world.all(got == expected);
}

const std::string kConstructor = "headwise::distributed::DataParallel::DataParallel: ";

/// The message of a rank when rank 1 alone has `odd` for `field` and the others `usual`.
std::string rank_1_differs(const hd::Communicator& world, const std::string& field,
                           const std::string& usual, const std::string& odd) {
    const int r = world.rank();
    return kConstructor + field + ": differs across ranks: rank " + std::to_string(r) + " of " +
           std::to_string(world.size()) + " has " + (r == 1 ? odd : usual) + ", rank " +
           (r == 1 ? "0" : "1") + " has " + (r == 1 ? usual : odd);
}

}  // namespace

TEST_CASE("DataParallel: ranks whose parameters differ all throw, naming the constructor",
          "[distributed]") {
    hd::Communicator world;
    // Rank 1 has a head with one more output: a shape (and scalar count) that differs.
    Net<double> net(1, 0.0, world.rank() == 1 ? kClasses + 1 : kClasses);
    if (world.size() == 1) {
        REQUIRE_NOTHROW(hd::DataParallel<double>(world, net.parameters()));
        return;
    }
    const std::vector<Parameter<double>> params = net.parameters();
    std::size_t head = 0;
    while (params[head].name != "head.weight") ++head;
    const std::string usual =
        "'head.weight' [" + std::to_string(kClasses) + ", " + std::to_string(kFeatures) + "]";
    const std::string odd =
        "'head.weight' [" + std::to_string(kClasses + 1) + ", " + std::to_string(kFeatures) + "]";
    const int r = world.rank();
    REQUIRE(all_say(world, message_of([&] { hd::DataParallel<double>(world, params); }),
                    kConstructor + "parameters[" + std::to_string(head) +
                        "]: name or shape: differs across ranks: rank " + std::to_string(r) +
                        " of " + std::to_string(world.size()) + " has " + (r == 1 ? odd : usual) +
                        ", rank " + (r == 1 ? "0" : "1") + " has " + (r == 1 ? usual : odd)));

    // A bad option on every rank throws there, before anything is written.
    Net<float> f(1);
    hd::DataParallelOptions bad;
    bad.bucket_bytes = 0;
    REQUIRE_THROWS_MATCHES(hd::DataParallel<float>(world, f.parameters(), bad),
                           std::invalid_argument,
                           Message("headwise::distributed::DataParallel::DataParallel: "
                                   "options.bucket_bytes: must be positive, got 0"));
}

TEST_CASE("DataParallel: ranks that disagree on what shapes the communication all throw",
          "[distributed]") {
    hd::Communicator world;
    const int r = world.rank(), n = world.size();
    Net<double> net(1);
    Net<float> net_float(1);
    const std::vector<Parameter<double>> params = net.parameters();
    if (n == 1) {
        REQUIRE_NOTHROW(hd::DataParallel<double>(world, params));
        return;
    }
    const std::string size = std::to_string(n);

    SECTION("bucket_bytes") {
        // Before, the ranks packed different buckets: an MPI_Bcast of mismatched sizes (a heap
        // overflow), a hang, or ranks training from different parameters.
        hd::DataParallelOptions o;
        if (r == 1) o.bucket_bytes = 256;
        REQUIRE(all_say(world, message_of([&] { hd::DataParallel<double>(world, params, o); }),
                        rank_1_differs(world, "options.bucket_bytes",
                                       std::to_string(std::size_t{25} << 20), "256")));
    }
    SECTION("bucket_bytes 0 on one rank: that rank refuses it, the others name it") {
        hd::DataParallelOptions o;
        if (r == 1) o.bucket_bytes = 0;
        REQUIRE(all_say(world, message_of([&] { hd::DataParallel<double>(world, params, o); }),
                        r == 1 ? kConstructor + "options.bucket_bytes: must be positive, got 0"
                               : rank_1_differs(world, "options.bucket_bytes",
                                                std::to_string(std::size_t{25} << 20), "0")));
    }
    SECTION("root") {
        hd::DataParallelOptions o;
        if (r == 1) o.root = 1;
        REQUIRE(all_say(world, message_of([&] { hd::DataParallel<double>(world, params, o); }),
                        rank_1_differs(world, "options.root", "0", "1")));
    }
    SECTION("root that is no rank, on one rank") {
        hd::DataParallelOptions o;
        if (r == 1) o.root = n;
        REQUIRE(all_say(
            world, message_of([&] { hd::DataParallel<double>(world, params, o); }),
            r == 1 ? kConstructor + "options.root: must be a rank in [0, " + size + "), got " + size
                   : rank_1_differs(world, "options.root", "0", size)));
    }
    SECTION("scalar type") {
        const std::string got =
            r == 1 ? message_of([&] { hd::DataParallel<float>(world, net_float.parameters()); })
                   : message_of([&] { hd::DataParallel<double>(world, params); });
        REQUIRE(all_say(world, got, rank_1_differs(world, "scalar type", "double", "float")));
    }
    SECTION("parameter count") {
        std::vector<Parameter<double>> mine = params;
        if (r == 1) mine.pop_back();
        REQUIRE(all_say(world, message_of([&] { hd::DataParallel<double>(world, mine); }),
                        rank_1_differs(world, "parameters: count", std::to_string(params.size()),
                                       std::to_string(params.size() - 1))));
    }
    SECTION("parameter name") {
        std::vector<Parameter<double>> mine = params;
        if (r == 1) mine[0].name = "renamed";
        const std::string shape = mine[0].value.shape().str();
        REQUIRE(all_say(world, message_of([&] { hd::DataParallel<double>(world, mine); }),
                        rank_1_differs(world, "parameters[0]: name or shape",
                                       "'" + params[0].name + "' " + shape, "'renamed' " + shape)));
    }
    SECTION("parameter shape, same element count") {
        // A [24, 8] weight seen as [8, 24]: the scalar total agrees, the layout does not.
        std::vector<Parameter<double>> mine = params;
        const Shape s = mine[0].value.shape();
        const Shape t{s[1], s[0]};
        if (r == 1) mine[0].value = mine[0].value.reshape(t);
        REQUIRE(all_say(world, message_of([&] { hd::DataParallel<double>(world, mine); }),
                        rank_1_differs(world, "parameters[0]: name or shape",
                                       "'" + params[0].name + "' " + s.str(),
                                       "'" + params[0].name + "' " + t.str())));
    }
    SECTION("a gradient that does not fit its value, on one rank") {
        std::vector<Parameter<double>> mine = params;
        Tensor<double> small(Shape{1});
        if (r == 1) mine[0].grad = small;
        REQUIRE(all_say(world, message_of([&] { hd::DataParallel<double>(world, mine); }),
                        r == 1 ? kConstructor + "parameters: '" + params[0].name +
                                     "': gradient of shape [1] for a value of shape " +
                                     params[0].value.shape().str()
                               : kConstructor + "rank 1 of " + size +
                                     " refused its arguments (options or parameters; its "
                                     "message says which)"));
    }
    // Every rank threw after the same collectives: the job goes on in step.
    Net<double> again(10 + static_cast<std::uint64_t>(r));
    hd::DataParallel<double> dp(world, again.parameters());
    REQUIRE(dp.identical());
}

TEST_CASE("seed_random_streams: dropout differs per rank, reproducibly", "[distributed]") {
    hd::Communicator world;
    Net<double> net(1, /*dropout=*/0.5), again(1, 0.5);
    hd::seed_random_streams(net, 42, world.rank());
    hd::seed_random_streams(again, 42, world.rank());
    REQUIRE(world.all(net.random_state() == again.random_state()));

    // The masks: one training forward of the same input on every rank.
    Generator g(5);
    const Tensor<double> x = Tensor<double>::randn(Shape{2, kLength, kFeatures}, g);
    const Tensor<double> y = net.layer.forward(x).output;
    const Tensor<double> y_again = again.layer.forward(x).output;
    bool same = true;
    for (Index i = 0; i < y.numel(); ++i) same = same && y.data()[i] == y_again.data()[i];
    REQUIRE(world.all(same));

    // Every pair of ranks differs: rank r's output hash against everybody's, via a gather.
    std::uint64_t h =
        hd::detail::fnv1a(y.data(), sizeof(double) * static_cast<std::size_t>(y.numel()));
    const std::vector<std::vector<std::uint64_t>> hashes = world.gather({h});
    int distinct = 1;
    if (world.rank() == 0)
        for (std::size_t r = 0; r < hashes.size(); ++r)
            for (std::size_t s = 0; s < r; ++s) distinct = distinct && hashes[r] != hashes[s];
    world.broadcast(&distinct, 1);
    REQUIRE(distinct == 1);

    REQUIRE_THROWS_MATCHES(hd::seed_random_streams(net, 42, -1), std::invalid_argument,
                           Message("headwise::distributed::seed_random_streams: rank: must be "
                                   "non-negative, got -1"));
}

TEST_CASE("distributed::save_checkpoint: the root writes, with every rank's random state",
          "[distributed]") {
    hd::Communicator world;
    Net<float> net(1, 0.1);
    hd::seed_random_streams(net, 7, world.rank());
    AdamW<float> opt(net.parameters());
    hd::DataParallel<float> dp(world, net.parameters());

    // One file name for the job: the root's process id.
    int id = static_cast<int>(::getpid());
    world.broadcast(&id, 1);
    const std::string path = (std::filesystem::temp_directory_path() /
                              ("headwise_dp_" + std::to_string(id) + ".safetensors"))
                                 .string();
    int made = 0;
    hd::save_checkpoint(world, path, net.random_state(), [&] {
        ++made;
        io::Checkpoint<float> c;
        c.model = net.state_dict();
        c.optimiser = opt.state_dict();
        c.step = 3;
        return c;
    });
    REQUIRE(made == (world.rank() == 0 ? 1 : 0));  // only the root builds and writes it

    const io::Checkpoint<float> c = io::load_checkpoint<float>(path);  // every rank reads it
    world.barrier();  // all have read it before the root removes it
    if (world.rank() == 0) std::remove(path.c_str());
    REQUIRE(c.step == 3);
    REQUIRE(world.all(hd::rank_random_state(c, world.rank()) == net.random_state()));
    REQUIRE_THROWS_MATCHES(hd::rank_random_state(c, world.size()), std::runtime_error,
                           Message("headwise::distributed::rank_random_state: the checkpoint has "
                                   "no random state for rank " +
                                   std::to_string(world.size()) + " (it has ranks: " +
                                   (world.size() == 1   ? std::string("0")
                                    : world.size() == 2 ? std::string("0, 1")
                                                        : std::string("0, 1, 2")) +
                                   ")"));

    // A save that fails on the root fails on every rank, with the root's reason.
    const std::string bad = path + ".missing/dir/file.safetensors";
    auto save_bad = [&] {
        hd::save_checkpoint(world, bad, net.random_state(), [&] {
            io::Checkpoint<float> k;
            k.model = net.state_dict();
            return k;
        });
    };
    REQUIRE_THROWS_AS(save_bad(), std::runtime_error);
    REQUIRE_THROWS_WITH(save_bad(),
                        StartsWith("headwise::distributed::save_checkpoint: rank 0 could not "
                                   "save " +
                                   bad + ": "));
}

int main(int argc, char** argv) {
    hd::Environment environment(argc, argv);
    const int failed = Catch::Session().run(argc, argv);
    // The job fails when any rank's tests failed.
    int worst = failed;
    MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return worst;
}
