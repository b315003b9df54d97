// Reporter (internal): the chief's output. Progress and information lines go to stdout,
// records to the --metrics file as JSON lines; every other rank's reporter is silent.
#pragma once

#include <cstdio>
#include <string>

#include "drtrain/core/json_line.hpp"

namespace drt::train {

class Reporter {
 public:
  Reporter(bool active, const std::string& metrics_path);
  ~Reporter();
  Reporter(const Reporter&) = delete;
  Reporter& operator=(const Reporter&) = delete;

  bool active() const { return active_; }
  void line(const std::string& text);  // stdout, flushed
  void record(const JsonLine& json);   // metrics file, flushed
  void summary(const JsonLine& json);  // stdout and metrics file

 private:
  bool active_;
  std::FILE* metrics_ = nullptr;
};

}  // namespace drt::train
