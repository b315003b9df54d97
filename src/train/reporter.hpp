// Reporter (internal): the chief's output. Progress and information lines go to stdout,
// records to the --metrics file as JSON lines; every other rank's reporter is silent.
// A resumed run appends to the metrics file (a requeued job keeps the records of before its
// stop) and every record says which run segment wrote it: "segment" (0 for the run from scratch,
// one more per resume) and "run" (the run id), set once the resume point is known.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "drtrain/core/json_line.hpp"

namespace drt::train {

class Reporter {
 public:
  // append: keep the file's records (a resumed run) instead of starting it anew.
  Reporter(bool active, const std::string& metrics_path, bool append = false);
  ~Reporter();
  Reporter(const Reporter&) = delete;
  Reporter& operator=(const Reporter&) = delete;

  bool active() const { return active_; }
  void line(const std::string& text);  // stdout, flushed
  void record(const JsonLine& json);   // metrics file, flushed
  void summary(const JsonLine& json);  // stdout and metrics file
  // The fields every later record starts with: "segment":N,"run":"ID".
  void set_segment(std::int64_t segment, const std::string& run_id);

 private:
  bool active_;
  std::FILE* metrics_ = nullptr;
  std::string tags_;  // set_segment's fields, with a trailing comma
};

}  // namespace drt::train
