// RelaxedServer (internal): the PS side of the relaxed modes (--sync-mode backup:B, ssp:S,
// async) over --rma-sync passive; ParameterServer::serve_relaxed() decides what to apply, this
// class reads and writes the words that say it (shard_window.hpp). Workers always Put into
// their own slots; the PS
//   reads   departed | stop_request | stop_at | the cut words | pushed[W][B] | base[W][B] in one
//           read per poll (each word atomically),
//   locks   block b for writing around its apply: writing[b] = 1, then waits until readers[b]
//           is 0 (workers add 1 to readers[b] while their Gets of b are in flight, and back off
//           when they see writing[b] = 1),
//   publishes version[b] under that lock, and marks each push it consumed in taken[w][b].
// docs/RELAXED_MODES.md, "Relaxed synchronisation", gives the ordering argument.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "drtrain/core/error.hpp"
#include "passive_base.hpp"

namespace drt::ps {

class RelaxedServer : PassiveBase {
 public:
  RelaxedServer(const comm::Topology& topo, ShardWindow& window, const ExchangeConfig& config);

  // Collective with the workers' start(); then the PS publishes version 1 of every block.
  // `first_pushes[w]`: the pushes worker w made before this run (ssp/async resumed from a cut,
  // where workers start at steps of their own: docs/RELAXED_MODES.md, "Cuts"; empty: none), which
  // the PS counts as announced and consumed.
  void start(const std::vector<std::int64_t>& first_pushes = {});

  // What the workers announced: words[0] = departed, words[1] = stop_request, words[2] =
  // stop_at, then the cut words (cut_request, cut_release, cut_ack[W], cut_pos[W]; all
  // but departed meaningful on PS 0 only), then pushed[w][b] at tables() + w*B + b, then
  // base[w][b] at tables() + W*B + w*B + b.
  void read(std::vector<std::int64_t>& words);
  std::size_t tables() const { return kCutWords + 2 * static_cast<std::size_t>(workers_); }
  std::int64_t pushed(const std::vector<std::int64_t>& words, int worker, int block) const {
    return words[tables() + static_cast<std::size_t>(worker) * blocks_ + static_cast<std::size_t>(block)];
  }
  std::int64_t base(const std::vector<std::int64_t>& words, int worker, int block) const {
    return words[tables() + (static_cast<std::size_t>(workers_) + static_cast<std::size_t>(worker)) * blocks_ +
                 static_cast<std::size_t>(block)];
  }

  // Cuts (ssp/async; docs/RELAXED_MODES.md, "Cuts"), as PS 0 holds them.
  struct CutWords {
    std::int64_t request = 0, release = 0;
    std::vector<std::int64_t> ack, pos;  // per worker
  };
  // PS 0: from a read() of its own words. The other PS: one read of PS 0's cut words, at most
  // once a millisecond while no cut newer than `handled` is known (the rest of the time from
  // the last read), so that their polls stay local.
  const CutWords& cuts(const std::vector<std::int64_t>& own_words, std::int64_t handled);
  // The value of cut_ack of a worker that has left.
  static constexpr std::int64_t kLeft = std::numeric_limits<std::int64_t>::max();
  // PS 0: asks the workers to stop at cut `number` (a checkpoint), and lets them go on after it.
  void request_cut(std::int64_t number);
  void release_cut(std::int64_t number);

  // Stopping on a signal (docs/CHECKPOINTS.md): any PS raises PS 0's request; PS 0 sets the
  // step of this run every worker stops before; the request as PS 0 holds it.
  void request_stop(int signal) { request_stop_at_ps0(signal); }
  void set_stop_at(std::int64_t step);
  std::int64_t stop_request() { return read_relaxed_words().stop_request; }

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
  // Sets this PS's control words from `word` on to `values` (MPI_REPLACE, flushed).
  void write_words(MPI_Aint word, const std::vector<std::int64_t>& values) { write_own_words(word, values); }
  // Reads `count` consecutive control words of PS `ps` from `word`.
  void read_words(int ps, MPI_Aint word, int count, std::int64_t* out) { control_.read(ps, word, count, out); }
  // After every block of the shard was published: workers read them again.
  void publish_all(std::int64_t version);

  // A HangError naming what the PS waited for (no gradient from `missing` for `waited` seconds).
  HangError hang(const std::vector<int>& missing, double waited, const std::string& what);

 private:
  // read()'s words before cut_ack: departed, stop_request, stop_at, cut_request, cut_release
  static constexpr std::size_t kCutWords = 5;
  std::size_t blocks_;
  int workers_;
  CutWords cuts_;
  double cuts_read_at_ = -1.0;
};

}  // namespace drt::ps
