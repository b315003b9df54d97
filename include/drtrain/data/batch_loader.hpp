// BatchLoader: turns this worker's samples of each step into float batches for its towers, on
// a background thread that prepares the next step while the current one trains (a queue of
// depth `depth`, default 2). Each step's samples of all the worker's towers are read from the
// SampleSource in one call (an HDF5 source sorts them and reads runs of chunks), then augmented
// (per sample, seeded by (seed, epoch, sample)) and normalised (preprocess.hpp). Steps run over
// consecutive epochs from (first_epoch, first_step) up to a total number of steps. Thread
// safety: next() from one consumer thread only.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "drtrain/data/epoch_plan.hpp"
#include "drtrain/data/preprocess.hpp"
#include "drtrain/data/sample_source.hpp"

namespace drt::data {

struct TowerBatch {
  int count = 0;                     // samples (may be 0 in an epoch's last step)
  int first = 0;                     // position of its first sample in the global batch
  std::vector<float> images;         // count x channels x rows x cols
  std::vector<std::int32_t> labels;  // count x targets (SourceInfo::targets: T for token windows)
};

struct WorkerBatch {
  int epoch = 0;
  int step_in_epoch = 0;  // 0-based
  int steps_in_epoch = 0;
  int global_count = 0;  // samples in the whole global batch
  std::vector<TowerBatch> towers;
};

struct LoaderConfig {
  int global_batch = 0;
  int workers = 1;
  int worker = 0;
  int towers = 1;
  std::uint64_t seed = 0;
  int first_epoch = 0;
  int first_step = 0;            // within first_epoch
  std::int64_t total_steps = 0;  // steps to deliver in all
  int depth = 2;
  Augmentation augment;
  Normalization normalize;
};

class BatchLoader {
 public:
  // `source` must outlive the loader, and only the loader may read it while the loader lives
  // (but see hdf5_source.hpp: HDF5 sources share a lock). Throws ConfigError for a configuration
  // EpochPlan rejects, worker outside [0, workers), first_step outside the epoch, total_steps < 0,
  // depth < 1, or augmentation or normalisation of token windows.
  BatchLoader(SampleSource& source, const LoaderConfig& config);
  ~BatchLoader();  // stops and joins the thread
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // The next step's batch; blocks until ready. Rethrows an exception of the producer thread
  // (after the batches it made before failing, and again on every later call).
  // Throws drt::Error after total_steps batches.
  WorkerBatch next();
  // Seconds next() spent waiting for the producer, summed since the last call.
  double take_wait_seconds();

 private:
  void produce();

  SampleSource& source_;
  LoaderConfig config_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<WorkerBatch> ready_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::int64_t delivered_ = 0;
  double wait_s_ = 0.0;
  std::thread thread_;  // last: starts after every other member exists
};

// Reads `samples` of `source` into a TowerBatch, normalised by `normalize` (no augmentation: what
// evaluation uses). Throws what the source's read() throws.
TowerBatch read_tower_batch(SampleSource& source, const std::vector<int>& samples, const Normalization& normalize = {});

}  // namespace drt::data
