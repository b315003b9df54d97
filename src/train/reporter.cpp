#include "reporter.hpp"

#include <cerrno>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::train {

Reporter::Reporter(bool active, const std::string& metrics_path, bool append) : active_(active) {
  if (!active_ || metrics_path.empty()) return;
  metrics_ = std::fopen(metrics_path.c_str(), append ? "a" : "w");
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
  std::string text = json.str();
  if (!tags_.empty()) text.insert(1, text.size() > 2 ? tags_ : tags_.substr(0, tags_.size() - 1));
  std::fprintf(metrics_, "%s\n", text.c_str());
  std::fflush(metrics_);
}

void Reporter::set_segment(std::int64_t segment, const std::string& run_id) {
  JsonLine tags;
  tags.add("segment", segment).add("run", run_id);
  const std::string text = tags.str();
  tags_ = text.substr(1, text.size() - 2) + ",";
}

void Reporter::summary(const JsonLine& json) {
  line(json.str());
  record(json);
}

}  // namespace drt::train
