// Backend: the compute device of one tower (one model replica). Layers express their math
// through it, so that the same layer code runs on the CPU (OpenBLAS, im2col) and, later, on a
// GPU (cuBLAS, cuDNN, drtrain's kernels). Every pointer handed to a backend points to memory it
// allocated (DeviceBuffer). Calls may be asynchronous (CUDA: ordered on the tower's stream);
// synchronize() waits for them. No MPI here, and no CUDA types in this header.
//
// Layout conventions: matrices are row-major; images are NCHW; a Linear layer's weight is
// [out x in] (as torch.nn.Linear), a Conv2d weight [out x in x kh x kw].
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace drt::backend {

class Backend;

// Memory owned by a backend (host memory on the CPU backend). Move-only; must not outlive the
// backend that allocated it.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend* owner, void* data, std::size_t bytes) : owner_(owner), data_(data), bytes_(bytes) {}
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;

  void* data() const { return data_; }
  float* floats() const { return static_cast<float*>(data_); }
  std::int32_t* ints() const { return static_cast<std::int32_t*>(data_); }
  std::size_t bytes() const { return bytes_; }

 private:
  void release() noexcept;
  Backend* owner_ = nullptr;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// A square-kernel convolution (as torch.nn.Conv2d with dilation 1): zero padding `pad` on every
// side, `groups` dividing both channel counts (input channel group g feeds output channel group
// g; the weight is [out x in/groups x k x k]). Output sizes round down.
struct Conv2dShape {
  int batch = 0, in_channels = 0, height = 0, width = 0;  // input
  int out_channels = 0, kernel = 0, stride = 1, pad = 0, groups = 1;
  int out_height() const { return (height + 2 * pad - kernel) / stride + 1; }
  int out_width() const { return (width + 2 * pad - kernel) / stride + 1; }
  int in_per_group() const { return in_channels / groups; }
  int out_per_group() const { return out_channels / groups; }
};

// Square-window pooling (torch's MaxPool2d / AvgPool2d with ceil_mode false): `pad` on every
// side (at most window / 2). Max pooling never picks a padded cell; average pooling divides by
// window * window, counting padded cells as zeros (torch's count_include_pad=True).
struct Pool2dShape {
  int batch = 0, channels = 0, height = 0, width = 0;  // input
  int window = 2, stride = 2, pad = 0;
  int out_height() const { return (height + 2 * pad - window) / stride + 1; }
  int out_width() const { return (width + 2 * pad - window) / stride + 1; }
};

// Batch normalisation over NCHW activations (fully connected ones: height = width = 1): one
// mean and variance per channel over batch x spatial values.
struct BatchNormShape {
  int batch = 0, channels = 0, spatial = 1;  // spatial = height * width
  std::size_t count() const { return static_cast<std::size_t>(batch) * static_cast<std::size_t>(spatial); }
};

// Elementwise activations besides ReLU (which has its own calls). kGelu is the exact GELU,
// x * Phi(x) with the normal CDF through erf (torch's default approximate='none'); kGeluTanh its
// tanh approximation (torch's approximate='tanh', GPT-2's).
enum class Activation { kGelu, kTanh, kSigmoid, kGeluTanh };

// Layer normalisation over the last axis (torch.nn.LayerNorm(dim)): `rows` rows of `dim` values,
// each normalised with its own mean and biased variance, y = (x - mean) / sqrt(var + eps) *
// gamma + beta.
struct LayerNormShape {
  int rows = 0, dim = 0;
  float eps = 1e-5f;
  std::size_t size() const { return static_cast<std::size_t>(rows) * static_cast<std::size_t>(dim); }
};

// A token embedding: `rows` token ids (floats holding whole numbers, as the data gives them)
// pick rows of a [vocab x dim] table.
struct EmbeddingShape {
  int rows = 0, vocab = 0, dim = 0;
};

// Causal multi-head self-attention (torch's scaled_dot_product_attention with is_causal=True
// on nanoGPT's head split). Input qkv [batch, length, 3 D] (D = heads x head_dim): per position
// q, k, v = the three consecutive blocks of D, and head h is columns [h hd, (h + 1) hd) of each.
// Output y [batch, length, D], head h in the same columns: y_i = sum_{j <= i} A_ij v_j with A =
// softmax over j <= i of q_i . k_j / sqrt(hd), then dropout on A: A_ij is kept when
// kernels::dropout_keep(key, first_sample + sample, (h * length + i) * length + j, dropout)
// and scaled by 1 / (1 - dropout) (the softmax's normaliser counts every probability). lse
// [batch, heads, length] receives each row's log sum_j exp(q_i . k_j / sqrt(hd)), which backward
// needs to recompute A (FlashAttention: nothing of size length^2 is kept).
// tile_q/tile_k: the query x key tiles (0: the backend's choice; tests set small ones to cover
// many tiles on short sequences).
struct AttentionShape {
  int batch = 0, length = 0, heads = 0, head_dim = 0;
  float dropout = 0.0f;           // in [0, 1); 0 in evaluation
  std::uint64_t key = 0;          // kernels::dropout_key(seed, step, layer)
  std::int64_t first_sample = 0;  // global index of sample 0 (dropout)
  int tile_q = 0, tile_k = 0;
  int dim() const { return heads * head_dim; }
};

// Inverted dropout of `rows` samples of `per_sample` values each: element e of sample row r is
// kept when kernels::dropout_keep(key, first_sample + r, e, p) (include/drtrain/kernels/rules.hpp:
// a counter-based hash of (key, global sample index, element), so the mask does not depend on
// how the global batch is split over workers and towers), and kept values are scaled by
// 1 / (1 - p). `key` mixes the seed, the step and the layer.
struct DropoutShape {
  int rows = 0;
  std::size_t per_sample = 0;
  float p = 0.5f;                 // drop probability, in [0, 1)
  std::uint64_t key = 0;          // kernels::dropout_key(seed, step, layer)
  std::int64_t first_sample = 0;  // global index (in the step's global batch) of row 0
  std::size_t size() const { return static_cast<std::size_t>(rows) * per_sample; }
};

// Result of the loss over a batch: sum (not mean) of the per-sample losses, and how many
// samples the argmax of the logits got right.
struct LossSums {
  double loss = 0.0;
  std::int64_t correct = 0;
};

enum class DeviceKind { kCpu, kCuda };

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu (oneDNN conv)", "cuda:0", ...
  // kCpu: buffers are host memory, calls complete before they return. kCuda: device memory,
  // calls are queued on the backend's stream.
  virtual DeviceKind kind() const = 0;

  // Zero-initialised memory on this device.
  virtual DeviceBuffer allocate(std::size_t bytes) = 0;
  DeviceBuffer allocate_floats(std::size_t count) { return allocate(count * sizeof(float)); }
  virtual void free(void* data) noexcept = 0;  // DeviceBuffer calls it
  // The host memory must stay valid and unchanged until the device has done the copy, i.e. until
  // the next synchronize(), copy_to_host() or take_loss_sums() (on the CPU: the call itself).
  virtual void copy_from_host(void* device, const void* host, std::size_t bytes) = 0;
  // Returns when the data is in `host`.
  virtual void copy_to_host(void* host, const void* device, std::size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;  // device to device
  virtual void zero(void* device, std::size_t bytes) = 0;
  virtual void synchronize() = 0;

  // Device-side timing: mark(slot) records when the device reaches this point of its work
  // (slot < kMarks); seconds_between(a, b) is the time from mark a to mark b, valid once the
  // device has passed mark b (on CUDA: after synchronize() or take_loss_sums()).
  static constexpr int kMarks = 4;
  virtual void mark(int slot) = 0;
  virtual double seconds_between(int from, int to) = 0;

  // C[m x n] = alpha * op(A) * op(B) + beta * C, op(X) = X or X^T, all row-major and dense.
  virtual void gemm(bool transpose_a, bool transpose_b, int m, int n, int k, float alpha, const float* a,
                    const float* b, float beta, float* c) = 0;
  // y[r][j] += bias[j] for r < rows, j < cols (Linear).
  virtual void add_bias_rows(float* y, const float* bias, int rows, int cols) = 0;
  // grad_bias[j] = sum_r dy[r][j] (Linear; overwrites).
  virtual void bias_grad_rows(const float* dy, float* grad_bias, int rows, int cols) = 0;
  // y = max(x, 0); dx = dy where y > 0, else 0. In place allowed (y == x, dx == dy).
  virtual void relu_forward(const float* x, float* y, std::size_t n) = 0;
  virtual void relu_backward(const float* y, const float* dy, float* dx, std::size_t n) = 0;

  // Elementwise activations (see Activation). Backward: GELU reads x, tanh and sigmoid read y
  // (so tanh and sigmoid may run in place; the unused one may be null). In place allowed.
  virtual void activation_forward(Activation f, const float* x, float* y, std::size_t n) = 0;
  virtual void activation_backward(Activation f, const float* x, const float* y, const float* dy, float* dx,
                                   std::size_t n) = 0;

  // Convolution, with bias unless `bias` is null. Workspace: conv2d_workspace_floats(shape) floats.
  virtual std::size_t conv2d_workspace_floats(const Conv2dShape& s) const = 0;
  virtual void conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y,
                              float* workspace) = 0;
  // Gradients of the weights and, unless dbias is null, the bias (overwritten) and, when dx is
  // not null, of the input.
  virtual void conv2d_backward(const Conv2dShape& s, const float* x, const float* w, const float* dy, float* dw,
                               float* dbias, float* dx, float* workspace) = 0;

  // Max pooling; `argmax` (int32, one per output) records the winning input for backward.
  virtual void maxpool2d_forward(const Pool2dShape& s, const float* x, float* y, std::int32_t* argmax) = 0;
  // dx from dy; x and y are the forward's input and output (cuDNN finds the maxima from them,
  // the CPU backend from argmax).
  virtual void maxpool2d_backward(const Pool2dShape& s, const float* x, const float* y, const float* dy,
                                  const std::int32_t* argmax, float* dx) = 0;
  // Average pooling (see Pool2dShape); backward overwrites dx.
  virtual void avgpool2d_forward(const Pool2dShape& s, const float* x, float* y) = 0;
  virtual void avgpool2d_backward(const Pool2dShape& s, const float* dy, float* dx) = 0;
  // Global average pooling: y[p] = mean of plane p's `plane_size` values, for p < planes
  // (planes = N x C); backward spreads dy[p] / plane_size over the plane (overwrites dx).
  virtual void global_avgpool_forward(const float* x, float* y, std::size_t planes, std::size_t plane_size) = 0;
  virtual void global_avgpool_backward(const float* dy, float* dx, std::size_t planes, std::size_t plane_size) = 0;

  // Batch normalisation, training mode: normalises x with the batch's per-channel mean and
  // biased variance, y = gamma * (x - mean) / sqrt(var + eps) + beta; saves the mean and
  // 1 / sqrt(var + eps) (channels floats each) for backward. When new_mean is not null, also
  // writes the running statistics after this batch, new = (1 - momentum) * running + momentum *
  // batch statistic, with the unbiased variance (torch's rule; batch x spatial must be > 1).
  virtual void batchnorm_forward_train(const BatchNormShape& s, const float* x, const float* gamma, const float* beta,
                                       float eps, float* y, float* save_mean, float* save_inv_std, float momentum,
                                       const float* running_mean, const float* running_var, float* new_mean,
                                       float* new_var) = 0;
  // Inference mode: normalises with the given running statistics.
  virtual void batchnorm_forward_infer(const BatchNormShape& s, const float* x, const float* gamma, const float* beta,
                                       const float* running_mean, const float* running_var, float eps, float* y) = 0;
  // Backward of the training mode, from the forward's saved statistics and its eps (cuDNN asks
  // for the same eps in both): dgamma and dbeta overwritten; dx (when not null) overwritten.
  virtual void batchnorm_backward(const BatchNormShape& s, const float* x, const float* dy, const float* gamma,
                                  const float* save_mean, const float* save_inv_std, float eps, float* dx,
                                  float* dgamma, float* dbeta) = 0;

  // Dropout (see DropoutShape): y = x * mask / (1 - p), mask[i] = 1 or 0 (one byte per value,
  // DropoutShape::size() bytes); backward dx = dy * mask / (1 - p). In place allowed.
  virtual void dropout_forward(const DropoutShape& s, const float* x, float* y, std::uint8_t* mask) = 0;
  virtual void dropout_backward(const DropoutShape& s, const float* dy, const std::uint8_t* mask, float* dx) = 0;

  // Layer normalisation (LayerNormShape). beta may be null (no shift). Writes y and, per row,
  // the mean and 1 / sqrt(var + eps) (rows floats each) for backward. y may not be x.
  virtual void layernorm_forward(const LayerNormShape& s, const float* x, const float* gamma, const float* beta,
                                 float* y, float* mean, float* inv_std) = 0;
  // dgamma and (unless null) dbeta overwritten; dx (unless null) overwritten.
  virtual void layernorm_backward(const LayerNormShape& s, const float* x, const float* dy, const float* gamma,
                                  const float* mean, const float* inv_std, float* dx, float* dgamma, float* dbeta) = 0;

  // Token embedding (EmbeddingShape): y[r] = table[ids[r]]. An id that is not a whole number in
  // [0, vocab): the CPU throws Error naming it, a GPU writes a row of NaN (the loss then stops
  // the run). Backward: dtable[ids[r]] += dy[r] over the rows; `accumulate` false zeroes dtable
  // first (true: another user of a tied table wrote it already).
  virtual void embedding_forward(const EmbeddingShape& s, const float* ids, const float* table, float* y) = 0;
  virtual void embedding_backward(const EmbeddingShape& s, const float* ids, const float* dy, float* dtable,
                                  bool accumulate) = 0;

  // Causal self-attention (AttentionShape): y and lse from qkv. Backward: dqkv (overwritten)
  // from the forward's qkv, y and lse and dy = d(loss)/dy.
  virtual void attention_forward(const AttentionShape& s, const float* qkv, float* y, float* lse) = 0;
  virtual void attention_backward(const AttentionShape& s, const float* qkv, const float* y, const float* lse,
                                  const float* dy, float* dqkv) = 0;

  // Strided copy of `rows` rows of `row_floats` floats: dst + r * dst_stride <- src + r *
  // src_stride (concatenation along channels, and its backward).
  virtual void copy_rows(float* dst, std::size_t dst_stride, const float* src, std::size_t src_stride,
                         std::size_t row_floats, std::size_t rows) = 0;

  // Softmax cross-entropy of logits [rows x classes] against int32 labels, with label smoothing
  // s in [0, 1): the target is q = (1 - s) * onehot + s / classes (torch's label_smoothing), the
  // loss -sum_j q_j log softmax_j. Added to the backend's loss accumulator (so that a GPU need
  // not stop for it mid-step). When dlogits is not null it receives d(loss)/d(logits) *
  // grad_scale, i.e. (softmax - q) * grad_scale. A label outside [0, classes) makes
  // take_loss_sums() throw.
  virtual void accumulate_softmax_cross_entropy(const float* logits, const std::int32_t* labels, int rows, int classes,
                                                float* dlogits, float grad_scale, float label_smoothing) = 0;
  // Waits for the device, returns the sums accumulated since the last call, and resets them.
  virtual LossSums take_loss_sums() = 0;
  // Both at once (waits for the device).
  LossSums softmax_cross_entropy(const float* logits, const std::int32_t* labels, int rows, int classes, float* dlogits,
                                 float grad_scale, float label_smoothing = 0.0f) {
    accumulate_softmax_cross_entropy(logits, labels, rows, classes, dlogits, grad_scale, label_smoothing);
    return take_loss_sums();
  }

  // y = a * x + b * y over n floats (tower averaging, scaling).
  virtual void axpby(float a, const float* x, float b, float* y, std::size_t n) = 0;
};

