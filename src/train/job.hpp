// Job (internal): what every rank knows about a run once it is set up, and the two halves of a
// run (the PS side in trainer.cpp, the worker loop in worker_loop.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "drtrain/comm/topology.hpp"
#include "drtrain/data/preprocess.hpp"
#include "drtrain/data/sample_source.hpp"
#include "drtrain/nn/model_spec.hpp"
#include "drtrain/optim/optimizer.hpp"
#include "drtrain/ps/shard_plan.hpp"
#include "drtrain/train/device_plan.hpp"
#include "drtrain/train/timeline.hpp"
#include "drtrain/train/train_config.hpp"

namespace drt::io {
class DirectoryLock;
}

namespace drt::train {

class Reporter;
struct ResumePoint;
class StopVote;

struct Job {
  const TrainConfig& config;
  const comm::Topology& topo;
  nn::ModelSpec spec;
  ps::ShardPlan plan;
  optim::OptimizerConfig optimizer;  // with the schedule's total steps resolved
  int train_count = 0;
  int test_count = 0;
  std::string data_identity{};  // the training data, as checkpoints record it (io::ResumeMatch)
  int steps_per_epoch = 0;
  std::int64_t total_steps = 0;
  int blas_threads = 1;
  DevicePlan devices{};          // this rank's (PS: cpu)
  Timeline* timeline = nullptr;  // never null once the run starts (disabled without --timeline)
  // PS 0 with --checkpoint-dir: its lock of the directory, held for the whole job (check_outputs).
  std::shared_ptr<const io::DirectoryLock> checkpoint_lock{};
};

// A worker's data: the two splits (test may be null: no evaluation) and what the loader does to
// the samples. PS ranks hold none.
struct WorkerData {
  std::unique_ptr<data::SampleSource> train, test;
  data::Augmentation augment;
  data::Normalization normalize;
};

// The data set a worker trains on, opened as --dataset, --data-file, --test-file, --test-samples,
// --augment and --normalize say; ConfigError for anything wrong with them (trainer.cpp).
WorkerData open_worker_data(const TrainConfig& c);

// One sample's shape as the model sees it: C x H x W images, or a token window of T = width ids
// (a sequence of T positions of one value each).
nn::TensorShape sample_shape(int channels, int height, int width, bool tokens);

// What a rank measured, gathered at the end for the summary.
struct RankReport {
  double wall_s = 0.0;        // from the start of training to the end
  double cpu_s = 0.0;         // process CPU time over the same span
  double busy_s = 0.0;        // PS: applying and publishing; worker: compute + exchange
  double data_wait_s = 0.0;   // worker: waiting for the data loader
  double peak_rss_mib = 0.0;  // the process's peak resident memory (getrusage), set at the end
  double test_accuracy = 0.0, test_loss = 0.0, samples_per_s = 0.0;  // chief only
  double test_samples = 0.0;  // chief: samples of the last evaluation (0: none, e.g. --eval false)
  std::int64_t steps = 0;     // the step counter at the end: total_steps, or fewer when stopped
  int stop_signal = 0;        // the signal that stopped the run early, 0 if none
  // --sync-mode backup/ssp/async (what the mode did; zero under sync):
  std::int64_t skipped_steps = 0;     // worker: steps skipped to catch up (backup)
  std::int64_t max_lead = 0;          // worker: most steps ahead of the slowest worker (ssp)
  std::int64_t samples_computed = 0;  // worker: samples of the steps it trained
  double dropped_steps = 0.0;         // PS: late gradients dropped, in steps' worth (backup)
  std::int64_t staleness_max = 0;     // PS: block updates between a pull and its gradient's apply
  double staleness_sum = 0.0;         //   (ssp, async)
  std::int64_t staleness_count = 0;
  double lookahead = 0.0;  // PS: the updates it looked ahead at the end (--lookahead)
};

// Every rank, once its part of the run is done and before the exchange's windows are freed: a
// barrier that waits as long as any peer makes progress (comm/liveness.hpp) -- a worker that
// finished first for the others, every worker for the PS's final checkpoint -- so that no rank
// waits in MPI_Win_free, which cannot time out and beats no watchdog.
void finish_together(const Job& job);

// The worker's side of the run, on its data; training starts at the resume point (step 0 for a
// fresh start) and ends early when `vote` says so. When final_params is not null it receives the
// parameters after the last step.
RankReport run_worker(const Job& job, WorkerData& data, Reporter& reporter, const ResumePoint& resume, StopVote& vote,
                      std::vector<float>* final_params);

}  // namespace drt::train
