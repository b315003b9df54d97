#include "drtrain/core/error.hpp"

#include <cstring>

namespace drt {
namespace {
int g_process_rank = -1;  // written once, right after MPI_Init, before any thread starts

// strerror_r is the XSI one (returns 0 and fills the buffer) or the GNU one (returns the text),
// depending on the C library and _GNU_SOURCE; one of these takes its result.
[[maybe_unused]] const char* strerror_r_text(int rc, const char* buffer) { return rc == 0 ? buffer : "unknown error"; }
[[maybe_unused]] const char* strerror_r_text(const char* text, const char*) { return text; }
}  // namespace

int process_rank() { return g_process_rank; }
void set_process_rank(int rank) { g_process_rank = rank; }

std::string rank_tag() { return g_process_rank < 0 ? std::string("rank ?") : "rank " + std::to_string(g_process_rank); }

std::string errno_text(int err) {
  char buffer[256] = "";
  return strerror_r_text(strerror_r(err, buffer, sizeof buffer), buffer);
}

}  // namespace drt
