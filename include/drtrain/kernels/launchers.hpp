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

// Elementwise activations (rules.hpp: gelu, tanh, sigmoid and their gradients); in place
// allowed. Backward: GELU reads the forward's input x, tanh and sigmoid its output y.
void gelu_forward(const float* x, float* y, std::size_t n, Stream stream);
void gelu_backward(const float* x, const float* dy, float* dx, std::size_t n, Stream stream);
void tanh_forward(const float* x, float* y, std::size_t n, Stream stream);
void tanh_backward(const float* y, const float* dy, float* dx, std::size_t n, Stream stream);
void gelu_tanh_forward(const float* x, float* y, std::size_t n, Stream stream);
void gelu_tanh_backward(const float* x, const float* dy, float* dx, std::size_t n, Stream stream);
void sigmoid_forward(const float* x, float* y, std::size_t n, Stream stream);
void sigmoid_backward(const float* y, const float* dy, float* dx, std::size_t n, Stream stream);

// Inverted dropout (backend::DropoutShape's contract): rows x per_sample values, row r being
// global sample first_sample + r; mask[i] = 1 when dropout_keep(key, first_sample + r, e, p) for
// element e of its row, else 0; y = x * mask / (1 - p). Backward: dx = dy * mask / (1 - p).
// In place allowed. p in [0, 1).
void dropout_forward(std::uint64_t key, std::int64_t first_sample, int rows, std::size_t per_sample, float p,
                     const float* x, float* y, std::uint8_t* mask, Stream stream);
void dropout_backward(int rows, std::size_t per_sample, float p, const float* dy, const std::uint8_t* mask, float* dx,
                      Stream stream);

// Pooling of `planes` (N x C) planes of height x width values, square windows `window` with
// `stride` and zero padding `pad` on every side; output sizes (height + 2 pad - window) / stride
// + 1, rounded down (backend::Pool2dShape).
struct PoolGeometry {
  std::size_t planes = 0;
  int height = 0, width = 0, window = 2, stride = 2, pad = 0;
  int out_height() const { return (height + 2 * pad - window) / stride + 1; }
  int out_width() const { return (width + 2 * pad - window) / stride + 1; }
};
// Backward of average pooling counting padded cells (divisor window * window): each input
// value's dx is the sum over the windows that contain it of dy / (window * window), gathered by
// one thread per input value (deterministic, no atomics); overwrites dx, zero where no window
// reaches.
void avgpool2d_backward(const PoolGeometry& g, const float* dy, float* dx, Stream stream);

// Global average pooling: y[p] = (x[p][0] + ... + x[p][plane_size - 1]) / plane_size, one warp
// per plane summing in a fixed order (deterministic). Backward: dx[p][i] = dy[p] / plane_size
// (overwrites dx).
void global_avgpool_forward(const float* x, float* y, std::size_t planes, std::size_t plane_size, Stream stream);
void global_avgpool_backward(const float* dy, float* dx, std::size_t planes, std::size_t plane_size, Stream stream);

// Softmax cross-entropy of logits [rows x classes] against labels, with label smoothing s in
// [0, 1) (rules.hpp softmax_xent_row: target (1 - s) onehot + s / classes). Adds the batch's
// summed loss to sums[0], its number of correct predictions to sums[1], and the number of labels
// outside [0, classes) to sums[2] (device doubles; the rows are summed in a fixed order, so
// results are deterministic). `row_scratch` holds `rows` doubles. dlogits, when not null,
// receives (softmax - target) * grad_scale.
void softmax_cross_entropy(const float* logits, const std::int32_t* labels, int rows, int classes, float* dlogits,
                           float grad_scale, float label_smoothing, double* row_scratch, double* sums, Stream stream);

// Layer normalisation over the last axis (backend::LayerNormShape): rows x dim, y = (x - mean)
// * inv_std * gamma + beta (beta may be null), mean and inv_std per row. Backward: dx (unless
// null), dgamma and dbeta (unless null) overwritten; dgamma/dbeta sum the rows in order.
void layernorm_forward(int rows, int dim, float eps, const float* x, const float* gamma, const float* beta, float* y,
                       float* mean, float* inv_std, Stream stream);
void layernorm_backward(int rows, int dim, const float* x, const float* dy, const float* gamma, const float* mean,
                        const float* inv_std, float* dx, float* dgamma, float* dbeta, Stream stream);

// Token embedding (backend::EmbeddingShape): y[r] = table[ids[r]], a row of NaN for an id that
// is not a whole number in [0, vocab). Backward: dtable zeroed unless `accumulate`, then
// dtable[ids[r]] += dy[r] (atomics: not bitwise repeatable where ids repeat).
void embedding_forward(int rows, int vocab, int dim, const float* ids, const float* table, float* y, Stream stream);
void embedding_backward(int rows, int vocab, int dim, const float* ids, const float* dy, float* dtable, bool accumulate,
                        Stream stream);

// Causal self-attention (backend::AttentionShape's contract, without its tiles): y and lse
// from qkv; backward writes every value of dqkv, using `delta` (batch x heads x length floats)
// as scratch. head_dim at most 256 (attention_supported).
struct AttentionGeometry {
  int batch = 0, length = 0, heads = 0, head_dim = 0;
  float dropout = 0.0f;
  std::uint64_t key = 0;
  std::int64_t first_sample = 0;
};
bool attention_supported(int head_dim);
void attention_forward(const AttentionGeometry& g, const float* qkv, float* y, float* lse, Stream stream);
void attention_backward(const AttentionGeometry& g, const float* qkv, const float* y, const float* lse, const float* dy,
                        float* dqkv, float* delta, Stream stream);

// Optimizer updates over n parameters (rules.hpp); buffers as in drt::optim.
void sgd_update(const SgdCoefficients& c, float* params, const float* grad, float grad_scale, float* momentum,
                std::size_t n, Stream stream);
void adam_update(const AdamCoefficients& c, float* params, const float* grad, float grad_scale, float* exp_avg,
                 float* exp_avg_sq, std::size_t n, Stream stream);

// float32 <-> bfloat16 (round to nearest even); bf16 as raw 16-bit patterns.
void float_to_bf16(const float* x, std::uint16_t* y, std::size_t n, Stream stream);
void bf16_to_float(const std::uint16_t* x, float* y, std::size_t n, Stream stream);

}  // namespace drt::kernels
