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
  device.synchronize();  // `host` may be a temporary
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
  device.synchronize();  // `nan` goes away on return
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
  return ::testing::AssertionFailure() << "entry " << at << ": " << actual[at] << " vs " << expected[at] << " (error "
                                       << worst / scale << " of the scale " << scale << ", tolerance " << tol << ")";
}

// all_close, except that up to max_outliers entries may be off. For whole networks of ReLU and
// max pooling compared across devices: an activation within rounding error of zero, or two
// pooled values within rounding error of each other, may be decided differently by the two
// summation orders and then move one whole term of a gradient. A wrong index or a missing term
// moves far more entries than that; the single layers are compared strictly.
inline ::testing::AssertionResult mostly_close(const std::vector<float>& actual, const std::vector<float>& expected,
                                               double tol, std::size_t max_outliers) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << "sizes " << actual.size() << " vs " << expected.size();
  double scale = 1e-30;
  for (float e : expected) scale = std::max(scale, std::fabs(static_cast<double>(e)));
  std::size_t outliers = 0, first = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double d = std::fabs(static_cast<double>(actual[i]) - expected[i]);
    if (!(d <= tol * scale) && outliers++ == 0) first = i;
  }
  if (outliers <= max_outliers) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << outliers << " entries off by more than " << tol << " of the scale " << scale
                                       << " (at most " << max_outliers << " allowed); the first: entry " << first
                                       << ": " << actual[first] << " vs " << expected[first];
}

}  // namespace drt::testing_support
