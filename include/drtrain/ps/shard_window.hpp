// ShardWindow: the RMA windows of the exchange, over MPI_COMM_WORLD, and where every region
// lives in them. Each PS exposes its shard; workers expose nothing. Made collectively by
// ParameterServer and WorkerExchange (every rank constructs one of them at the same point).
//
// A PS shard of S elements is cut into blocks of at most E elements (E = the RMA chunk; one
// block of the whole shard under --rma-sync fence). A block is the unit of synchronisation: a
// worker signals each block it has pushed, the PS applies and publishes each block as soon as
// every worker has pushed it, and workers pull each block as soon as it is published, so the
// push, the apply and the pull of one step overlap.
//
// Windows (all allocated with MPI_Win_allocate, regions 64-byte aligned):
//   passive: params window      S floats (the master copy); --wire bf16: then S bf16 (the copy
//                               workers pull)
//            K gradient windows block b's sum lives in window b % K ("stripes", K = min(W, 8));
//                               per-worker slots (--deterministic, --wire bf16): K = 1 window
//                               with W slots of S elements (float32, or bf16 with --wire bf16)
//   fence:   one data window    params (and their bf16 copy), then the sum (or the W slots)
//   control window (both):      version[B] | arrivals[B] | departed | stop_request | stop_at
//                               | cut_request | cut_release | cut_ack[W] | cut_pos[W]
//                               | pushed[W][B] | base[W][B] | taken[W][B] | readers[B]
//                               | writing[B] | norm_sum | norm_steps | clipped_steps | norm_step
//                               (int64; from stop_request, the relaxed modes'; the last four,
//                               --grad-clip's)
// version[b]: the newest published version of block b (the PS writes it, MPI_REPLACE).
// arrivals[b]: how many pushes of block b have completed, summed over workers and steps
//   (each worker adds 1 with MPI_Accumulate(MPI_SUM) after flushing its gradient): all W pushes
//   of step t are in when arrivals[b] >= (t+1) W. The PS polls arrivals and departed only,
//   B+1 contiguous words, whatever W.
// departed: how many workers have left (MPI_SUM).
// stop_request, stop_at: --sync-mode backup/ssp/async, PS 0's only (docs/CHECKPOINTS.md,
//   "Stopping on a signal"): the largest stop signal any rank received (MPI_MAX), and the step
//   of this run every worker stops before, which PS 0 sets once it has seen the request (0: not
//   yet).
// cut_request, cut_release, cut_ack[w], cut_pos[w]: --sync-mode ssp/async, PS 0's only
//   (docs/RELAXED_MODES.md, "Cuts"): the number of the newest cut PS 0 asked for (a checkpoint),
//   the newest cut after which workers may go on; the newest cut worker w stopped at (INT64_MAX
//   once it has left) and the step it stopped (or left) before.
// pushed[w][b]: the last step worker w announced for block b (MPI_REPLACE, in the same flush as
//   its arrival): under sync read only to name the culprit when a wait times out; under the
//   relaxed modes it is what the PS applies by (a push newer than the last it took), and ssp's
//   bound and cuts read it (docs/RELAXED_MODES.md, "Relaxed synchronisation").
// base[w][b], taken[w][b], readers[b], writing[b]: --sync-mode backup/ssp/async
//   (docs/RELAXED_MODES.md, "Relaxed synchronisation"): the version of block b worker w computed
//   its last push from, the last push of worker w the PS has consumed, and block b's
//   reader/writer lock (workers reading it; 1 while the PS writes it).
// norm_sum, norm_steps, clipped_steps: --grad-clip, PS 0's only: the global norms of the steps'
//   mean gradients before clipping, summed (a double's bits, MPI_REPLACE), the steps they were
//   taken for, and those clipped; PS 0 writes them before it publishes the step's blocks, and the
//   chief reads them at its progress lines. norm_step: --grad-clip, every PS's: the steps (of this
//   run) whose share of the gradient norm the PS has taken and offered to the other PS; read
//   only to name the PS that holds the others up when a wait times out.
// All displacements are MPI_Aint (64-bit): B and W are ints, but W*B*8 bytes need not fit one.
// Why stripes and a separate control window: Open MPI's osc/sm runs every accumulate-family
// operation to one target of one window under one spin lock. W workers accumulating into one
// window would take turns (and spin while waiting); a PS polling its words in the data window
// would spin behind multi-megabyte accumulates.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "drtrain/comm/topology.hpp"
#include "drtrain/comm/window.hpp"
#include "drtrain/ps/exchange_config.hpp"
#include "drtrain/ps/shard_plan.hpp"

namespace drt::ps {

// A place in the exchange windows: which data window, and the byte displacement in the target's
// part of it.
struct WindowSpot {
  int window = 0;
  MPI_Aint disp = 0;
};

// The geometry of one PS's part of the windows. Pure arithmetic, the same on every rank.
class ShardLayout {
 public:
  // wire_bytes: bytes per element pushed and pulled (4: float32; 2: bf16, which needs slots).
  ShardLayout(std::size_t shard_size, std::size_t block_elems, int num_workers, int stripes, bool per_worker_slots,
              bool single_data_window, std::size_t wire_bytes = 4);

  std::size_t shard_size() const { return shard_size_; }
  int num_blocks() const { return num_blocks_; }  // at least 1 (an empty shard has one empty block)
  std::size_t block_begin(int b) const;
  std::size_t block_size(int b) const;
  int block_of(std::size_t element) const { return static_cast<int>(element / block_elems_); }

