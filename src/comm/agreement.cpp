#include "drtrain/comm/agreement.hpp"

#include <climits>
#include <vector>

#include "drtrain/comm/mpi_check.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::comm {

void raise_if_any(const Comm& comm, const std::optional<std::string>& local_error) {
  int first_failing = local_error ? comm.rank() : INT_MAX;
  DRT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first_failing, 1, MPI_INT, MPI_MIN, comm.get()));
  if (first_failing == INT_MAX) return;
  int length = comm.rank() == first_failing ? static_cast<int>(local_error->size()) : 0;
  DRT_MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT, first_failing, comm.get()));
  std::vector<char> text(static_cast<std::size_t>(length));
  if (comm.rank() == first_failing) text.assign(local_error->begin(), local_error->end());
  DRT_MPI_CHECK(MPI_Bcast(text.data(), length, MPI_CHAR, first_failing, comm.get()));
  std::string message(text.begin(), text.end());
  if (comm.size() > 1) message = str("(seen on rank ", first_failing, ") ", message);
  throw ConfigError(message);
}

void require_same(const Comm& comm, std::uint64_t fingerprint_value, const std::string& what) {
  std::uint64_t range[2] = {fingerprint_value, ~fingerprint_value};  // min and ~max in one call
  DRT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, range, 2, MPI_UINT64_T, MPI_MIN, comm.get()));
  if (range[0] != ~range[1])
    throw ConfigError(str("ranks disagree on ", what,
                          ": start every rank with the same command "
                          "line, configuration file and data"));
}

std::string broadcast_text(const Comm& comm, int root, std::string text) {
  std::int64_t size = static_cast<std::int64_t>(text.size());
  DRT_MPI_CHECK(MPI_Bcast(&size, 1, MPI_INT64_T, root, comm.get()));
  text.resize(static_cast<std::size_t>(size));
  DRT_MPI_CHECK(MPI_Bcast(text.data(), static_cast<int>(size), MPI_CHAR, root, comm.get()));
  return text;
}

std::uint64_t fingerprint(const std::string& text) {
  std::uint64_t hash = 1469598103934665603ULL;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ULL;
  }
  return hash;
}

}  // namespace drt::comm
