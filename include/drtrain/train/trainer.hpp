// run_training: a whole drtrain job, called on every rank with the same configuration
// (collective over MPI_COMM_WORLD). Splits the ranks into PS and workers, loads the data on the
// workers, builds the model and the exchange, trains, evaluates after every epoch and reports
// through the chief (worker 0): the resolved configuration, progress lines, --metrics JSON lines
// and a final summary line. Returns the process exit status.
#pragma once

#include <cstdint>
#include <vector>

#include "drtrain/train/train_config.hpp"

namespace drt::train {

// What a run leaves behind for its caller (tests, tools).
struct TrainOutputs {
  std::vector<float> final_params;  // workers: the flat parameters after the last step
  double test_accuracy = 0.0;       // workers: the last evaluation
  double test_loss = 0.0;
  std::int64_t steps = 0;  // the step counter at the end (total steps unless stopped)
  int stop_signal = 0;     // the stop signal that ended the run early, 0 if none
  bool chief = false;      // this rank is the chief (worker 0), the one that prints the report
};

// Returns the exit status: 0, or kStoppedExitStatus (core/stop_signals.hpp) on every rank when a
// stop signal ended the run early (after the PS saved a checkpoint, with --checkpoint-dir).
int run_training(const TrainConfig& config, TrainOutputs* outputs = nullptr);

}  // namespace drt::train
