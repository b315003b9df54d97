// PassiveBase (internal): what both roles of --rma-sync passive share, under every --sync-mode:
// the lock_all epochs on the data windows, the control channel, the start sequence and the
// diagnoses that read the per-worker words. passive_protocol.cpp (workers, and the PS under
// --sync-mode sync) and relaxed_server.cpp (the PS under backup/ssp/async) build on it.
#pragma once

#include <algorithm>
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
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
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
    comm::set_hang_survey([this] { return unreachable_ps(); });  // for the waits outside the exchange
  }
  ~PassiveBase() { comm::set_hang_survey({}); }
  PassiveBase(const PassiveBase&) = delete;
  PassiveBase& operator=(const PassiveBase&) = delete;

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
    if (topo_.is_ps()) {
      sync_local_memory();
      // One read of every other PS, now: the paths a diagnosis (unreachable_ps) takes later must
      // exist before anything fails. Workers reach every PS in every step, but a PS never reads
      // another, and UCX over TCP connects at first use, blocking (UCX_TCP_CONN_NB=n, the
      // default): a first connect towards a lost node would stop this PS for minutes, so that
      // neither it nor the workers that read its words could name the culprit.
      std::int64_t word = 0;
      for (int p = 0; p < window_.num_ps(); ++p)
        if (p != topo_.role_index()) control_.read(p, window_.layout(p).version_word(0), 1, &word);
    }
  }

  // The relaxed modes' stop and cuts (docs/CHECKPOINTS.md, "Stopping on a signal"; docs/RELAXED_MODES.md, "Cuts"), PS
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
  // above (sign > 0) `pushes`, from the per-worker pushed words (shard_window.hpp).
  std::vector<std::string> workers_where(int ps, int block, std::int64_t pushes, int sign) {
    std::vector<std::string> names;
    for (int w = 0; w < topo_.num_workers(); ++w) {
      std::int64_t pushed = 0;
      control_.read(ps, window_.layout(ps).pushed_word(w, block), 1, &pushed);
      if (sign < 0 ? pushed < pushes : pushed > pushes) names.push_back(topo_.worker_name(w));
    }
    return names;
  }

  // How long a diagnosis waits for a PS to answer a read of one control word: a PS that is alive
  // answers within milliseconds (every wait of its gives MPI progress, and its applies every MiB).
  // Short against the hang watchdog's margin (0.2 x --hang-timeout + 5 s, train/trainer.cpp): a
  // rank stuck inside an MPI call must not end the job with its vaguer message while this rank
  // still probes.
  double probe_seconds() const { return std::min(10.0, 1.0 + 0.05 * config_.hang_timeout_s); }

  // The hang survey (comm::hang_survey): reads one control word of every PS but this rank, all at
  // once, bounded by probe_seconds(). Those that do not answer are the culprits to name, whoever
  // gave up first: a PS waiting for a worker's gradients, while that worker waits for its push to
  // a PS on a lost node to complete, must name that PS, not the worker. Returns the clause that
  // names them, or "" when every PS answers (or there is no other PS).
  std::string unreachable_ps() {
    std::vector<int> others;
    for (int p = 0; p < window_.num_ps(); ++p)
      if (!(topo_.is_ps() && p == topo_.role_index())) others.push_back(p);
    if (others.empty()) return {};
    const double bound = probe_seconds();
    const std::vector<bool> answered = control_.probe(others, window_.layout(0).version_word(0), bound,
                                                      config_.max_nap_us);  // word 0: on every PS
    std::vector<std::string> silent;
    for (std::size_t i = 0; i < others.size(); ++i)
      if (!answered[i]) silent.push_back(topo_.ps_name(others[i]));
    if (silent.empty()) return {};
    const bool one = silent.size() == 1;
    return str(join(silent, ", "), one ? " does" : " do", " not answer (a read of ", one ? "its" : "their",
               " control words did not complete within ", bound, " s): ",
               one ? "it is dead or stopped, or its node or the network to it is down"
                   : "they are dead or stopped, or their nodes or the network to them are down",
               "; the ranks waited for are probably waiting for ", one ? "it" : "them");
  }

  // The end of a hang message: the PS that do not answer, if any (unreachable_ps()), else
  // `otherwise` (e.g. "that worker is dead, stopped or stuck").
  std::string culprit(const std::string& otherwise) {
    const std::string found = unreachable_ps();
    return str(found.empty() ? otherwise : found, " (raise --hang-timeout if it is only slow)");
  }

  // "<rank>: <this rank's name> waited N s<what>; <culprit(otherwise)>" (N taken before the survey).
  HangError hang_error(double waited, const std::string& what, const std::string& otherwise) {
    const std::string head =
        str(rank_tag(), ": ", topo_.my_name(), " waited ", static_cast<int>(waited), " s", what, "; ");
    return HangError(head + culprit(otherwise));
  }

  const comm::Topology& topo_;
  ShardWindow& window_;
  ExchangeConfig config_;
  ControlChannel control_;
  std::vector<std::unique_ptr<comm::PassiveEpoch>> data_epochs_;
};

}  // namespace drt::ps
