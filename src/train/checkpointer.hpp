// Checkpointing on the PS side (internal): the state lives on the PS, so only they write and
// read checkpoints; workers learn from PS 0 where a resumed run starts.
//   prepare_resume()  collective over topo.world(), before any window exists: the PS choose
//                     the checkpoint (--resume: the newest valid one of the line of the run that
//                     wrote last, LATEST; corrupt files are skipped with a warning), check that
//                     it fits, read their parts into staging buffers; PS 0 names the run (a
//                     fresh run id, its line) and checks that it may write --checkpoint-dir
//                     without overwriting or mixing with another run's files; every rank learns
//                     the start step and the identity, or the same ConfigError.
//   Checkpointer      PS only: saves at --checkpoint-every steps / --checkpoint-secs seconds
//                     (PS 0 decides, the others follow) and at the end; atomic; retention.
//                     With --checkpoint-async (the default) a save during training snapshots
//                     the shard at the step boundary and writes it on a thread (SnapshotWriter)
//                     while the serve loop goes on; once every PS's part is on disk (a
//                     nonblocking all-reduce of the checksum terms, tested after each step)
//                     PS 0 writes the checksum and publishes the file. One save at a time: a
//                     save due while the previous one is still being written waits for it, at
//                     most half of --hang-timeout, then goes ahead or (PS 0 decides, with a
//                     warning) is skipped, so a slow disk never turns into a hang.
//                     PS 0 publishes (LATEST first, then the rename) and applies --keep to its
//                     run's line only. The directory was made and checked at start-up, on every
//                     PS, and locked by PS 0, with the verdict shared by every rank
//                     (check_outputs() in trainer.cpp).
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "drtrain/core/aligned_buffer.hpp"
#include "drtrain/io/checkpoint.hpp"
#include "drtrain/io/checkpoint_store.hpp"
#include "drtrain/io/checkpoint_writer.hpp"
#include "drtrain/ps/server.hpp"
#include "drtrain/train/snapshot_writer.hpp"
#include "job.hpp"

