// MemoryEstimate (internal): the memory each role of a job will take, worked out before anything
// large is allocated, from the model, the data set's shape and the layout. `drtrain --check`
// prints it; a training run compares each node's sum with the node's memory and refuses, with the
// figures and what to change, a job that cannot fit (a batch far too large used to be accepted
// and then OOM-killed minutes later).
//
// It counts the big parts, each from its real size: the data set held in memory, the loader's
// batches, every tower's parameters, gradients and activations (a network built for one sample
// and scaled by the batch: its buffers are per sample), the worker's exchange buffers, and each
// PS's windows, optimizer state and background-checkpoint snapshot. It leaves out the program
// Each role's sum starts from what the process holds already (the program, a worker's data set).
// Activations are measured: networks of the model for 1 and 3 samples (each after a training step
// where that is cheap, for the buffers oneDNN keeps) give the bytes per sample; on the CNN recipe
// the estimate came within 6% of the workers' peak RSS at 1,000 and 3,000 samples per worker.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "drtrain/nn/model_spec.hpp"
#include "drtrain/train/train_config.hpp"

namespace drt::train {

struct MemoryEstimate {
  struct Part {
    std::string what;
    double bytes = 0.0;
  };
  std::vector<Part> worker, ps;  // the parts of one worker (the chief's share of the data) and of the largest PS
  bool towers_on_gpu = false;    // the towers' parameters and activations are in GPU memory, not counted here
  double resident = 0.0;         // this process's resident memory when estimated (part of both roles' sums)

  double worker_bytes() const;
  double ps_bytes() const;
  // "worker 1.2 GiB (activations 1.0 GiB, ...)": the total and its parts, largest first.
  static std::string describe(const std::vector<Part>& parts);
};

// The job's shape as far as memory goes.
struct MemoryInputs {
  const TrainConfig* config = nullptr;
  const nn::ModelSpec* spec = nullptr;
  std::int64_t train_count = 0, test_count = 0;  // samples; test_count 0: no evaluation
  std::size_t sample_floats = 0;                 // one sample's values (C x H x W, or T tokens)
  int targets = 1;                               // labels per sample (T for token windows)
  int num_ps = 1, num_workers = 1;
  std::size_t largest_shard = 0;  // floats of the largest PS shard
  bool towers_on_gpu = false;
};

MemoryEstimate estimate_memory(const MemoryInputs& in);

// This process's resident memory now (VmRSS), bytes.
double resident_bytes();

// The memory this node has available now, bytes: MemAvailable (/proc/meminfo), or less where
// the cgroup's limit (memory.max, cgroup v2: Slurm's --mem) leaves less; 0 when unknown. What a
// job may use there is this plus what its ranks on the node hold already.
double node_available_bytes();

// This machine's host name (gethostname), for messages about its memory.
std::string host_name();

// Throws ConfigError when `ranks_bytes` (the sum of the estimates of the ranks on one node)
// exceeds `node_bytes`: the figures, per role, and what to change.
void refuse_if_too_large(double ranks_bytes, double node_bytes, const MemoryEstimate& e, int workers_here, int ps_here,
                         const std::string& node_name);

}  // namespace drt::train
