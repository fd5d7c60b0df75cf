// SPDX-License-Identifier: MIT
// seed_random_streams: per-rank dropout streams of a module, a pure function of (seed, rank).
#pragma once

#include <cstdint>      // std::uint64_t
#include <stdexcept>    // std::invalid_argument
#include <string>       // std::to_string
#include <type_traits>  // std::is_same_v, std::decay_t

#include "../ops/dropout.hpp"
#include "../random.hpp"
#include "detail/module_walk.hpp"

namespace headwise::distributed {

/// Gives every random stream of `module` and its children (what Module::random_state() lists:
/// each Dropout's seed and mask count, each MultiheadAttention's generator) a new start derived
/// from (seed, rank) and the stream's position in that list. Data parallelism wants this: the
/// ranks hold copies of one model, whose dropout would otherwise draw the same masks on every
/// rank, correlating the shards' gradients. Rank r's masks are then the same in every run with
/// the same seed, and differ from every other rank's. The new state is what random_state()
/// gives afterwards, so checkpoints save and restore it as before. Throws std::invalid_argument
/// naming the function for a negative rank.
template <class Module>
void seed_random_streams(Module& module, std::uint64_t seed, int rank);

// ---- definitions -----------------------------------------------------------------------------

template <class Module>
void seed_random_streams(Module& module, std::uint64_t seed, int rank) {
    if (rank < 0)
        throw std::invalid_argument(
            "headwise::distributed::seed_random_streams: rank: must be non-negative, got " +
            std::to_string(rank));
    // Stream i of rank r starts from a key mixed from (seed, r, i): a SplitMix64 step of the
    // rank's key, itself one of the seed's (the hash dropout's masks use, ops::Dropout).
    const std::uint64_t rank_key =
        ops::Dropout::stream_seed(seed, static_cast<std::uint64_t>(rank));
    std::uint64_t i = 0;
    auto visit = [&](auto& stream) {
        const std::uint64_t key = ops::Dropout::stream_seed(rank_key, i++);
        if constexpr (std::is_same_v<std::decay_t<decltype(stream)>, Generator>)
            stream.seed(key);
        else
            stream = key;
    };
    detail::visit_random_streams(module, visit);
}

}  // namespace headwise::distributed
