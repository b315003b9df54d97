// CPU reference implementations of the kernels in launchers.hpp: the same contracts on host
// memory, written as plain loops over rules.hpp. The CPU backend and the PS optimizers run
// these; the GPU tests compare each kernel against them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "drtrain/kernels/rules.hpp"

namespace drt::kernels::ref {

void add_bias_rows(float* y, const float* bias, int rows, int cols);
void bias_grad_rows(const float* dy, float* grad_bias, int rows, int cols);
void relu_forward(const float* x, float* y, std::size_t n);
void relu_backward(const float* y, const float* dy, float* dx, std::size_t n);
void axpby(float a, const float* x, float b, float* y, std::size_t n);
void scale(float a, float* x, std::size_t n);

// Returns the summed loss and correct count (no scratch); a label outside [0, classes) throws.
struct XentSums {
  double loss = 0.0;
  std::int64_t correct = 0;
};
// label_smoothing as in Backend::accumulate_softmax_cross_entropy.
XentSums softmax_cross_entropy(const float* logits, const std::int32_t* labels, int rows, int classes, float* dlogits,
                               float grad_scale, float label_smoothing = 0.0f);

// Elementwise activations (rules.hpp); in place allowed. Backward: GELU (both) reads x, tanh and
// sigmoid read their output y.
void gelu_forward(const float* x, float* y, std::size_t n);
void gelu_backward(const float* x, const float* dy, float* dx, std::size_t n);
void gelu_tanh_forward(const float* x, float* y, std::size_t n);
void gelu_tanh_backward(const float* x, const float* dy, float* dx, std::size_t n);
void tanh_forward(const float* x, float* y, std::size_t n);
void tanh_backward(const float* y, const float* dy, float* dx, std::size_t n);
void sigmoid_forward(const float* x, float* y, std::size_t n);
void sigmoid_backward(const float* y, const float* dy, float* dx, std::size_t n);

// Inverted dropout (backend::DropoutShape's contract): rows x per_sample values, row r being
// global sample first_sample + r; mask[i] = 1 when kept (dropout_keep), y = x * mask / (1 - p).
void dropout_forward(std::uint64_t key, std::int64_t first_sample, int rows, std::size_t per_sample, float p,
                     const float* x, float* y, std::uint8_t* mask);
void dropout_backward(int rows, std::size_t per_sample, float p, const float* dy, const std::uint8_t* mask, float* dx);

void sgd_update(const SgdCoefficients& c, float* params, const float* grad, float grad_scale, float* momentum,
                std::size_t n);
void adam_update(const AdamCoefficients& c, float* params, const float* grad, float grad_scale, float* exp_avg,
                 float* exp_avg_sq, std::size_t n);
// `count` SGD updates in a row on the same elements, update j with coefficients c[j] and
// gradient grads[j] * grad_scale: bitwise what `count` calls of sgd_update give, in one pass over
// params and momentum (a PS with several workers' gradients pending, --sync-mode ssp/async).
void sgd_update_run(const SgdCoefficients* c, const float* const* grads, std::size_t count, float grad_scale,
                    float* params, float* momentum, std::size_t n);
// out[i] = x[i] - a * y[i] (the PS's look-ahead: parameters ahead along the momentum).
void subtract_scaled(const float* x, float a, const float* y, float* out, std::size_t n);

void float_to_bf16(const float* x, std::uint16_t* y, std::size_t n);
void bf16_to_float(const std::uint16_t* x, float* y, std::size_t n);

}  // namespace drt::kernels::ref