  // The float32 master parameters (the chief's upload, the PS's optimizer, checkpoints).
  WindowSpot params(std::size_t element) const;
  // What workers pull: the master itself, or its bf16 copy under --wire bf16.
  WindowSpot wire_params(std::size_t element) const;
  // Where worker w's gradient for shard element `element` goes (the shared sum unless slots),
  // in wire_bytes() per element.
  WindowSpot grad(int worker, std::size_t element) const;
  std::size_t wire_bytes() const { return wire_bytes_; }
  std::size_t data_window_bytes(int window) const;

  // Control words (byte displacements in the control window; see above).
  MPI_Aint version_word(int block) const { return word(block); }
  MPI_Aint arrivals_word(int block) const { return word(static_cast<MPI_Aint>(num_blocks_) + block); }
  MPI_Aint departed_word() const { return word(2 * static_cast<MPI_Aint>(num_blocks_)); }
  MPI_Aint stop_request_word() const { return word(2 * static_cast<MPI_Aint>(num_blocks_) + 1); }
  MPI_Aint stop_at_word() const { return word(2 * static_cast<MPI_Aint>(num_blocks_) + 2); }
  MPI_Aint cut_request_word() const { return word(2 * static_cast<MPI_Aint>(num_blocks_) + 3); }
  MPI_Aint cut_release_word() const { return word(2 * static_cast<MPI_Aint>(num_blocks_) + 4); }
  MPI_Aint cut_ack_word(int worker) const { return word(2 * static_cast<MPI_Aint>(num_blocks_) + 5 + worker); }
  MPI_Aint cut_pos_word(int worker) const {
    return word(2 * static_cast<MPI_Aint>(num_blocks_) + 5 + num_workers_ + worker);
  }
  MPI_Aint pushed_word(int worker, int block) const { return per_worker_word(0, worker, block); }
  // The relaxed modes' words (--sync-mode backup/ssp/async; zero and unused under sync).
  MPI_Aint base_word(int worker, int block) const { return per_worker_word(1, worker, block); }
  MPI_Aint taken_word(int worker, int block) const { return per_worker_word(2, worker, block); }
  MPI_Aint readers_word(int block) const { return per_worker_word(3, 0, block); }
  MPI_Aint writing_word(int block) const { return per_worker_word(3, 0, num_blocks_ + block); }
  // --grad-clip's words, k = 0 (norm_sum), 1 (norm_steps), 2 (clipped_steps), 3 (norm_step):
  // after the tables.
  MPI_Aint clip_word(int k) const { return word(static_cast<MPI_Aint>(words_before_clip()) + k); }
  static constexpr int kClipTotals = 3;  // the first three
  static constexpr int kNormStepWord = 3;
  static constexpr int kClipWords = 4;
  std::size_t control_words() const { return words_before_clip() + kClipWords; }

 private:
  // departed, stop_request, stop_at, cut_request, cut_release
  static constexpr std::size_t kSingleWords = 5;
  static MPI_Aint word(MPI_Aint index) { return 8 * index; }
  std::size_t words_before_clip() const {
    return static_cast<std::size_t>(num_blocks_) * (4 + 3 * static_cast<std::size_t>(num_workers_)) + kSingleWords +
           2 * static_cast<std::size_t>(num_workers_);
  }
  // Word (worker, block) of the table-th W x B table after cut_pos (0: pushed, 1: base, 2: taken;
  // 3: readers[B] then writing[B], as worker 0).
  MPI_Aint per_worker_word(int table, int worker, int block) const {
    const MPI_Aint blocks = num_blocks_,
                   tables_start = 2 * blocks + static_cast<MPI_Aint>(kSingleWords) + 2 * MPI_Aint{num_workers_};
    return word(tables_start + table * static_cast<MPI_Aint>(num_workers_) * blocks +
                static_cast<MPI_Aint>(worker) * blocks + block);
  }

  std::size_t shard_size_, block_elems_;
  int num_workers_, stripes_, num_blocks_;
  bool slots_, single_;
  std::size_t wire_bytes_;
  MPI_Aint copy_offset_;   // where the bf16 copy starts (after the master, in its window)
  MPI_Aint params_bytes_;  // the master and its copy
  MPI_Aint grads_offset_;  // single data window: where the gradients start
};

class ShardWindow {
 public:
  ShardWindow(const comm::Topology& topo, const ShardPlan& plan, const ExchangeConfig& config);

  const ShardLayout& layout(int ps) const { return layouts_[static_cast<std::size_t>(ps)]; }
  int target(int ps) const { return ps_ranks_[static_cast<std::size_t>(ps)]; }  // world rank
  int num_ps() const { return static_cast<int>(ps_ranks_.size()); }
  int num_data_windows() const { return static_cast<int>(data_.size()); }
  MPI_Win data(int window) const { return data_[static_cast<std::size_t>(window)].get(); }
  const comm::Window& data_window(int window) const { return data_[static_cast<std::size_t>(window)]; }
  const comm::Window& control() const { return control_; }

  // PS only: pointers into this PS's own memory.
  float* local(WindowSpot spot);
  std::uint16_t* local_bf16(WindowSpot spot) { return reinterpret_cast<std::uint16_t*>(local(spot)); }
  // PS only: sets every byte of this PS's windows to zero (local stores; the sync protocol
  // orders them before any peer's access, see SyncProtocol::start).
  void zero_local_memory();

 private:
  std::vector<ShardLayout> layouts_;
  std::vector<int> ps_ranks_;
  int my_ps_ = -1;
  std::vector<comm::Window> data_;
  comm::Window control_;
};

}  // namespace drt::ps
