#include "drtrain/data/channel_stats.hpp"

#include <cmath>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::data {

ChannelStats::ChannelStats(int channels)
    : channels_(channels),
      histogram_(static_cast<std::size_t>(channels) * 256, 0),
      float_(static_cast<std::size_t>(channels)) {
  DRT_ASSERT(channels >= 1, str("ChannelStats needs at least one channel, got ", channels));
}

void ChannelStats::add(const std::uint8_t* samples, std::int64_t count, std::size_t plane, Layout layout) {
  const auto c_count = static_cast<std::size_t>(channels_);
  const std::size_t sample = c_count * plane;
  for (std::int64_t s = 0; s < count; ++s) {
    const std::uint8_t* p = samples + static_cast<std::size_t>(s) * sample;
    if (layout == Layout::kNCHW) {
      for (std::size_t c = 0; c < c_count; ++c) {
        std::int64_t* h = histogram_.data() + c * 256;
        for (std::size_t i = 0; i < plane; ++i) ++h[p[c * plane + i]];
      }
    } else {
      for (std::size_t i = 0; i < plane; ++i)
        for (std::size_t c = 0; c < c_count; ++c) ++histogram_[c * 256 + p[i * c_count + c]];
    }
  }
  values_ += count * static_cast<std::int64_t>(plane);
}

void ChannelStats::add(const float* samples, std::int64_t count, std::size_t plane, Layout layout) {
  if (count <= 0) return;
  const auto c_count = static_cast<std::size_t>(channels_);
  const std::size_t sample = c_count * plane;
  for (std::size_t c = 0; c < c_count; ++c) {
    // Two passes over this piece, then Chan's merge into the running moments.
    auto at = [&](std::int64_t s, std::size_t i) {
      const float* p = samples + static_cast<std::size_t>(s) * sample;
      return static_cast<double>(layout == Layout::kNCHW ? p[c * plane + i] : p[i * c_count + c]);
    };
    double sum = 0;
    for (std::int64_t s = 0; s < count; ++s)
      for (std::size_t i = 0; i < plane; ++i) sum += at(s, i);
    const double n = static_cast<double>(count) * static_cast<double>(plane);
    const double mean = sum / n;
    double m2 = 0;
    for (std::int64_t s = 0; s < count; ++s)
      for (std::size_t i = 0; i < plane; ++i) m2 += (at(s, i) - mean) * (at(s, i) - mean);
    Moments& m = float_[c];
    const double total = m.n + n, delta = mean - m.mean;
    m.m2 += m2 + delta * delta * m.n * n / total;
    m.mean += delta * n / total;
    m.n = total;
  }
  values_ += count * static_cast<std::int64_t>(plane);
}

std::vector<ChannelStats::Moments> ChannelStats::moments() const {
  std::vector<Moments> out = float_;
  for (std::size_t c = 0; c < out.size(); ++c) {
    const std::int64_t* h = histogram_.data() + c * 256;
    double n = 0, sum = 0;
    for (int v = 0; v < 256; ++v) {
      n += static_cast<double>(h[v]);
      sum += static_cast<double>(h[v]) * (static_cast<float>(v) / 255.0f);
    }
    if (n == 0) continue;  // float pixels (or none)
    const double mean = sum / n;
    double m2 = 0;
    for (int v = 0; v < 256; ++v) {
      const double d = static_cast<double>(static_cast<float>(v) / 255.0f) - mean;
      m2 += static_cast<double>(h[v]) * d * d;
    }
    out[c] = {n, mean, m2};
  }
  return out;
}

std::vector<float> ChannelStats::mean() const {
  std::vector<float> out;
  for (const Moments& m : moments()) out.push_back(static_cast<float>(m.mean));
  return out;
}

std::vector<float> ChannelStats::stddev() const {
  std::vector<float> out;
  for (const Moments& m : moments()) out.push_back(m.n > 0 ? static_cast<float>(std::sqrt(m.m2 / m.n)) : 0.0f);
  return out;
}

}  // namespace drt::data
