#include "reporter.hpp"

#include <cerrno>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::train {

Reporter::Reporter(bool active, const std::string& metrics_path) : active_(active) {
  if (!active_ || metrics_path.empty()) return;
  metrics_ = std::fopen(metrics_path.c_str(), "w");
  if (!metrics_)
    throw Error(str(rank_tag(), ": --metrics ", metrics_path, ": cannot open for writing: ", errno_text(errno)));
}

Reporter::~Reporter() {
  if (metrics_) std::fclose(metrics_);
}

void Reporter::line(const std::string& text) {
  if (!active_) return;
  std::fprintf(stdout, "%s\n", text.c_str());
  std::fflush(stdout);
}

void Reporter::record(const JsonLine& json) {
  if (!metrics_) return;
  std::fprintf(metrics_, "%s\n", json.str().c_str());
  std::fflush(metrics_);
}

void Reporter::summary(const JsonLine& json) {
  line(json.str());
  record(json);
}

}  // namespace drt::train
