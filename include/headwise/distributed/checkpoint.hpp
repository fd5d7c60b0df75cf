// SPDX-License-Identifier: MIT
// Checkpoints of a data-parallel run: written once, by the root, with every rank's random state.
#pragma once

#include <cstdint>    // std::uint64_t
#include <exception>  // std::exception
#include <stdexcept>  // std::runtime_error, std::invalid_argument
#include <string>     // std::string, std::to_string
#include <utility>    // std::move
#include <vector>     // std::vector

#include "../io/checkpoint.hpp"
#include "communicator.hpp"

namespace headwise::distributed {

/// The io::Checkpoint::integers name under which save_checkpoint keeps rank r's random state:
/// "random.rank.<r>".
inline std::string rank_random_key(int rank) { return "random.rank." + std::to_string(rank); }

/// Saves a checkpoint of a data-parallel run to `path`, written by the root alone (the ranks'
/// parameters and optimiser states are identical, so one copy holds them; on several machines
/// the file is on the root's). Collective: every rank calls it with its module's
/// random_state() (the dropout streams, which differ per rank); the root gathers them, calls
/// make() for the rest (model, optimiser, step, data generators: called on the root only, so the
/// other ranks copy nothing), stores rank r's words under rank_random_key(r), and writes with
/// io::save_checkpoint (atomic: a failed save leaves the previous file as it was). The outcome is
/// broadcast: when the root's save throws, every rank throws std::runtime_error naming this
/// function and carrying the root's message, so that all ranks stop together.
template <class MakeCheckpoint>
void save_checkpoint(const Communicator& comm, const std::string& path,
                     const std::vector<std::uint64_t>& random_state, MakeCheckpoint&& make,
                     int root = 0);

/// The random state of this rank in a checkpoint save_checkpoint wrote. Throws
/// std::runtime_error naming the function and the file's ranks when the checkpoint has none for
/// `rank` (e.g. written by a job with fewer ranks).
template <class T>
const std::vector<std::uint64_t>& rank_random_state(const io::Checkpoint<T>& c, int rank);

// ---- definitions -----------------------------------------------------------------------------

template <class MakeCheckpoint>
void save_checkpoint(const Communicator& comm, const std::string& path,
                     const std::vector<std::uint64_t>& random_state, MakeCheckpoint&& make,
                     int root) {
    constexpr const char* fn = "headwise::distributed::save_checkpoint";
    std::vector<std::vector<std::uint64_t>> randoms = comm.gather(random_state, root);
    std::string error;
    if (comm.rank() == root) {
        try {
            auto c = make();
            for (std::size_t r = 0; r < randoms.size(); ++r)
                c.integers[rank_random_key(static_cast<int>(r))] = std::move(randoms[r]);
            io::save_checkpoint(path, c);
        } catch (const std::exception& e) {
            error = e.what();
            if (error.empty()) error = "an exception without a message";
        }
    }
    // The root's message (empty when it saved), length first.
    std::uint64_t length = error.size();
    comm.broadcast(&length, 1, root);
    error.resize(static_cast<std::size_t>(length));
    comm.broadcast(error.data(), error.size(), root);
    if (!error.empty())
        throw std::runtime_error(std::string(fn) + ": rank " + std::to_string(root) +
                                 " could not save " + path + ": " + error);
}

template <class T>
const std::vector<std::uint64_t>& rank_random_state(const io::Checkpoint<T>& c, int rank) {
    const auto it = c.integers.find(rank_random_key(rank));
    if (it != c.integers.end()) return it->second;
    std::string ranks;
    for (const auto& e : c.integers)
        if (e.first.compare(0, 12, "random.rank.") == 0)
            ranks += (ranks.empty() ? "" : ", ") + e.first.substr(12);
    throw std::runtime_error(
        "headwise::distributed::rank_random_state: the checkpoint has no "
        "random state for rank " +
        std::to_string(rank) + " (it has ranks: " + (ranks.empty() ? std::string("none") : ranks) +
        ")");
}

}  // namespace headwise::distributed
