// Support for GoogleTest programs run under mpiexec (main: mpi_gtest_main.cpp).
// Verdicts: a test computes its check on every rank, then asserts on all_ranks(...): every rank
// gets the same result, so a failure on one rank never leaves the others waiting in a later
// collective.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <string>

namespace drt::testing {

// Collective over `comm`. Success iff `ok` on every rank; otherwise a failure naming the failing
// ranks and the detail given by the lowest of them.
::testing::AssertionResult all_ranks(bool ok, const std::string& detail = "", MPI_Comm comm = MPI_COMM_WORLD);

// The program's own arguments (those GoogleTest did not consume): "--flag value" lookup.
int int_argument(const std::string& flag, int fallback);
void set_program_arguments(int argc, char** argv);  // called by main

}  // namespace drt::testing
