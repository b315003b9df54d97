// Float functions for the CPU's loops, written so that GCC vectorises a loop that calls them
// (no libm calls, no branches the vectoriser cannot turn into selects). The per-element rules of
// rules.hpp use libm's expf/tanhf, which GCC does not vectorise without -ffast-math; the CPU
// backend's softmax tiles (attention) and the tanh GELU use these instead. CPU only.
#pragma once

#include <cstdint>
#include <cstring>

namespace drt::kernels::cpu_math {

// exp(x) for x <= 0 (a softmax's arguments shifted by its maximum): x = n ln 2 + r with |r| <=
// ln 2 / 2, exp(r) by Cephes' degree-6 polynomial (relative error about 1e-7), 2^n built in the
// exponent bits. Below -87 (e^-87 ~ 1.6e-38) it returns 0.
inline float exp_nonpositive(float x) {
  const float clamped = x < -87.0f ? -87.0f : x;
  const float t = clamped * 1.44269504088896341f + 12582912.0f;  // round to nearest: 1.5 * 2^23
  const float n = t - 12582912.0f;
  float r = clamped - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) * (1 << 23);
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return x < -87.0f ? 0.0f : p * scale;
}

// tanh(u) = sign(u) (1 - e) / (1 + e), e = exp(-2 |u|): absolute error below 3e-7 (relative
// error grows near 0, where tanh(u) ~ u is small; the GELU adds it to 1).
inline float tanh_approx(float u) {
  const float a = u < 0.0f ? -u : u;
  const float e = exp_nonpositive(-2.0f * a);
  const float t = (1.0f - e) / (1.0f + e);
  return u < 0.0f ? -t : t;
}

// GELU, tanh approximation, and its gradient (rules.hpp gelu_tanh / gelu_tanh_grad) with
// tanh_approx.
inline float gelu_tanh(float x) {
  const float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanh_approx(u));
}
inline float gelu_tanh_grad(float x, float dy) {
  const float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
  const float t = tanh_approx(u);
  const float du = 0.79788456080286536f * (1.0f + 3.0f * 0.044715f * x * x);
  return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
}

}  // namespace drt::kernels::cpu_math
