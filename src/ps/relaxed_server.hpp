// RelaxedServer (internal): the PS side of the relaxed modes (--sync-mode backup:B, ssp:S,
// async) over --rma-sync passive; ParameterServer::serve_relaxed() decides what to apply, this
// class reads and writes the words that say it (shard_window.hpp). Workers always Put into
// their own slots; the PS
//   reads   departed | stop_request | stop_at | pushed[W][B] | base[W][B] in one atomic read per
//           poll,
//   locks   block b for writing around its apply: writing[b] = 1, then waits until readers[b]
//           is 0 (workers add 1 to readers[b] while their Gets of b are in flight, and back off
//           when they see writing[b] = 1),
//   publishes version[b] under that lock, and marks each push it consumed in taken[w][b].
// docs/ARCHITECTURE.md, "Relaxed synchronisation", gives the ordering argument.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "drtrain/core/error.hpp"
#include "passive_base.hpp"

namespace drt::ps {

class RelaxedServer : PassiveBase {
 public:
  RelaxedServer(const comm::Topology& topo, ShardWindow& window, const ExchangeConfig& config);

  // Collective with the workers' start(); then the PS publishes version 1 of every block.
  void start();

  // What the workers announced: words[0] = departed, words[1] = stop_request, words[2] =
  // stop_at (both meaningful on PS 0 only), then pushed[w][b] at 3 + w*B + b, then base[w][b]
  // at 3 + W*B + w*B + b.
  void read(std::vector<std::int64_t>& words);
  std::int64_t pushed(const std::vector<std::int64_t>& words, int worker, int block) const {
    return words[kTables + static_cast<std::size_t>(worker) * blocks_ + static_cast<std::size_t>(block)];
  }
  std::int64_t base(const std::vector<std::int64_t>& words, int worker, int block) const {
    return words[kTables + (static_cast<std::size_t>(workers_) + static_cast<std::size_t>(worker)) * blocks_ +
                 static_cast<std::size_t>(block)];
  }

  // Stopping on a signal (docs/ARCHITECTURE.md): any PS raises PS 0's request; PS 0 sets the
  // step of this run every worker stops before; the request as PS 0 holds it.
  void request_stop(int signal) { request_stop_at_ps0(signal); }
  void set_stop_at(std::int64_t step);
  std::int64_t stop_request() { return stop_words()[0]; }

  // Waits until no worker reads block `block`, then holds it for writing; the completed pushes
  // and Gets are ordered before the PS's loads and stores that follow (MPI_Win_sync). HangError
  // after --hang-timeout (a worker stopped in the middle of a Get).
  void lock(int block);
  // Orders the loads that follow after the workers' completed pushes (MPI_Win_sync) without
  // locking anything: for an apply into memory no worker reads (the look-ahead's master copy).
  void acquire_pushes() { sync_local_memory(); }
  // Publishes `version` of the block (its version word, under the lock), then unlocks it.
  void publish_and_unlock(int block, std::int64_t version);
  // The PS has consumed push `push` of `worker` for the block: the worker may write its slot again.
  void take(int worker, int block, std::int64_t push);
  // After every block of the shard was published: workers read them again.
  void publish_all(std::int64_t version);

  // A HangError naming what the PS waited for (no gradient from `missing` for `waited` seconds).
  HangError hang(const std::vector<int>& missing, double waited, const std::string& what);

 private:
  static constexpr std::size_t kTables = 3;  // read()'s words before pushed[W][B]
  std::size_t blocks_;
  int workers_;
};

}  // namespace drt::ps
