// DRT_MPI_CHECK: every MPI call goes through it. A failure throws drt::Error naming the rank,
// the call, file:line, MPI's own message and what to do. Only useful with MPI_ERRORS_RETURN set
// on the communicator or window involved (Comm and Window set it).
#pragma once

#include <mpi.h>

#include <string>

namespace drt::comm {

// MPI's text for an error code, e.g. "MPI_ERR_RANK: invalid rank".
std::string mpi_error_string(int code);

// Throws drt::Error when rc != MPI_SUCCESS.
void check_mpi(int rc, const char* call, const char* file, int line);

}  // namespace drt::comm

#define DRT_MPI_CHECK(call) ::drt::comm::check_mpi((call), #call, __FILE__, __LINE__)
