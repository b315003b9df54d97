// Helpers of the CPU tests that check float32 code against float64 references written from the
// definitions (test_layers.cpp, test_backend_ops.cpp): random data, the normwise comparison
// |actual_i - expected_i| <= tol * max_j |expected_j| (an entry near zero is judged against the
// scale of its tensor; NaN anywhere fails), central finite differences, and host <-> backend
// copies.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "drtrain/backend/backend.hpp"

namespace drt::float64_checks {

using Vec = std::vector<double>;
using FVec = std::vector<float>;

inline FVec normal_floats(std::size_t n, std::uint64_t seed, double stddev = 1.0, double mean = 0.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> dist(mean, stddev);
  FVec v(n);
  for (float& x : v) x = static_cast<float>(dist(rng));
  return v;
}

inline Vec to_double(const FVec& v) { return Vec(v.begin(), v.end()); }

inline double max_abs(const Vec& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

inline double dot(const Vec& a, const Vec& b) {
  double s = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

template <typename T>
testing::AssertionResult all_close(const std::vector<T>& actual, const Vec& expected, double tol) {
  if (actual.size() != expected.size())
    return testing::AssertionFailure() << "size " << actual.size() << " != expected " << expected.size();
  const double scale = max_abs(expected), allowed = tol * scale;
  std::size_t bad = 0, worst = 0;
  double worst_err = -1.0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double err = std::abs(static_cast<double>(actual[i]) - expected[i]);
    if (!(err <= allowed)) ++bad;
    if (!(err <= worst_err)) worst_err = err, worst = i;
  }
  if (bad == 0) return testing::AssertionSuccess();
  return testing::AssertionFailure() << bad << " of " << actual.size() << " entries differ by more than " << allowed
                                     << " (tol " << tol << " x scale " << scale << "); worst [" << worst
                                     << "]: " << actual[worst] << " vs " << expected[worst];
}

// d f / d value by a central difference with h = 1e-6 * max(1, |value|); f reads `value`,
// which is restored afterwards.
inline double central_difference(const std::function<double()>& f, double& value) {
  const double saved = value, h = 1e-6 * std::max(1.0, std::abs(saved));
  const double up = saved + h, down = saved - h;
  value = up;
  const double f_up = f();
  value = down;
  const double f_down = f();
  value = saved;
  return (f_up - f_down) / (up - down);
}

inline Vec finite_difference(const std::function<double()>& f, Vec& v) {
  Vec g(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) g[i] = central_difference(f, v[i]);
  return g;
}

inline backend::DeviceBuffer upload(backend::Backend& device, const FVec& host) {
  backend::DeviceBuffer buf = device.allocate_floats(host.size());
  if (!host.empty()) device.copy_from_host(buf.floats(), host.data(), host.size() * sizeof(float));
  return buf;
}

inline FVec download(backend::Backend& device, const float* data, std::size_t n) {
  FVec host(n);
  device.synchronize();
  if (n) device.copy_to_host(host.data(), data, n * sizeof(float));
  return host;
}

}  // namespace drt::float64_checks
