// SPDX-License-Identifier: MIT
// MPI datatypes, error checks and the count limit behind Communicator's collectives.
#pragma once

// MPI's C interface only (communicator.hpp says why).
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <climits>      // INT_MAX
#include <cstddef>      // std::size_t
#include <cstdint>      // std::uint64_t
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::is_same_v

#include "../mpi_error.hpp"

namespace headwise::distributed::detail {

/// The MPI datatype of E.
template <class E>
MPI_Datatype mpi_type() {
    if constexpr (std::is_same_v<E, float>)
        return MPI_FLOAT;
    else if constexpr (std::is_same_v<E, double>)
        return MPI_DOUBLE;
    else if constexpr (std::is_same_v<E, int>)
        return MPI_INT;
    else if constexpr (std::is_same_v<E, std::uint64_t>)
        return MPI_UINT64_T;
    else if constexpr (std::is_same_v<E, char>)
        return MPI_CHAR;
    else
        static_assert(std::is_same_v<E, float>,
                      "headwise::distributed: elements must be float, double, int, "
                      "std::uint64_t or char");
}

/// Throws mpi_error unless `rc` is MPI_SUCCESS.
inline void check_mpi(int rc, const char* fn, const char* call) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) length = 0;
    throw mpi_error(std::string(fn) + ": " + call + " failed: " +
                    (length > 0 ? std::string(text, static_cast<std::size_t>(length))
                                : "MPI error " + std::to_string(rc)));
}

/// MPI counts are int: at most this many elements per call.
inline constexpr std::size_t kMaxCount = static_cast<std::size_t>(INT_MAX);

}  // namespace headwise::distributed::detail
