// Checkpointing on the PS side (internal): the state lives on the PS, so only they write and
// read checkpoints; workers learn from PS 0 where a resumed run starts.
//   prepare_resume()  collective over topo.world(), before any window exists: the PS choose
//                     the checkpoint (--resume: the newest valid one; corrupt files are skipped
//                     with a warning), check that it fits, read their parts into staging
//                     buffers; every rank learns the start step, or the same ConfigError.
//   Checkpointer      PS only: saves at --checkpoint-every steps / --checkpoint-secs seconds
//                     (PS 0 decides, the others follow) and at the end; atomic; retention.
//                     The directory was made and checked at start-up, on every PS, with the
//                     verdict shared by every rank (check_outputs() in trainer.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "drtrain/core/aligned_buffer.hpp"
#include "drtrain/io/checkpoint.hpp"
#include "drtrain/ps/server.hpp"
#include "job.hpp"

namespace drt::train {

struct ResumePoint {
  // This run's first step: the position in the data, in this run's batches (epoch *
  // steps_per_epoch + step_in_epoch). It equals `updates` unless --batch-size changed.
  std::int64_t step = 0;
  std::int64_t updates = 0;          // optimizer updates already applied (0: fresh start)
  int epoch = 0, step_in_epoch = 0;  // the data cursor of the next step, for this run's batch
  std::string file;                // the checkpoint, empty for a fresh start
  // PS only: this PS's shard of the parameters and of each optimizer slot, read from the file.
  AlignedBuffer<float> params;
  std::vector<AlignedBuffer<float>> slots;
};

ResumePoint prepare_resume(const Job& job);

// Copies a resume point's staging buffers into a freshly constructed server.
void load_into(ResumePoint& resume, ps::ParameterServer& server);

class Checkpointer {
 public:
  Checkpointer(const Job& job, ps::ParameterServer& server, const ResumePoint& resume);
  // After every step (the server's hook): saves when the policy says so.
  void after_step(std::int64_t step);
  // After the last step: the final checkpoint (unless that step was just saved).
  void finish(std::int64_t step);
  double seconds_saving() const { return seconds_; }

 private:
  void save(std::int64_t step);
  io::CheckpointMeta meta(std::int64_t step) const;
  // Updates applied once step `step` (this run's counter) is done: names, metadata, --checkpoint-every.
  std::int64_t updates_at(std::int64_t step) const;

  const Job& job_;
  ps::ParameterServer& server_;
  std::string resumed_from_;
  std::int64_t first_step_, first_update_;
  std::int64_t last_saved_ = -1;
  double last_time_;
  double seconds_ = 0.0;
};

}  // namespace drt::train
