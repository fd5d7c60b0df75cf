// SPDX-License-Identifier: MIT
// DistributedSampler (no MPI needed): equal shares, the same permutation on every rank,
// torch's padding, a new permutation per epoch, and the argument checks.
#include <headwise/distributed/sampler.hpp>

#include <algorithm>  // std::sort, std::count
#include <cstdint>    // std::uint64_t
#include <limits>     // std::numeric_limits
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string
#include <vector>     // std::vector

#include "support/catch.hpp"

namespace test_distributed_sampler {

using headwise::Index;
using headwise::distributed::DistributedSampler;

TEST_CASE("DistributedSampler: every rank gets an equal share, together they cover the dataset",
          "[distributed]") {
    const auto [size, world] = GENERATE(
        table<Index, int>({{12, 1}, {12, 2}, {12, 3}, {10, 4}, {7, 3}, {3, 5}, {1, 2}, {100, 7}}));
    const bool shuffle = GENERATE(true, false);
    CAPTURE(size, world, shuffle);
    std::vector<Index> all;
    const Index per_rank = (size + world - 1) / world;
    for (int r = 0; r < world; ++r) {
        DistributedSampler s(size, world, r, /*seed=*/5, shuffle);
        s.set_epoch(2);
        const std::vector<Index> mine = s.indices();
        REQUIRE(static_cast<Index>(mine.size()) == per_rank);
        REQUIRE(s.num_samples() == per_rank);
        REQUIRE(s.total_size() == per_rank * world);
        // Rank r takes every world-th entry of the shared order, from position r.
        const std::vector<Index> order = s.permutation();
        for (std::size_t i = 0; i < mine.size(); ++i)
            REQUIRE(mine[i] ==
                    order[static_cast<std::size_t>(r) + i * static_cast<std::size_t>(world)]);
        all.insert(all.end(), mine.begin(), mine.end());
    }
    // Every index at least once; the padding repeats the order's first total - size indices.
    for (Index i = 0; i < size; ++i) REQUIRE(std::count(all.begin(), all.end(), i) >= 1);
    std::vector<Index> sorted = all;
    std::sort(sorted.begin(), sorted.end());
    REQUIRE(sorted.front() == 0);
    REQUIRE(sorted.back() == size - 1);
    if (!shuffle) {
        // The identity, padded from its start: 0, 1, ..., size - 1, 0, 1, ...
        const std::vector<Index> order = DistributedSampler(size, world, 0, 5, false).permutation();
        for (std::size_t i = 0; i < order.size(); ++i)
            REQUIRE(order[i] == static_cast<Index>(i) % size);
    }
}

TEST_CASE("DistributedSampler: the permutation is a function of (seed, epoch)", "[distributed]") {
    DistributedSampler a(50, 2, 0, /*seed=*/9), b(50, 2, 1, /*seed=*/9), c(50, 2, 0, /*seed=*/10);
    a.set_epoch(3);
    b.set_epoch(3);
    c.set_epoch(3);
    REQUIRE(a.permutation() == b.permutation());  // every rank, the same order
    REQUIRE(a.permutation() != c.permutation());  // another seed, another order
    std::vector<Index> sorted = a.permutation();
    std::sort(sorted.begin(), sorted.end());
    for (Index i = 0; i < 50; ++i) REQUIRE(sorted[static_cast<std::size_t>(i)] == i);
    const std::vector<Index> epoch3 = a.indices();
    a.set_epoch(4);
    REQUIRE(a.indices() != epoch3);
    a.set_epoch(3);
    REQUIRE(a.indices() == epoch3);
    // Fixed values: the shuffle uses the library's own integers, not the standard library's
    // distributions, so these are the same with every compiler.
    REQUIRE(DistributedSampler(6, 1, 0, /*seed=*/0).permutation() ==
            std::vector<Index>{3, 2, 1, 5, 4, 0});
}

TEST_CASE("DistributedSampler: drop_last cuts to a multiple of the rank count", "[distributed]") {
    DistributedSampler s(10, 4, 3, /*seed=*/1, /*shuffle=*/true, /*drop_last=*/true);
    REQUIRE(s.num_samples() == 2);
    REQUIRE(s.total_size() == 8);
    REQUIRE(s.drop_last());
    REQUIRE(s.shuffle());
    REQUIRE_FALSE(DistributedSampler(10, 4, 3).drop_last());
    std::vector<Index> all;
    for (int r = 0; r < 4; ++r) {
        const std::vector<Index> mine = DistributedSampler(10, 4, r, 1, true, true).indices();
        all.insert(all.end(), mine.begin(), mine.end());
    }
    std::sort(all.begin(), all.end());
    REQUIRE(std::unique(all.begin(), all.end()) == all.end());  // no index twice
}

TEST_CASE("DistributedSampler: bad arguments throw, naming the constructor", "[distributed]") {
    const char* fn = "headwise::distributed::DistributedSampler::DistributedSampler: ";
    REQUIRE_THROWS_MATCHES(DistributedSampler(-1, 2, 0), std::invalid_argument,
                           Message(std::string(fn) + "size: must be non-negative, got -1"));
    REQUIRE_THROWS_MATCHES(DistributedSampler(10, 0, 0), std::invalid_argument,
                           Message(std::string(fn) + "world: must be positive, got 0"));
    REQUIRE_THROWS_MATCHES(DistributedSampler(10, 2, 2), std::invalid_argument,
                           Message(std::string(fn) + "rank: must be in [0, 2), got 2"));
    REQUIRE_THROWS_MATCHES(
        DistributedSampler(3, 4, 0, 0, true, true), std::invalid_argument,
        Message(std::string(fn) + "size: must be at least world = 4 with drop_last, got 3"));
    REQUIRE(DistributedSampler(0, 2, 1).indices().empty());
}

TEST_CASE("DistributedSampler: sizes near the largest Index, without overflow", "[distributed]") {
    const char* fn = "headwise::distributed::DistributedSampler::DistributedSampler: ";
    constexpr Index kMax = std::numeric_limits<Index>::max();
    // ceil(size / world) was (size + world - 1) / world: past the largest Index for these.
    const DistributedSampler exact(kMax - 1, 3, 2);  // 3 * 3074457345618258602 = kMax - 1
    REQUIRE(exact.num_samples() == 3074457345618258602);
    REQUIRE(exact.total_size() == kMax - 1);
    const DistributedSampler one(kMax, 1, 0);
    REQUIRE(one.num_samples() == kMax);
    REQUIRE(one.total_size() == kMax);
    const DistributedSampler dropped(kMax, 2, 1, 0, true, true);
    REQUIRE(dropped.num_samples() == kMax / 2);
    REQUIRE(dropped.total_size() == kMax - 1);
    // Padding kMax indices to a multiple of 2 or 3 would need more than the largest Index.
    REQUIRE_THROWS_MATCHES(
        DistributedSampler(kMax, 2, 0), std::invalid_argument,
        Message(std::string(fn) + "size: padded to a multiple of world = 2, must stay at most "
                                  "9223372036854775807, got 9223372036854775807"));
    REQUIRE_THROWS_MATCHES(
        DistributedSampler(kMax, 3, 0), std::invalid_argument,
        Message(std::string(fn) + "size: padded to a multiple of world = 3, must stay at most "
                                  "9223372036854775807, got 9223372036854775807"));
}

}  // namespace test_distributed_sampler
