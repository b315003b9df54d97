#include "drtrain/core/error.hpp"

namespace drt {
namespace {
int g_process_rank = -1;  // written once, right after MPI_Init, before any thread starts
}

int process_rank() { return g_process_rank; }
void set_process_rank(int rank) { g_process_rank = rank; }

std::string rank_tag() {
  return g_process_rank < 0 ? std::string("rank ?") : "rank " + std::to_string(g_process_rank);
}

}  // namespace drt
