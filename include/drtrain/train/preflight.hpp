// drtrain --check (--dry-run): the job worked out before it is queued, on one process without
// mpirun (or on rank 0 of the job's ranks): the resolved configuration, the data set's shape, the
// model built for it with its parameter count, the layout, the steps, and each role's memory
// (train/memory_estimate.hpp) against this machine's. Nothing is trained or written.
#pragma once

#include "drtrain/train/train_config.hpp"

namespace drt::train {

// Prints the check on world rank 0. Returns 0, or 1 when a node like this one could not hold the
// job (every rank on one node: the estimate says so); ConfigError for a configuration the job
// would refuse. world_size: the ranks the check runs on (1 without mpirun).
int run_check(const TrainConfig& config, int world_rank, int world_size);

}  // namespace drt::train
