// Per-element math shared by the CPU code and the CUDA kernels in kernels/: the ReLU, the
// softmax cross-entropy of one row, the optimizer update of one parameter, float32 -> bf16
// rounding. One definition, compiled for the host by g++ and for the device by nvcc, so the CPU
// backend, the PS optimizers and the GPU kernels compute the same formulas (they may differ in
// the last bits: nvcc contracts a*b+c into FMAs, and exp/log differ by an ulp).
//
// Plain C++ (no CUDA headers): DRT_HD marks a function for both compilers.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define DRT_HD __host__ __device__ __forceinline__
#else
#define DRT_HD inline
#endif

namespace drt::kernels {

DRT_HD float relu(float x) { return x > 0.0f ? x : 0.0f; }
DRT_HD float relu_grad(float y, float dy) { return y > 0.0f ? dy : 0.0f; }

// GELU, exact: x * Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2; d/dx = Phi(x) + x * phi(x).
DRT_HD float gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
DRT_HD float gelu_grad(float x, float dy) {
  const float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
  const float pdf = 0.39894228040143268f * expf(-0.5f * x * x);
  return dy * (cdf + x * pdf);
}
// GELU, tanh approximation (torch's approximate='tanh', GPT-2's): 0.5 x (1 + tanh(u)),
// u = sqrt(2 / pi) (x + 0.044715 x^3); d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) du/dx, t = tanh(u).
DRT_HD float gelu_tanh(float x) {
  const float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}
DRT_HD float gelu_tanh_grad(float x, float dy) {
  const float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
  const float t = tanhf(u);
  const float du = 0.79788456080286536f * (1.0f + 3.0f * 0.044715f * x * x);
  return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
}
// tanh and the logistic sigmoid, with derivatives from their outputs y.
DRT_HD float tanh_grad(float y, float dy) { return dy * (1.0f - y * y); }
DRT_HD float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
DRT_HD float sigmoid_grad(float y, float dy) { return dy * y * (1.0f - y); }

// splitmix64's finaliser: a bijective 64-bit mix (Steele et al. 2014).
DRT_HD std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
// Dropout's masks are a counter-based hash, not a generator's stream, so that each value's fate
// depends only on (seed, step, layer, global sample, element) and not on which tower draws it.
DRT_HD std::uint64_t dropout_key(std::uint64_t seed, std::int64_t step, int layer) {
  return mix64(mix64(seed ^ 0x6A09E667F3BCC908ull) ^ mix64(static_cast<std::uint64_t>(step) * 0x9E3779B97F4A7C15ull) ^
               static_cast<std::uint64_t>(layer) * 0xD1B54A32D192ED03ull);
}
// True when element `element` of global sample `sample` is kept: a uniform in [0, 1) from the
// hash's top 24 bits, kept when >= p.
DRT_HD bool dropout_keep(std::uint64_t key, std::int64_t sample, std::uint64_t element, float p) {
  const std::uint64_t h = mix64(key ^ mix64(static_cast<std::uint64_t>(sample) * 0x9E3779B97F4A7C15ull + element));
  return static_cast<float>(h >> 40) * 0x1.0p-24f >= p;
}

// Softmax cross-entropy of one row of `classes` logits against `label` (0 <= label < classes),
// with label smoothing s: target q_j = (1 - s) [j == label] + s / classes. Returns the loss
// -sum_j q_j log softmax_j (in double: a batch sums many) and sets *correct when the first
// maximal logit is the label. When d is not null it receives (softmax - q) * grad_scale.
DRT_HD double softmax_xent_row(const float* z, int label, int classes, float* d, float grad_scale, bool* correct,
                               float smoothing = 0.0f) {
  int best = 0;
  for (int j = 1; j < classes; ++j)
    if (z[j] > z[best]) best = j;
  const double top = z[best];
  double total = 0.0, sum_shifted = 0.0;
  for (int j = 0; j < classes; ++j) {
    total += exp(static_cast<double>(z[j]) - top);
    sum_shifted += static_cast<double>(z[j]) - top;
  }
  *correct = best == label;
  const double s = smoothing, uniform = s / classes;
  if (d) {
    for (int j = 0; j < classes; ++j) {
      const double p = exp(static_cast<double>(z[j]) - top) / total;
      d[j] = static_cast<float>((p - (j == label ? 1.0 - s : 0.0) - uniform) * grad_scale);
    }
  }
  const double log_total = log(total);
  const double nll = log_total - (static_cast<double>(z[label]) - top);
  if (smoothing == 0.0f) return nll;
  // -sum_j (s / K) log softmax_j = (s / K) * (K log_total - sum_j (z_j - top)).
  return (1.0 - s) * nll + uniform * (classes * log_total - sum_shifted);
}

// The optimizer updates of drt::optim (formulas in include/drtrain/optim/optimizer.hpp), one
// parameter at a time; the per-step constants are computed once on the host.
struct SgdCoefficients {
  float lr = 0.0f, weight_decay = 0.0f, momentum = 0.0f;  // momentum 0: no buffer
  bool nesterov = false;
};
// p: parameter, g: raw gradient (scaled by grad_scale here), buf: momentum buffer (unused when
// momentum == 0).
DRT_HD void sgd_update(const SgdCoefficients& c, float& p, float g, float grad_scale, float& buf) {
  const float gs = g * grad_scale + c.weight_decay * p;
  if (c.momentum == 0.0f) {
    p -= c.lr * gs;
    return;
  }
  buf = c.momentum * buf + gs;
  p -= c.lr * (c.nesterov ? gs + c.momentum * buf : buf);
}

struct AdamCoefficients {
  float beta1 = 0.9f, beta2 = 0.999f;
  float one_minus_beta1 = 0.1f, one_minus_beta2 = 0.001f;  // formed in double, as torch does
  float eps = 1e-8f;
  float l2 = 0.0f;              // adam: weight decay added to the gradient
  float shrink = 1.0f;          // adamw: p *= 1 - lr * wd (decoupled)
  float step_size = 0.0f;       // lr / (1 - beta1^t)
  float inv_sqrt_bias2 = 1.0f;  // 1 / sqrt(1 - beta2^t)
};
DRT_HD void adam_update(const AdamCoefficients& c, float& p, float g, float grad_scale, float& m, float& v) {
  const float gs = g * grad_scale + c.l2 * p;
  m = c.beta1 * m + c.one_minus_beta1 * gs;
  v = c.beta2 * v + c.one_minus_beta2 * gs * gs;
  const float denom = sqrtf(v) * c.inv_sqrt_bias2 + c.eps;
  p = p * c.shrink - c.step_size * m / denom;
}

// float32 -> bfloat16 bits, rounding to nearest even (as __float2bfloat16_rn); NaN stays a
// quiet NaN of the same sign. bf16 -> float32 is exact.
DRT_HD std::uint16_t float_to_bf16_bits(float x) {
  std::uint32_t u;
  memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>((u + rounding) >> 16);
}
DRT_HD float bf16_bits_to_float(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

}  // namespace drt::kernels
