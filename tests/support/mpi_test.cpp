#include "support/mpi_test.hpp"

#include <vector>

namespace drt::testing {
namespace {
std::vector<std::string> g_arguments;
}

void set_program_arguments(int argc, char** argv) { g_arguments.assign(argv, argv + argc); }

int int_argument(const std::string& flag, int fallback) {
  for (std::size_t i = 0; i + 1 < g_arguments.size(); ++i)
    if (g_arguments[i] == flag) return std::stoi(g_arguments[i + 1]);
  return fallback;
}

::testing::AssertionResult all_ranks(bool ok, const std::string& detail, MPI_Comm comm) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  std::vector<int> oks(static_cast<std::size_t>(size));
  int mine = ok ? 1 : 0;
  MPI_Allgather(&mine, 1, MPI_INT, oks.data(), 1, MPI_INT, comm);
  std::string failing;
  int first = -1;
  for (int r = 0; r < size; ++r)
    if (!oks[static_cast<std::size_t>(r)]) {
      failing += (failing.empty() ? "" : " ") + std::to_string(r);
      if (first < 0) first = r;
    }
  if (first < 0) return ::testing::AssertionSuccess();
  int rank = 0, length = static_cast<int>(detail.size());
  MPI_Comm_rank(comm, &rank);
  MPI_Bcast(&length, 1, MPI_INT, first, comm);
  std::string text(static_cast<std::size_t>(length), ' ');
  if (rank == first) text = detail;
  MPI_Bcast(text.data(), length, MPI_CHAR, first, comm);
  return ::testing::AssertionFailure() << "failed on rank(s) [" << failing << "]; rank " << first << " says: " << text;
}

}  // namespace drt::testing
