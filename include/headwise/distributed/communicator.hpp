// SPDX-License-Identifier: MIT
// Communicator: the ranks of an MPI job and the few collectives data-parallel training needs.
#pragma once

// MPI's C interface only: the C++ bindings that Open MPI and MPICH still ship are deprecated
// (removed in MPI-3.0) and only add link dependencies and warnings.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <algorithm>    // std::min
#include <climits>      // INT_MAX
#include <cstddef>      // std::size_t
#include <cstdint>      // std::uint64_t
#include <cstdlib>      // std::abort
#include <stdexcept>    // std::runtime_error, std::invalid_argument
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::is_same_v
#include <vector>       // std::vector

#include "detail/mpi.hpp"
#include "mpi_error.hpp"

namespace headwise::distributed {

/// The processes of one MPI communicator (MPI_COMM_WORLD by default), with their rank and count,
/// and the collectives used for data parallelism: in-place sums and maxima, broadcasts from a
/// root, a gather of integer sequences, a barrier. Every collective must be called by every rank
/// of the communicator in the same order with the same counts (MPI's rule); a rank that stops
/// calling them (an exception, an early return) leaves the others waiting, which is why programs
/// run their ranks through distributed::run (environment.hpp), which aborts the whole job.
///
/// Counts are std::size_t; more than INT_MAX elements go in several MPI calls. Supported element
/// types: float, double, int, std::uint64_t, char.
/// A Communicator does not own the MPI communicator: copies are cheap and share it.
class Communicator {
public:
    /// MPI_COMM_WORLD. Throws std::runtime_error naming the function when MPI is not initialised
    /// (construct a distributed::Environment or call MPI_Init first) or already finalised.
    Communicator() : Communicator(MPI_COMM_WORLD) {}
    explicit Communicator(MPI_Comm comm);

    int rank() const noexcept { return rank_; }
    int size() const noexcept { return size_; }
    bool is_root(int root = 0) const noexcept { return rank_ == root; }
    MPI_Comm handle() const noexcept { return comm_; }

    /// data[i] = the sum over ranks of data[i], on every rank.
    template <class E>
    void sum(E* data, std::size_t n) const {
        allreduce(data, n, MPI_SUM, "headwise::distributed::Communicator::sum");
    }
    /// data[i] = the largest data[i] over ranks, on every rank.
    template <class E>
    void max(E* data, std::size_t n) const {
        allreduce(data, n, MPI_MAX, "headwise::distributed::Communicator::max");
    }
    /// The sums over ranks of `values` (e.g. a loss and a count of right answers), in one call.
    std::vector<double> sum(std::vector<double> values) const {
        sum(values.data(), values.size());
        return values;
    }
    /// True on every rank when `value` is true on every rank.
    bool all(bool value) const {
        int v = value ? 0 : 1;
        max(&v, 1);
        return v == 0;
    }

    /// Copies `root`'s data[0, n) to every rank's.
    template <class E>
    void broadcast(E* data, std::size_t n, int root = 0) const;

    /// On `root`: every rank's `words`, by rank (their lengths may differ). Elsewhere: empty.
    std::vector<std::vector<std::uint64_t>> gather(const std::vector<std::uint64_t>& words,
                                                   int root = 0) const;

    void barrier() const;

    /// Ends every process of the job (MPI_Abort) with `status`; for a rank that cannot continue.
    [[noreturn]] void abort(int status) const;

private:
    template <class E>
    void allreduce(E* data, std::size_t n, MPI_Op op, const char* fn) const;
    void check_root(const char* fn, int root) const;

