// Checkpointing on the PS side (internal): the state lives on the PS, so only they write and
// read checkpoints; workers learn from PS 0 where a resumed run starts.
//   prepare_resume()  collective over topo.world(), before any window exists: the PS choose
//                     the checkpoint (--resume: the newest valid one; corrupt files are skipped
//                     with a warning), check that it fits, read their parts into staging
//                     buffers; every rank learns the start step, or the same ConfigError.
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
//                     The directory was made and checked at start-up, on every PS, with the
//                     verdict shared by every rank (check_outputs() in trainer.cpp).
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "drtrain/core/aligned_buffer.hpp"
#include "drtrain/io/checkpoint.hpp"
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

  // After every step (the server's hook): moves a save in the background on, and starts one when
  // the policy says so.
  void after_step(std::int64_t step);
  // After the last step: waits for a save in the background, then writes the final checkpoint
  // (unless that step was just saved).
  void finish(std::int64_t step);
  // Seconds the serve loop spent in saves (snapshots, file creation, waits, synchronous writes).
  double seconds_blocked() const { return blocked_s_; }

 private:
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

  void save_now(std::int64_t step);          // synchronous (the final save, --checkpoint-async false)
  void start_async(std::int64_t step);       // snapshot, file creation, writer thread
  bool advance();                            // moves an in-flight save on; true when none is left
  bool settle_in_flight(std::int64_t step);  // a save is due (every PS): wait for one in flight; go ahead?
  void wait_in_flight();                     // advance() until true (HangError after --hang-timeout)
  void complete_in_flight();                 // every PS's part is written: PS 0 completes, publishes
  void publish(const std::string& temp, const std::string& final_path, double bytes, const std::string& how);  // PS 0
  io::ShardView live_view() const;
  io::CheckpointMeta meta(std::int64_t step) const;
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
  std::int64_t first_step_, first_update_;
  std::int64_t last_saved_ = -1;
  double last_time_;
  double blocked_s_ = 0.0;
  int skipped_ = 0;  // PS 0: saves skipped because the previous one was still being written
  bool warned_wait_ = false;
  std::int64_t last_skipped_ = -1;
};

}  // namespace drt::train
