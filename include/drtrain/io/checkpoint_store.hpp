// A directory of checkpoints: file names, atomic publication, retention and the choice of the
// file to resume from.
//   <dir>/ckpt-00001200.h5        a complete checkpoint after 1200 steps
//   <dir>/.ckpt-00001200.h5.tmp   being written (or left by a crash: never read, removed later)
// A checkpoint is written under the temporary name, flushed, fsync'ed and renamed (then the
// directory fsync'ed): a crash at any moment leaves the previous set of checkpoints intact and
// no file that looks complete but is not.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace drt::io {

// Names have at least 8 digits (more from step 10^8 on); the directory is sorted by the number.
std::string checkpoint_path(const std::string& dir, std::int64_t step);
std::string temporary_path(const std::string& dir, std::int64_t step);

// The step of a checkpoint file name ("ckpt-00001200.h5": 1200; 8 to 18 digits), -1 for any
// other name (temporary files included).
std::int64_t step_of(const std::string& file_name);

// Creates `dir` if needed; ConfigError when it cannot or it is not a writable directory.
void prepare_checkpoint_dir(const std::string& dir);

// Checkpoint files in `dir` (ckpt-<step>.h5 only), newest (highest step) first.
std::vector<std::string> list_checkpoints(const std::string& dir);

// fsync of `temp`, rename to `final_path`, fsync of the directory. Error on failure.
void publish_checkpoint(const std::string& temp, const std::string& final_path);

// Deletes all but the `keep` newest checkpoints, and temporary files left by crashes.
// Returns the files removed.
std::vector<std::string> apply_retention(const std::string& dir, int keep);

}  // namespace drt::io
