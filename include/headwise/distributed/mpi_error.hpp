// SPDX-License-Identifier: MIT
// mpi_error: the exception headwise::distributed throws when an MPI call fails.
#pragma once

#include <stdexcept>  // std::runtime_error

namespace headwise::distributed {

/// An MPI call that returned an error (with an error handler that returns errors instead of
/// aborting, which MPI_COMM_WORLD's default does). `what()` names the headwise function, the MPI
/// call and MPI's own description of the error.
class mpi_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

}  // namespace headwise::distributed
