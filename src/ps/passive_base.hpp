// PassiveBase (internal): what both roles of --rma-sync passive share, under every --sync-mode:
// the lock_all epochs on the data windows, the control channel, the start sequence and the
// diagnoses that read the per-worker words. passive_protocol.cpp (workers, and the PS under
// --sync-mode sync) and relaxed_server.cpp (the PS under backup/ssp/async) build on it.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "drtrain/comm/mpi_check.hpp"
#include "drtrain/comm/poll.hpp"
#include "drtrain/comm/topology.hpp"
#include "drtrain/comm/window.hpp"
#include "drtrain/ps/exchange_config.hpp"
#include "drtrain/ps/shard_window.hpp"
#include "drtrain/ps/worker_exchange.hpp"
#include "control_channel.hpp"

namespace drt::ps {

class PassiveBase {
 protected:
  PassiveBase(const comm::Topology& topo, ShardWindow& window, const ExchangeConfig& config)
      : topo_(topo), window_(window), config_(config), control_(window) {
    for (int w = 0; w < window.num_data_windows(); ++w)
      data_epochs_.push_back(std::make_unique<comm::PassiveEpoch>(window.data_window(w)));
  }

  // PS stores (zeroing, restore) -> Win_sync -> barrier -> the chief's Puts -> flush -> barrier:
  // the barrier, not MPI_Win_allocate (which need not synchronise), orders the upload after the
  // zeroing.
  void start_sequence(const std::function<void()>& upload) {
    if (topo_.is_ps()) {
      sync_local_memory();
      DRT_MPI_CHECK(MPI_Win_sync(window_.control().get()));
    }
    comm::sleepy_barrier(topo_.world(), config_.hang_timeout_s, config_.max_nap_us, "every PS to prepare its windows");
    if (upload) {
      upload();
      DRT_MPI_CHECK(MPI_Win_flush_all(window_.data(0)));
    }
    comm::sleepy_barrier(topo_.world(), config_.hang_timeout_s, config_.max_nap_us,
                         "the initial parameters to reach every PS");
    if (topo_.is_ps()) sync_local_memory();
  }

  // The relaxed modes' stop and cuts (docs/ARCHITECTURE.md, "Stopping on a signal", "Cuts"), PS
  // 0's words: a rank that received stop signal `signal` raises the request to it (MPI_MAX);
  // read_relaxed_words() reads stop_request .. cut_release (four contiguous words) in one read.
  void request_stop_at_ps0(int signal) {
    control_.update(0, {{window_.layout(0).stop_request_word(), MPI_MAX, signal}});
  }
  RelaxedWords read_relaxed_words() {
    std::array<std::int64_t, 4> w{};
    control_.read(0, window_.layout(0).stop_request_word(), 4, w.data());
    return {w[0], w[1], w[2], w[3]};
  }

  // PS: sets its own control words from `word` on to `values` (MPI_REPLACE, one flush).
  void write_own_words(MPI_Aint word, const std::vector<std::int64_t>& values) {
    control_.write_run(topo_.role_index(), word, values);
  }

  // Orders this PS's loads and stores of window memory against the peers' RMA (unified model).
  void sync_local_memory() {
    for (int w = 0; w < window_.num_data_windows(); ++w) DRT_MPI_CHECK(MPI_Win_sync(window_.data(w)));
  }

  // The workers whose last announced push of block `block` of PS `ps` is below (sign < 0) or
  // above (sign > 0) `pushes`, from the per-worker words that only diagnoses read.
  std::vector<std::string> workers_where(int ps, int block, std::int64_t pushes, int sign) {
    std::vector<std::string> names;
    for (int w = 0; w < topo_.num_workers(); ++w) {
      std::int64_t pushed = 0;
      control_.read(ps, window_.layout(ps).pushed_word(w, block), 1, &pushed);
      if (sign < 0 ? pushed < pushes : pushed > pushes) names.push_back(topo_.worker_name(w));
    }
    return names;
  }

  const comm::Topology& topo_;
  ShardWindow& window_;
  ExchangeConfig config_;
  ControlChannel control_;
  std::vector<std::unique_ptr<comm::PassiveEpoch>> data_epochs_;
};

}  // namespace drt::ps