namespace drt::train {

struct ResumePoint {
  // This run's first step: the position in the data, in this run's batches (epoch *
  // steps_per_epoch + step_in_epoch). It equals `updates` unless --batch-size changed.
  std::int64_t step = 0;
  std::int64_t updates = 0;          // optimizer updates already applied (0: fresh start)
  int epoch = 0, step_in_epoch = 0;  // the data cursor of the next step, for this run's batch
  std::string file;                  // the checkpoint, empty for a fresh start
  // ssp/async resumed from a cut (docs/CHECKPOINT_FORMAT.md, "Resuming") with the same workers
  // and batch: each worker's first step (`step` is the least), and the gradients applied before
  // this run. Empty / -1 otherwise: every worker starts at `step`.
  std::vector<std::int64_t> worker_steps;
  std::int64_t gradients = -1;
  // This worker's first step.
  std::int64_t first_step_of(int worker) const {
    return worker_steps.empty() ? step : worker_steps[static_cast<std::size_t>(worker)];
  }
  // This run's identity (every rank; docs/CHECKPOINT_FORMAT.md, "Runs"): a fresh id, the run of
  // the checkpoint resumed (empty: from scratch or unknown), the line of runs (io::Lineage text),
  // and the line the chief prints about it.
  std::string run_id, parent_run_id, lineage, identity_note;
  // PS only: this PS's shard of the parameters and of each optimizer slot, read from the file.
  AlignedBuffer<float> params;
  std::vector<AlignedBuffer<float>> slots;
};

ResumePoint prepare_resume(const Job& job);

// Copies a resume point's staging buffers into a freshly constructed server.
void load_into(ResumePoint& resume, ps::ParameterServer& server);

class Checkpointer {
 public:
  // Collective over the PS (duplicates their communicator).
  Checkpointer(const Job& job, ps::ParameterServer& server, const ResumePoint& resume);
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Before the first step, after ParameterServer::start() (the chief's initial parameters are in):
  // with --checkpoint-start, a run from scratch saves that state (step 0, zero optimizer slots)
  // synchronously; a resumed run does nothing (its checkpoint is its start). Every PS.
  void save_start();
  // After every step (the server's hook; --sync-mode sync and backup): moves a save in the
  // background on, and starts one when the policy says so.
  void after_step(std::int64_t step);
  // --sync-mode ssp/async, which save at cuts (ps::Cut; docs/RELAXED_MODES.md, "Cuts"). due():
  // PS 0, after each round of W gradients: whether the policy asks for a checkpoint at this step
  // (--checkpoint-every, or PS 0's clock for --checkpoint-secs; no collective call). save_cut():
  // every PS at each checkpoint cut, in the same order: saves the state there.
  bool due(std::int64_t step);
  void save_cut(const ps::Cut& cut);
  // After the last step: waits for a save in the background, then writes the final checkpoint
  // (unless that state was just saved). `end`: ssp/async, where every worker stopped.
  void finish(std::int64_t step, const ps::Cut* end = nullptr);
  // Seconds the serve loop spent in saves (snapshots, file creation, waits, synchronous writes).
  double seconds_blocked() const { return blocked_s_; }

 private:
  // What a save records: this run's step counter there (the data cursor; at a cut the slowest
  // worker's), the optimizer updates in all runs (the file's name), and at a cut each worker's
  // step and the gradients applied.
  struct SavePoint {
    std::int64_t step = 0, updates = 0;
    std::vector<std::int64_t> worker_steps;
    std::int64_t gradients = -1;
    bool same_state(const SavePoint& o) const { return updates == o.updates && gradients == o.gradients; }
  };
  SavePoint at_step(std::int64_t step) const;
  SavePoint at_cut(const ps::Cut& cut) const;
  // The policy (--checkpoint-every, --checkpoint-secs) for step `step`; `by_time` PS 0's clock.
  bool policy_due(std::int64_t step, bool by_time) const;
  void save(const SavePoint& point);  // in the background or not (--checkpoint-async)

  // A save whose parts are being written in the background.
  struct InFlight {
    std::int64_t step = 0, updates = 0;
    std::string temp, final_path;
    double started = 0.0;            // now_seconds() at the step boundary
    double paused_s = 0.0;           // how long the serve loop stopped for the snapshot and the file
    bool reducing = false;           // this PS's part is written; the completion reduction is posted
    std::uint64_t sums[2] = {0, 0};  // this PS's checksum term and failed parts, then every PS's
    std::string error;               // this PS's write failure
    MPI_Request request = MPI_REQUEST_NULL;
  };

  void save_now(const SavePoint& point);          // synchronous (the final save, --checkpoint-async false)
  void start_async(const SavePoint& point);       // snapshot, file creation, writer thread
  bool advance();                                 // moves an in-flight save on; true when none is left
  bool settle_in_flight(const SavePoint& point);  // a save is due (every PS): wait for one in flight; go ahead?
  void wait_in_flight();                          // advance() until true (HangError after --hang-timeout)
  void complete_in_flight();                      // every PS's part is written: PS 0 completes, publishes
  void publish(const std::string& temp, const std::string& final_path, double bytes, const std::string& how);  // PS 0
  io::ShardView live_view() const;
  io::CheckpointMeta meta(const SavePoint& point) const;
  // Updates applied once step `step` (this run's counter) is done: names, metadata, --checkpoint-every.
  std::int64_t updates_at(std::int64_t step) const;

  const Job& job_;
  ps::ParameterServer& server_;
  comm::Comm done_comm_;  // the PS: completion reductions of background saves
  // The test fault checkpoint-slow (read by the writer thread; declared before writer_, which
  // joins that thread when destroyed): the last step after_step() saw, and whether the
  // checkpointer is finishing or going away (a held write must then go on).
  std::atomic<std::int64_t> reached_step_{0};
  std::atomic<bool> releasing_{false};
  SnapshotWriter writer_;
  std::unique_ptr<InFlight> in_flight_;  // unique_ptr: the request's address stays put (watched)
  std::string resumed_from_;
  SavePoint resumed_;  // the state the run resumed from (updates -1: a fresh start)
  std::string run_id_, parent_run_id_;
  io::Lineage line_;  // this run's line: what --keep may remove
  std::int64_t first_step_, first_update_;
  SavePoint last_saved_{-1, -1, {}, -1};
  double last_time_;
  double blocked_s_ = 0.0;
  int skipped_ = 0;  // PS 0: saves skipped because the previous one was still being written
  bool warned_wait_ = false;
  std::int64_t last_skipped_ = -1;  // the updates of the last save skipped
};

}  // namespace drt::train
