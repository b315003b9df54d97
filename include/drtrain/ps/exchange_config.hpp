// ExchangeConfig: how workers and PS ranks synchronise a step over MPI RMA.
#pragma once

#include <cstddef>
#include <string>

namespace drt::ps {

enum class RmaSync {
  // MPI_Win_lock_all once; pushes are flushed, then each worker sets its arrival word on the
  // PS; the PS polls (napping, comm/poll.hpp) and publishes a version word that workers poll
  // before MPI_Get. Only the ranks that exchange data wait for each other; waits time out.
  kPassive,
  // MPI_Win_fence around the push, apply and pull epochs: three fences per step, collective
  // over all ranks; MPI's fence (a barrier) spins, and cannot time out.
  kFence,
};
RmaSync parse_rma_sync(const std::string& text);  // ConfigError lists the choices
std::string to_string(RmaSync sync);

struct ExchangeConfig {
  RmaSync sync = RmaSync::kPassive;
  // Each worker MPI_Puts its gradient into its own slot on the PS, and the PS sums the slots in
  // worker order: results do not depend on arrival order. Costs W x gradient memory per PS.
  bool deterministic = false;
  std::size_t chunk_bytes = std::size_t{4} << 20;  // largest single RMA operation
  double hang_timeout_s = 300.0;                   // passive waits give up after this
  int max_nap_us = 100;                            // longest sleep between polls

  void validate() const;  // ConfigError naming the flag
  std::string describe() const;
};

}  // namespace drt::ps
