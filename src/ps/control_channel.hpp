// ControlChannel (internal): the control window's int64 words (see shard_window.hpp), written
// with MPI_Accumulate (MPI_REPLACE to set a word, MPI_SUM to count) and read with
// MPI_Get_accumulate(MPI_NO_OP), so every access is atomic with respect to the others. No
// MPI_Fetch_and_op or MPI_Compare_and_swap: Open MPI 4.1's osc/rdma over btl/vader crashes
// (SIGSEGV in mca_btl_vader_emu_acswap) on one whose target is the calling process, which a PS
// locking its own words would be. It keeps one MPI_Win_lock_all
// epoch open for its lifetime; every call completes (MPI_Win_flush) before it returns.
#pragma once

#include <cstdint>
#include <vector>

#include "drtrain/comm/window.hpp"
#include "drtrain/ps/shard_window.hpp"

namespace drt::ps {

class ControlChannel {
 public:
  explicit ControlChannel(const ShardWindow& window);

  // One change to a word: MPI_REPLACE sets it to `value`, MPI_SUM adds `value`.
  struct Update {
    MPI_Aint word;
    MPI_Op op;
    std::int64_t value;
  };
  // Applies `updates` to PS `ps`'s words, in one flush (the order among them is not defined).
  void update(int ps, const std::vector<Update>& updates);
  // Sets each of `words` of PS `ps` to `value`.
  void write(int ps, const std::vector<MPI_Aint>& words, std::int64_t value);
  void write(int ps, MPI_Aint word, std::int64_t value) { update(ps, {{word, MPI_REPLACE, value}}); }
  void add(int ps, MPI_Aint word, std::int64_t value) { update(ps, {{word, MPI_SUM, value}}); }
  // Sets consecutive words of PS `ps`, from `first` on, to `values` (one flush).
  void write_run(int ps, MPI_Aint first, const std::vector<std::int64_t>& values);
  // Reads `count` consecutive words starting at `word` of PS `ps` into `out`.
  void read(int ps, MPI_Aint word, int count, std::int64_t* out);
  // For diagnoses, never blocks for long: reads one word of each PS in `ps_list` (request-based,
  // MPI_Rget_accumulate, all at once) and waits at most `timeout_s` for the answers. Returns,
  // per PS, whether its word arrived; a PS that does not answer is dead or stopped, or its node
  // or the network to it is down (a blocking read of it would never return: its flush waits for
  // the target). The buffers and requests of reads that did not complete are kept for the rest of
  // the process (the job is about to end) instead of being freed under MPI's feet.
  std::vector<bool> probe(const std::vector<int>& ps_list, MPI_Aint word, double timeout_s, int max_nap_us);

 private:
  const ShardWindow& window_;
  comm::PassiveEpoch epoch_;
  std::vector<std::int64_t> values_;   // origins of the updates, alive until their flush
  std::vector<std::int64_t> ignored_;  // origin buffer of MPI_NO_OP reads (never read)
};

}  // namespace drt::ps
