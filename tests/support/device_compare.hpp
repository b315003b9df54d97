// Helpers of the GPU tests: random data, copies to and from any backend, and the normwise
// comparison of the layer tests (|a_i - b_i| <= tol * max_j |b_j|), which judges an entry near
// zero against the scale of its tensor.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "drtrain/backend/backend.hpp"

namespace drt::testing_support {

inline std::vector<float> random_floats(std::size_t n, std::uint64_t seed, float stddev = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline std::vector<std::int32_t> random_labels(std::size_t n, int classes, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> dist(0, classes - 1);
  std::vector<std::int32_t> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

template <typename T>
backend::DeviceBuffer upload(backend::Backend& device, const std::vector<T>& host) {
  backend::DeviceBuffer b = device.allocate(host.size() * sizeof(T));
  device.copy_from_host(b.floats(), host.data(), host.size() * sizeof(T));
  return b;
}

inline std::vector<float> download(backend::Backend& device, const float* data, std::size_t n) {
  std::vector<float> host(n);
  device.copy_to_host(host.data(), data, n * sizeof(float));
  return host;
}

// Fills n floats of device memory with NaN, so that elements an operation should write but does
// not are caught.
inline void poison(backend::Backend& device, float* data, std::size_t n) {
  const std::vector<float> nan(n, std::nanf(""));
  device.copy_from_host(data, nan.data(), n * sizeof(float));
}

inline ::testing::AssertionResult all_close(const std::vector<float>& actual, const std::vector<float>& expected,
                                            double tol) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << "sizes " << actual.size() << " vs " << expected.size();
  double scale = 0.0;
  for (float e : expected) scale = std::max(scale, std::fabs(static_cast<double>(e)));
  scale = std::max(scale, 1e-30);
  double worst = 0.0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double d = std::fabs(static_cast<double>(actual[i]) - expected[i]);
    if (!(d <= worst)) {  // NaN counts as worst
      worst = std::isnan(d) ? INFINITY : d;
      at = i;
    }
  }
  if (worst <= tol * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "entry " << at << ": " << actual[at] << " vs " << expected[at]
                                       << " (error " << worst / scale << " of the scale " << scale << ", tolerance "
                                       << tol << ")";
}

}  // namespace drt::testing_support
