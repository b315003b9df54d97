// Launchers of drtrain's own CUDA kernels (kernels/*.cu): what no library does well. Each runs
// asynchronously on `stream` (a cudaStream_t passed as void*, so that this header needs no CUDA
// headers), takes device pointers, and checks its launch. Declared in every build; defined only
// in a CUDA build (DRT_HAVE_CUDA), where the CUDA backend, the GPU tests and the kernel
// benchmark use them. Their CPU references are in reference.hpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "drtrain/kernels/rules.hpp"

namespace drt::kernels {

using Stream = void*;

// y[r][j] += bias[j] over rows x cols.
void add_bias_rows(float* y, const float* bias, int rows, int cols, Stream stream);
// grad_bias[j] = sum over r of dy[r][j], summed in row order (overwrites).
void bias_grad_rows(const float* dy, float* grad_bias, int rows, int cols, Stream stream);
void relu_forward(const float* x, float* y, std::size_t n, Stream stream);                     // in place ok
void relu_backward(const float* y, const float* dy, float* dx, std::size_t n, Stream stream);  // in place ok
// y = a * x + b * y (tower averaging, gradient scaling).
void axpby(float a, const float* x, float b, float* y, std::size_t n, Stream stream);
// x *= a.
void scale(float a, float* x, std::size_t n, Stream stream);

// Softmax cross-entropy of logits [rows x classes] against labels. Adds the batch's summed loss
// to sums[0], its number of correct predictions to sums[1], and the number of labels outside
// [0, classes) to sums[2] (device doubles; the rows are summed in a fixed order, so results are
// deterministic). `row_scratch` holds `rows` doubles. dlogits, when not null, receives
// (softmax - onehot) * grad_scale.
void softmax_cross_entropy(const float* logits, const std::int32_t* labels, int rows, int classes, float* dlogits,
                           float grad_scale, double* row_scratch, double* sums, Stream stream);

// Optimizer updates over n parameters (rules.hpp); buffers as in drt::optim.
void sgd_update(const SgdCoefficients& c, float* params, const float* grad, float grad_scale, float* momentum,
                std::size_t n, Stream stream);
void adam_update(const AdamCoefficients& c, float* params, const float* grad, float grad_scale, float* exp_avg,
                 float* exp_avg_sq, std::size_t n, Stream stream);

// float32 <-> bfloat16 (round to nearest even); bf16 as raw 16-bit patterns.
void float_to_bf16(const float* x, std::uint16_t* y, std::size_t n, Stream stream);
void bf16_to_float(const std::uint16_t* x, float* y, std::size_t n, Stream stream);

}  // namespace drt::kernels
