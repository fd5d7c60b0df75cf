// SPDX-License-Identifier: MIT
// Ending the whole MPI job from one rank, with the reason on standard error (distributed::run).
#pragma once

#include <cstdio>  // std::fprintf, std::fflush, stderr, stdout
#include <string>  // std::string

#include "../communicator.hpp"

namespace headwise::distributed::detail {

/// Prints why this rank stops and ends the job (Communicator::abort).
[[noreturn]] inline void abort_job(const Communicator& world, const std::string& why, int status) {
    std::fflush(stdout);
    std::fprintf(stderr,
                 "headwise::distributed::run: rank %d of %d: %s; aborting the job (MPI_Abort)\n",
                 world.rank(), world.size(), why.c_str());
    std::fflush(stderr);
    world.abort(status);
}

}  // namespace headwise::distributed::detail
