// run_training: a whole drtrain job, called on every rank with the same configuration
// (collective over MPI_COMM_WORLD). Splits the ranks into PS and workers, loads the data on the
// workers, builds the model and the exchange, trains, evaluates after every epoch and reports
// through the chief (worker 0): the resolved configuration, progress lines, --metrics JSON lines
// and a final summary line. Returns the process exit status.
#pragma once

#include <vector>

#include "drtrain/train/train_config.hpp"

namespace drt::train {

// What a run leaves behind for its caller (tests, tools).
struct TrainOutputs {
  std::vector<float> final_params;  // workers: the flat parameters after the last step
  double test_accuracy = 0.0;       // workers: the last evaluation
  double test_loss = 0.0;
};

int run_training(const TrainConfig& config, TrainOutputs* outputs = nullptr);

}  // namespace drt::train
