// CPU references of drtrain's kernels (include/drtrain/kernels/reference.hpp): loops over the
// per-element rules that the CUDA kernels apply too. The CPU backend and the PS optimizers call
// these, so the GPU tests compare the kernels against the code the CPU path runs.
#include "drtrain/kernels/reference.hpp"

#include <algorithm>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::kernels::ref {

void add_bias_rows(float* y, const float* bias, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    float* row = y + static_cast<std::size_t>(r) * cols;
    for (int j = 0; j < cols; ++j) row[j] += bias[j];
  }
}

void bias_grad_rows(const float* dy, float* grad_bias, int rows, int cols) {
  std::fill(grad_bias, grad_bias + cols, 0.0f);
  for (int r = 0; r < rows; ++r) {
    const float* row = dy + static_cast<std::size_t>(r) * cols;
    for (int j = 0; j < cols; ++j) grad_bias[j] += row[j];
  }
}

void relu_forward(const float* x, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = relu(x[i]);
}

void relu_backward(const float* y, const float* dy, float* dx, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dx[i] = relu_grad(y[i], dy[i]);
}

void axpby(float a, const float* x, float b, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = a * x[i] + b * y[i];
}

void scale(float a, float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) x[i] *= a;
}

XentSums softmax_cross_entropy(const float* logits, const std::int32_t* labels, int rows, int classes, float* dlogits,
                               float grad_scale) {
  XentSums sums;
  for (int r = 0; r < rows; ++r) {
    const int label = labels[r];
    if (label < 0 || label >= classes)
      throw Error(str("label ", label, " of sample ", r, " is outside [0, ", classes, ")"));
    bool correct = false;
    const std::size_t at = static_cast<std::size_t>(r) * classes;
    sums.loss += softmax_xent_row(logits + at, label, classes, dlogits ? dlogits + at : nullptr, grad_scale, &correct);
    sums.correct += correct;
  }
  return sums;
}

// The coefficients are copied to locals so the compiler knows the arrays cannot alias them and
// vectorises the loops.
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

void adam_update(const AdamCoefficients& coefficients, float* __restrict params, const float* __restrict grad,
                 float grad_scale, float* __restrict exp_avg, float* __restrict exp_avg_sq, std::size_t n) {
  const AdamCoefficients c = coefficients;
  for (std::size_t i = 0; i < n; ++i) adam_update(c, params[i], grad[i], grad_scale, exp_avg[i], exp_avg_sq[i]);
}

void float_to_bf16(const float* x, std::uint16_t* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = float_to_bf16_bits(x[i]);
}

void bf16_to_float(const std::uint16_t* x, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = bf16_bits_to_float(x[i]);
}

}  // namespace drt::kernels::ref