    MPI_Comm comm_;
    int rank_ = 0;
    int size_ = 1;
};

// ---- definitions -----------------------------------------------------------------------------

inline Communicator::Communicator(MPI_Comm comm) : comm_(comm) {
    constexpr const char* fn = "headwise::distributed::Communicator::Communicator";
    int initialised = 0, finalised = 0;
    detail::check_mpi(MPI_Initialized(&initialised), fn, "MPI_Initialized");
    detail::check_mpi(MPI_Finalized(&finalised), fn, "MPI_Finalized");
    if (!initialised || finalised)
        throw std::runtime_error(std::string(fn) + ": MPI is " +
                                 (finalised ? "already finalised" : "not initialised") +
                                 " (construct a headwise::distributed::Environment, or call "
                                 "MPI_Init, before any Communicator)");
    if (comm == MPI_COMM_NULL)
        throw std::invalid_argument(std::string(fn) +
                                    ": comm: must be a communicator, got "
                                    "MPI_COMM_NULL");
    detail::check_mpi(MPI_Comm_rank(comm_, &rank_), fn, "MPI_Comm_rank");
    detail::check_mpi(MPI_Comm_size(comm_, &size_), fn, "MPI_Comm_size");
}

inline void Communicator::check_root(const char* fn, int root) const {
    if (root < 0 || root >= size_)
        throw std::invalid_argument(std::string(fn) + ": root: must be a rank in [0, " +
                                    std::to_string(size_) + "), got " + std::to_string(root));
}

template <class E>
void Communicator::allreduce(E* data, std::size_t n, MPI_Op op, const char* fn) const {
    for (std::size_t done = 0; done < n;) {
        const std::size_t count = std::min(n - done, detail::kMaxCount);
        detail::check_mpi(MPI_Allreduce(MPI_IN_PLACE, data + done, static_cast<int>(count),
                                        detail::mpi_type<E>(), op, comm_),
                          fn, "MPI_Allreduce");
        done += count;
    }
}

template <class E>
void Communicator::broadcast(E* data, std::size_t n, int root) const {
    constexpr const char* fn = "headwise::distributed::Communicator::broadcast";
    check_root(fn, root);
    for (std::size_t done = 0; done < n;) {
        const std::size_t count = std::min(n - done, detail::kMaxCount);
        detail::check_mpi(
            MPI_Bcast(data + done, static_cast<int>(count), detail::mpi_type<E>(), root, comm_), fn,
            "MPI_Bcast");
        done += count;
    }
}

inline std::vector<std::vector<std::uint64_t>> Communicator::gather(
    const std::vector<std::uint64_t>& words, int root) const {
    constexpr const char* fn = "headwise::distributed::Communicator::gather";
    check_root(fn, root);
    if (words.size() > detail::kMaxCount)
        throw std::invalid_argument(std::string(fn) + ": words: at most " +
                                    std::to_string(detail::kMaxCount) + " per rank, got " +
                                    std::to_string(words.size()));
    const int count = static_cast<int>(words.size());
    std::vector<int> counts(rank_ == root ? static_cast<std::size_t>(size_) : 0);
    detail::check_mpi(MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, root, comm_), fn,
                      "MPI_Gather");
    std::vector<int> offsets(counts.size());
    std::size_t total = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) {
        if (total + static_cast<std::size_t>(counts[r]) > detail::kMaxCount)
            throw std::invalid_argument(std::string(fn) + ": words: at most " +
                                        std::to_string(detail::kMaxCount) +
                                        " over all ranks, got more");
        offsets[r] = static_cast<int>(total);
        total += static_cast<std::size_t>(counts[r]);
    }
    std::vector<std::uint64_t> all(total);
    detail::check_mpi(MPI_Gatherv(words.data(), count, MPI_UINT64_T, all.data(), counts.data(),
                                  offsets.data(), MPI_UINT64_T, root, comm_),
                      fn, "MPI_Gatherv");
    std::vector<std::vector<std::uint64_t>> out(counts.size());
    for (std::size_t r = 0; r < counts.size(); ++r)
        out[r].assign(all.begin() + offsets[r], all.begin() + offsets[r] + counts[r]);
    return out;
}

inline void Communicator::barrier() const {
    detail::check_mpi(MPI_Barrier(comm_), "headwise::distributed::Communicator::barrier",
                      "MPI_Barrier");
}

[[noreturn]] inline void Communicator::abort(int status) const {
    MPI_Abort(comm_, status);
    // MPI_Abort does not return on a working implementation; should it, leave anyway.
    std::abort();
}

}  // namespace headwise::distributed
