// SPDX-License-Identifier: MIT
// Environment (MPI_Init/MPI_Finalize) and run(): a program's ranks, where one failing ends all.
#pragma once

#include <cstdio>     // std::fprintf, std::fflush, stderr, stdout
#include <exception>  // std::exception
#include <string>     // std::string
#include <utility>    // std::forward

#include "communicator.hpp"  // and <mpi.h>, without MPI's C++ bindings
#include "detail/abort_job.hpp"

namespace headwise::distributed {

/// Initialises MPI for the program's lifetime (MPI_Init_thread with MPI_THREAD_FUNNELED: only
/// the main thread calls MPI, other threads may compute) and finalises it on destruction. When
/// MPI is initialised already (by the program or another library), it neither initialises nor
/// finalises. Throws mpi_error when MPI cannot be initialised.
class Environment {
public:
    Environment(int& argc, char**& argv);
    ~Environment();
    Environment(const Environment&) = delete;
    Environment& operator=(const Environment&) = delete;

private:
    bool owns_ = false;
};

/// Runs `body(world)` on every rank, world being MPI_COMM_WORLD, between MPI's initialisation
/// and finalisation, and returns what it returns. The failure policy: a rank whose body throws,
/// or returns a non-zero status, prints (for an exception) "headwise::distributed::run: rank R
/// of N: <what()>" on stderr and calls MPI_Abort, which ends every rank of the job at once with
/// a non-zero status (1 for an exception, else the status) instead of leaving the others
/// blocked in their next collective; the launcher (mpirun, srun) then exits non-zero. Use it as
///
///   int main(int argc, char** argv) {
///       return headwise::distributed::run(argc, argv, [&](Communicator& world) { ...; return 0;
///       });
///   }
template <class Body>
int run(int& argc, char**& argv, Body&& body);

// ---- definitions -----------------------------------------------------------------------------

inline Environment::Environment(int& argc, char**& argv) {
    constexpr const char* fn = "headwise::distributed::Environment::Environment";
    int initialised = 0;
    detail::check_mpi(MPI_Initialized(&initialised), fn, "MPI_Initialized");
    if (initialised) return;
    int provided = 0;
    detail::check_mpi(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided), fn,
                      "MPI_Init_thread");
    owns_ = true;
}

inline Environment::~Environment() {
    if (!owns_) return;
    int finalised = 0;
    MPI_Finalized(&finalised);
    if (!finalised) MPI_Finalize();
}

template <class Body>
int run(int& argc, char**& argv, Body&& body) {
    Environment environment(argc, argv);
    Communicator world;
    int status = 0;
    try {
        status = std::forward<Body>(body)(world);
    } catch (const std::exception& e) {
        detail::abort_job(world, e.what(), 1);
    } catch (...) {
        detail::abort_job(world, "an exception that is no std::exception", 1);
    }
    // A rank that finishes with a failure would otherwise wait in MPI_Finalize (a collective)
    // for ranks that may be waiting for it elsewhere.
    if (status != 0) detail::abort_job(world, "exit status " + std::to_string(status), status);
    return status;
}

}  // namespace headwise::distributed
