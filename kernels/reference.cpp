// CPU references of drtrain's kernels (include/drtrain/kernels/reference.hpp): loops over the
// per-element rules that the CUDA kernels apply too. The CPU backend and the PS optimizers call
// these, so the GPU tests compare the kernels against the code the CPU path runs. The loops over
// whole arrays are built for the CPU's vector width (DRT_SIMD_CLONES; every clone gives bitwise
// the same result).
#include "drtrain/kernels/reference.hpp"

#include <algorithm>
#include <cmath>

#include "drtrain/core/error.hpp"
#include "drtrain/core/simd_clones.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/kernels/cpu_math.hpp"

namespace drt::kernels::ref {

DRT_SIMD_CLONES
void add_bias_rows(float* y, const float* bias, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    float* row = y + static_cast<std::size_t>(r) * cols;
    for (int j = 0; j < cols; ++j) row[j] += bias[j];
  }
}

DRT_SIMD_CLONES
void bias_grad_rows(const float* dy, float* grad_bias, int rows, int cols) {
  std::fill(grad_bias, grad_bias + cols, 0.0f);
  for (int r = 0; r < rows; ++r) {
    const float* row = dy + static_cast<std::size_t>(r) * cols;
    for (int j = 0; j < cols; ++j) grad_bias[j] += row[j];
  }
}

DRT_SIMD_CLONES
void relu_forward(const float* x, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = relu(x[i]);
}

DRT_SIMD_CLONES
void relu_backward(const float* y, const float* dy, float* dx, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dx[i] = relu_grad(y[i], dy[i]);
}

DRT_SIMD_CLONES
void axpby(float a, const float* x, float b, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = a * x[i] + b * y[i];
}

DRT_SIMD_CLONES
void scale(float a, float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) x[i] *= a;
}

XentSums softmax_cross_entropy(const float* logits, const std::int32_t* labels, int rows, int classes, float* dlogits,
                               float grad_scale, float label_smoothing) {
  XentSums sums;
  for (int r = 0; r < rows; ++r) {
    const int label = labels[r];
    if (label < 0 || label >= classes)
      throw Error(str("label ", label, " of sample ", r, " is outside [0, ", classes, ")"));
    bool correct = false;
    const std::size_t at = static_cast<std::size_t>(r) * classes;
    sums.loss += softmax_xent_row(logits + at, label, classes, dlogits ? dlogits + at : nullptr, grad_scale, &correct,
                                  label_smoothing);
    sums.correct += correct;
  }
  return sums;
}

void gelu_forward(const float* x, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = gelu(x[i]);
}

void gelu_backward(const float* x, const float* dy, float* dx, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dx[i] = gelu_grad(x[i], dy[i]);
}

// The tanh GELU with cpu_math's vectorisable tanh (absolute error < 3e-7 against tanhf): a
// GPT's MLP runs it over 4 x width values per token, where libm's scalar tanhf would cost
// as much as the MLP's GEMMs.
DRT_SIMD_CLONES
void gelu_tanh_forward(const float* x, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = cpu_math::gelu_tanh(x[i]);
}

DRT_SIMD_CLONES
void gelu_tanh_backward(const float* x, const float* dy, float* dx, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dx[i] = cpu_math::gelu_tanh_grad(x[i], dy[i]);
}

void tanh_forward(const float* x, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
}

void tanh_backward(const float* y, const float* dy, float* dx, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dx[i] = tanh_grad(y[i], dy[i]);
}

void sigmoid_forward(const float* x, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = sigmoid(x[i]);
}

void sigmoid_backward(const float* y, const float* dy, float* dx, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dx[i] = sigmoid_grad(y[i], dy[i]);
}

// A dropped value is multiplied by 0 (not replaced by 0), so that x * mask / (1 - p) holds for
// infinities and NaNs too. The AVX-512 clone hashes 8 elements at a time (64-bit multiplies).
DRT_SIMD_CLONES
void dropout_forward(std::uint64_t key, std::int64_t first_sample, int rows, std::size_t per_sample, float p,
                     const float* x, float* y, std::uint8_t* mask) {
  const float kept = 1.0f / (1.0f - p);
  for (int r = 0; r < rows; ++r) {
    const std::size_t at = static_cast<std::size_t>(r) * per_sample;
    const std::int64_t sample = first_sample + r;
    for (std::size_t e = 0; e < per_sample; ++e) {
      const bool keep = dropout_keep(key, sample, e, p);
      mask[at + e] = keep ? 1 : 0;
      y[at + e] = x[at + e] * (keep ? kept : 0.0f);
    }
  }
}

DRT_SIMD_CLONES
void dropout_backward(int rows, std::size_t per_sample, float p, const float* dy, const std::uint8_t* mask, float* dx) {
  const float kept = 1.0f / (1.0f - p);
  const std::size_t n = static_cast<std::size_t>(rows) * per_sample;
  for (std::size_t i = 0; i < n; ++i) dx[i] = dy[i] * (mask[i] ? kept : 0.0f);
}

// The coefficients are copied to locals so the compiler knows the arrays cannot alias them and
// vectorises the loops.
DRT_SIMD_CLONES
void sgd_update(const SgdCoefficients& coefficients, float* __restrict params, const float* __restrict grad,
                float grad_scale, float* __restrict momentum, std::size_t n) {
  const SgdCoefficients c = coefficients;
  if (c.momentum == 0.0f) {
    float unused = 0.0f;
    for (std::size_t i = 0; i < n; ++i) sgd_update(c, params[i], grad[i], grad_scale, unused);
    return;
  }
  for (std::size_t i = 0; i < n; ++i) sgd_update(c, params[i], grad[i], grad_scale, momentum[i]);
}

void sgd_update_run(const SgdCoefficients* c, const float* const* grads, std::size_t count, float grad_scale,
                    float* params, float* momentum, std::size_t n) {
  // Tiles small enough for L1: the updates of a tile run one after the other over it, so memory
  // sees one pass, and each is sgd_update's vectorised loop.
  constexpr std::size_t kTile = 512;
  for (std::size_t at = 0; at < n; at += kTile) {
    const std::size_t m = std::min(kTile, n - at);
    for (std::size_t j = 0; j < count; ++j)
      sgd_update(c[j], params + at, grads[j] + at, grad_scale, momentum ? momentum + at : nullptr, m);
  }
}

DRT_SIMD_CLONES
void subtract_scaled(const float* __restrict x, float a, const float* __restrict y, float* __restrict out,
                     std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = x[i] - a * y[i];
}

DRT_SIMD_CLONES
void adam_update(const AdamCoefficients& coefficients, float* __restrict params, const float* __restrict grad,
                 float grad_scale, float* __restrict exp_avg, float* __restrict exp_avg_sq, std::size_t n) {
  const AdamCoefficients c = coefficients;
  for (std::size_t i = 0; i < n; ++i) adam_update(c, params[i], grad[i], grad_scale, exp_avg[i], exp_avg_sq[i]);
}

DRT_SIMD_CLONES
void float_to_bf16(const float* x, std::uint16_t* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = float_to_bf16_bits(x[i]);
}

DRT_SIMD_CLONES
void bf16_to_float(const std::uint16_t* x, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = bf16_bits_to_float(x[i]);
}

}  // namespace drt::kernels::ref
