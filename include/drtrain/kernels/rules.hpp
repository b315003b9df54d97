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

// Softmax cross-entropy of one row of `classes` logits against `label` (0 <= label < classes).
// Returns the loss (in double: a batch sums many) and sets *correct when the first maximal logit
// is the label. When d is not null it receives (softmax - onehot) * grad_scale.
DRT_HD double softmax_xent_row(const float* z, int label, int classes, float* d, float grad_scale, bool* correct) {
  int best = 0;
  for (int j = 1; j < classes; ++j)
    if (z[j] > z[best]) best = j;
  const double top = z[best];
  double total = 0.0;
  for (int j = 0; j < classes; ++j) total += exp(static_cast<double>(z[j]) - top);
  *correct = best == label;
  if (d) {
    for (int j = 0; j < classes; ++j) {
      const double p = exp(static_cast<double>(z[j]) - top) / total;
      d[j] = static_cast<float>((p - (j == label ? 1.0 : 0.0)) * grad_scale);
    }
  }
  return log(total) - (static_cast<double>(z[label]) - top);
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