// How the CPU backend convolves: oneDNN's JIT kernels (when built with oneDNN: the default),
// or im2col + OpenBLAS GEMM (always available).
enum class CpuConv { kAuto, kIm2col, kOneDnn };
bool onednn_available();

// Which library does the CPU backend's GEMMs (Linear layers, im2col convolutions): oneDNN's
// sgemm, whose JIT kernels use the widest vector units the CPU has (AVX-512 on AMD CPUs too;
// when built with oneDNN: the default), or OpenBLAS (always available; its kernel is chosen by
// CPU family, which gives AVX2 kernels on AMD CPUs with AVX-512). bench/RESULTS.md, "GEMM
// libraries", has the measurements behind the default.
enum class CpuGemm { kAuto, kOpenBlas, kOneDnn };
// "auto" | "openblas" | "onednn"; throws ConfigError naming `flag` for anything else.
CpuGemm parse_cpu_gemm(const std::string& text, const std::string& flag);
std::string to_string(CpuGemm gemm);  // "oneDNN" or "OpenBLAS" (kAuto: what it resolves to)

// The CPU backend: oneDNN or OpenBLAS GEMM, oneDNN or im2col convolution, plain loops. Throws
// Error when oneDNN is asked for in a build without it.
std::unique_ptr<Backend> make_cpu_backend(CpuConv conv = CpuConv::kAuto, CpuGemm gemm = CpuGemm::kAuto);
// Threads of OpenBLAS and of oneDNN's OpenMP runtime: a process setting.
void set_blas_threads(int threads);
int blas_threads();

}  // namespace drt::backend
