// SPDX-License-Identifier: MIT
// DistributedSampler: each rank's share of a dataset's indices, the same permutation on every rank.
#pragma once

#include <cstddef>    // std::size_t
#include <cstdint>    // std::uint64_t
#include <limits>     // std::numeric_limits
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string, std::to_string
#include <utility>    // std::swap
#include <vector>     // std::vector

#include "../config.hpp"
#include "../random.hpp"

namespace headwise::distributed {

/// torch.utils.data.DistributedSampler's rule, without MPI (the rank and the rank count are
/// numbers): the indices 0 .. size - 1 are permuted from (seed, epoch), the same permutation on
/// every rank, padded by repeating its first indices until their count is a multiple of the
/// rank count (or cut down to one, with drop_last), and rank r takes every world-th index from
/// position r. Every rank then has num_samples() indices, the ranks' shares are disjoint apart
/// from the padding, and together they cover every index. Without shuffle the permutation is the
/// identity. The permutation is a Fisher-Yates shuffle of a headwise::Generator seeded with
/// seed + epoch, with the library's own uniform integers, so the shares are the same with every
/// standard library and on every machine of a job.
///
///   DistributedSampler sampler(dataset_size, world.size(), world.rank(), /*seed=*/0);
///   for (int epoch = 0; epoch < epochs; ++epoch) {
///       sampler.set_epoch(epoch);
///       for (Index i : sampler.indices()) ...
///   }
class DistributedSampler {
public:
    /// Throws std::invalid_argument naming this constructor for size < 0, world < 1, a rank
    /// outside [0, world), drop_last with fewer indices than ranks, or (without drop_last) a
    /// padded total_size() that an Index cannot hold.
    DistributedSampler(Index size, int world, int rank, std::uint64_t seed = 0, bool shuffle = true,
                       bool drop_last = false);

    /// Which permutation indices() gives: one per epoch, as torch's set_epoch.
    void set_epoch(std::uint64_t epoch) noexcept { epoch_ = epoch; }
    std::uint64_t epoch() const noexcept { return epoch_; }

    /// This rank's indices for the current epoch, num_samples() of them.
    std::vector<Index> indices() const;
    /// The global order of the current epoch (before sharding), total_size() long.
    std::vector<Index> permutation() const;

    /// Indices per rank: ceil(size / world), or floor(size / world) with drop_last.
    Index num_samples() const noexcept { return num_samples_; }
    /// num_samples() * world.
    Index total_size() const noexcept { return num_samples_ * world_; }
    int world() const noexcept { return world_; }
    int rank() const noexcept { return rank_; }
    bool shuffle() const noexcept { return shuffle_; }
    /// Whether the tail that does not fill a shard on every rank is dropped (else padded by
    /// repeating the first indices).
    bool drop_last() const noexcept { return drop_last_; }

private:
    Index size_;
    int world_;
    int rank_;
    std::uint64_t seed_;
    bool shuffle_;
    bool drop_last_;
    std::uint64_t epoch_ = 0;
    Index num_samples_;
};

// ---- definitions -----------------------------------------------------------------------------

inline DistributedSampler::DistributedSampler(Index size, int world, int rank, std::uint64_t seed,
                                              bool shuffle, bool drop_last)
    : size_(size),
      world_(world),
      rank_(rank),
      seed_(seed),
      shuffle_(shuffle),
      drop_last_(drop_last),
      num_samples_(0) {
    const std::string fn = "headwise::distributed::DistributedSampler::DistributedSampler";
    if (size < 0)
        throw std::invalid_argument(fn + ": size: must be non-negative, got " +
                                    std::to_string(size));
    if (world < 1)
        throw std::invalid_argument(fn + ": world: must be positive, got " + std::to_string(world));
    if (rank < 0 || rank >= world)
        throw std::invalid_argument(fn + ": rank: must be in [0, " + std::to_string(world) +
                                    "), got " + std::to_string(rank));
    if (drop_last && size < world)
        throw std::invalid_argument(fn +
                                    ": size: must be at least world = " + std::to_string(world) +
                                    " with drop_last, got " + std::to_string(size));
    // ceil(size / world) without forming size + world - 1, and the padded total checked before
    // it is formed: both overflow an Index for sizes near its largest value.
    const Index samples = size / world + (!drop_last && size % world != 0 ? 1 : 0);
    if (samples > std::numeric_limits<Index>::max() / world)
        throw std::invalid_argument(
            fn + ": size: padded to a multiple of world = " + std::to_string(world) +
            ", must stay at most " + std::to_string(std::numeric_limits<Index>::max()) + ", got " +
            std::to_string(size));
    num_samples_ = samples;
}

inline std::vector<Index> DistributedSampler::permutation() const {
    std::vector<Index> order(static_cast<std::size_t>(size_));
    for (Index i = 0; i < size_; ++i) order[static_cast<std::size_t>(i)] = i;
    if (shuffle_) {
        Generator g(seed_ + epoch_);
        // Fisher-Yates: position i swaps with a uniform position in [0, i]. The integer is
        // floor(u (i + 1)) of a 53-bit uniform u, below i + 1 for every dataset a Index holds.
        for (Index i = size_ - 1; i > 0; --i) {
            const Index j = static_cast<Index>(uniform01(g) * static_cast<double>(i + 1));
            std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
        }
    }
    const Index total = total_size();
    if (total <= size_) {
        order.resize(static_cast<std::size_t>(total));
    } else {
        // Padding repeats the order from its start (as often as needed: size may be below world).
        for (Index i = size_; i < total; ++i)
            order.push_back(order[static_cast<std::size_t>((i - size_) % size_)]);
    }
    return order;
}

inline std::vector<Index> DistributedSampler::indices() const {
    std::vector<Index> mine;
    if (size_ == 0) return mine;
    const std::vector<Index> order = permutation();
    mine.reserve(static_cast<std::size_t>(num_samples_));
    for (Index k = 0; k < num_samples_; ++k)  // i = rank + k world < total_size(): no overflow
        mine.push_back(order[static_cast<std::size_t>(rank_ + k * world_)]);
    return mine;
}

}  // namespace headwise::distributed
