// The CUDA backend: one GPU tower's device. GEMMs go to cuBLAS; convolution, max and average
// pooling and batch normalisation to cuDNN's legacy (v7-style) API; everything else (the
// activations, dropout, global average pooling, the backward of average pooling, the loss, layer
// norm, the token embedding, causal self-attention) to drtrain's kernels (kernels/). All work is queued on the
// backend's own stream; the calls return before the GPU has finished, except copy_to_host, take_loss_sums and
// synchronize, which wait for the stream.
//
// cuDNN choices (docs/GPU.md, "GPU path"): the legacy convolution API
// (cudnnConvolutionForward/BackwardData/BackwardFilter) fits our fixed NCHW float32 layers with
// a few lines per call; the graph API would buy fusions we do not need yet. Algorithms are
// chosen per shape by cudnnFind*Algorithm (it times every algorithm once, on first use of a
// shape, batch size included, so an epoch's last partial batch pays one more search) rather than
// by heuristics, keeping the fastest whose workspace fits kMaxWorkspace. With --deterministic
// only algorithms cuDNN reports as deterministic qualify, and they are ranked by its heuristics
// (cudnnGet*Algorithm_v7), not timed: which algorithm times fastest varies from run to run, and
// each rounds differently, so timing would break run-to-run reproducibility (measured on an H200:
// two --deterministic CNN runs differed by 1e-2 after 40 steps). Math: FMA only (exact
// float32, comparable with the CPU) unless TF32 is allowed (--cuda-tf32). Grouped (and
// depthwise) convolutions are one cuDNN call with cudnnSetConvolutionGroupCount.
//
// Batch normalisation: CUDNN_BATCHNORM_SPATIAL over x seen as N x C x (H*W) x 1. cuDNN updates
// the running statistics in place (resultRunningMean/Variance: new = (1 - factor) * old +
// factor * batch statistic, with the unbiased variance for the running one), while
// Backend::batchnorm_forward_train reads running_* and writes new_*: the running statistics are
// copied into new_* first and cuDNN updates those, with exponentialAverageFactor = momentum.
// resultSaveMean/InvVariance are the batch mean and 1 / sqrt(biased variance + eps) that the
// contract calls save_mean and save_inv_std, and cudnnBatchNormalizationBackward takes them
// back.
#include "drtrain/backend/cuda_backend.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/kernels/launchers.hpp"
#include "library_check.hpp"

namespace drt::backend {
namespace {

constexpr std::size_t kMaxWorkspace = std::size_t{1} << 30;  // bytes a convolution may use

// A cuDNN descriptor with RAII.
template <typename T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class Descriptor {
 public:
  Descriptor() { DRT_CUDNN_CHECK(Create(&d_)); }
  ~Descriptor() { Destroy(d_); }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  T get() const { return d_; }

 private:
  T d_{};
};
using TensorDesc = Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc = Descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvDesc =
    Descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;
using PoolDesc = Descriptor<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor, cudnnDestroyPoolingDescriptor>;

void set_nchw(const TensorDesc& d, int n, int c, int h, int w) {
  DRT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w));
}

// Picks the first usable result of a cudnnFind*Algorithm call (sorted by time: the fastest) or of
// a cudnnGet*Algorithm_v7 call (sorted by cuDNN's heuristic ranking).
template <typename Perf>
Perf pick_algorithm(const std::vector<Perf>& results, int returned, bool deterministic, const char* what,
                    const Conv2dShape& s) {
  for (int i = 0; i < returned; ++i) {
    const Perf& p = results[static_cast<std::size_t>(i)];
    if (p.status != CUDNN_STATUS_SUCCESS || p.memory > kMaxWorkspace) continue;
    if (deterministic && p.determinism != CUDNN_DETERMINISTIC) continue;
    return p;
  }
  throw Error(str(rank_tag(), ": cuDNN has no usable ", what, " algorithm for a convolution of ", s.batch, "x",
                  s.in_channels, "x", s.height, "x", s.width, " by ", s.out_channels, "x", s.in_per_group(), "x",
                  s.kernel, "x", s.kernel, " (stride ", s.stride, ", pad ", s.pad, ", groups ", s.groups, ")",
                  deterministic ? " among its deterministic ones (drop --deterministic)" : ""));
}

// Everything cuDNN needs for one convolution shape: descriptors and the chosen algorithms.
struct ConvPlan {
  TensorDesc x, y, bias;
  FilterDesc w;
  ConvDesc conv;
  cudnnConvolutionFwdAlgo_t forward{};
  cudnnConvolutionBwdDataAlgo_t backward_data{};
  cudnnConvolutionBwdFilterAlgo_t backward_filter{};
  std::size_t workspace = 0;  // bytes: the largest of the three
};

struct PoolPlan {
  TensorDesc x, y;
  PoolDesc pool;
};

// Batch normalisation of one shape: x (and y, dx, dy) as N x C x spatial x 1, and the derived
// 1 x C x 1 x 1 descriptor of gamma, beta and the statistics.
struct BatchNormPlan {
  TensorDesc x, stats;
};

constexpr cudnnBatchNormMode_t kBatchNormMode = CUDNN_BATCHNORM_SPATIAL;

kernels::PoolGeometry pool_geometry(const Pool2dShape& s) {
  kernels::PoolGeometry g;
  g.planes = static_cast<std::size_t>(s.batch) * static_cast<std::size_t>(s.channels);
  g.height = s.height;
  g.width = s.width;
  g.window = s.window;
  g.stride = s.stride;
  g.pad = s.pad;
  return g;
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaOptions& options) : options_(options), device_(options.device) {
    cuda::use_device(device_);
    // A non-blocking stream: never implicitly ordered with the legacy default stream, so
    // nothing else in the process (NCCL, other towers) serialises with this tower by accident.
    DRT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    DRT_CUBLAS_CHECK(cublasCreate(&cublas_));
    DRT_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    DRT_CUBLAS_CHECK(cublasSetMathMode(cublas_, options.allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    DRT_CUDNN_CHECK(cudnnCreate(&cudnn_));
    DRT_CUDNN_CHECK(cudnnSetStream(cudnn_, stream_));
    for (auto& e : marks_) DRT_CUDA_CHECK(cudaEventCreate(&e));
    DRT_CUDA_CHECK(cudaMalloc(&loss_sums_, 3 * sizeof(double)));
    DRT_CUDA_CHECK(cudaMemsetAsync(loss_sums_, 0, 3 * sizeof(double), stream_));
    DRT_CUDA_CHECK(cudaMallocHost(&loss_host_, 3 * sizeof(double)));
  }

  ~CudaBackend() override {
    // Teardown: errors are ignored (nothing useful can be done with them in a destructor).
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    conv_plans_.clear();
    pool_plans_.clear();
    bn_plans_.clear();
    if (workspace_) cudaFree(workspace_);
    if (bn_dx_scratch_) cudaFree(bn_dx_scratch_);
    if (attention_scratch_) cudaFree(attention_scratch_);
    if (row_scratch_) cudaFree(row_scratch_);
    cudaFree(loss_sums_);
    cudaFreeHost(loss_host_);
    for (auto& e : marks_) cudaEventDestroy(e);
    cudnnDestroy(cudnn_);
    cublasDestroy(cublas_);
    cudaStreamDestroy(stream_);
  }

  std::string name() const override { return str("cuda:", device_); }
  DeviceKind kind() const override { return DeviceKind::kCuda; }
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }

  DeviceBuffer allocate(std::size_t bytes) override {
    if (bytes == 0) return DeviceBuffer(this, nullptr, 0);
    cuda::use_device(device_);
    void* data = nullptr;
    const cudaError_t status = cudaMalloc(&data, bytes);
    if (status != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free allocation error
      std::size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      throw Error(str(rank_tag(), ": out of GPU memory on ", name(), ": ", bytes >> 20, " MiB requested, ",
                      free_bytes >> 20, " of ", total_bytes >> 20, " MiB free; use a smaller --batch-size"));
    }
    DRT_CUDA_CHECK(cudaMemsetAsync(data, 0, bytes, stream_));
    return DeviceBuffer(this, data, bytes);
  }
  void free(void* data) noexcept override {
    if (!data) return;
    cudaSetDevice(device_);
    cudaFree(data);  // waits for the device: buffers are freed at teardown, not per step
  }
  // Queued on the stream (backend.hpp: the host memory must live until the stream has passed
  // the copy). CUDA documents a pageable source as staged before cudaMemcpyAsync returns only
  // "possibly", so nothing relies on it.
  void copy_from_host(void* device, const void* host, std::size_t bytes) override {
    if (bytes == 0) return;
    cuda::use_device(device_);
    DRT_CUDA_CHECK(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_));
  }
  void copy_to_host(void* host, const void* device, std::size_t bytes) override {
    if (bytes == 0) return;
    cuda::use_device(device_);
    DRT_CUDA_CHECK(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_));
    DRT_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the caller reads `host` next
  }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes == 0) return;
    cuda::use_device(device_);
    DRT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  }
  void zero(void* device, std::size_t bytes) override {
    if (bytes == 0) return;
    cuda::use_device(device_);
    DRT_CUDA_CHECK(cudaMemsetAsync(device, 0, bytes, stream_));
  }
  void synchronize() override {
    cuda::use_device(device_);
    DRT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void mark(int slot) override {
    cuda::use_device(device_);
    DRT_CUDA_CHECK(cudaEventRecord(marks_.at(static_cast<std::size_t>(slot)), stream_));
  }
  double seconds_between(int from, int to) override {
    cuda::use_device(device_);
    cudaEvent_t end = marks_.at(static_cast<std::size_t>(to));
    DRT_CUDA_CHECK(cudaEventSynchronize(end));
    float ms = 0.0f;
    DRT_CUDA_CHECK(cudaEventElapsedTime(&ms, marks_.at(static_cast<std::size_t>(from)), end));
    return ms * 1e-3;
  }

  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands, and
  // each row-major matrix read as column-major is its transpose with the same leading dimension.
  void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, const float* b, float beta,
            float* c) override {
    cuda::use_device(device_);
    DRT_CUBLAS_CHECK(cublasSgemm(cublas_, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
                                 &alpha, b, tb ? k : n, a, ta ? m : k, &beta, c, n));
  }
  void add_bias_rows(float* y, const float* bias, int rows, int cols) override {
    cuda::use_device(device_);
    kernels::add_bias_rows(y, bias, rows, cols, stream_);
  }
  void bias_grad_rows(const float* dy, float* grad_bias, int rows, int cols) override {
    cuda::use_device(device_);
    kernels::bias_grad_rows(dy, grad_bias, rows, cols, stream_);
  }
  void relu_forward(const float* x, float* y, std::size_t n) override {
    cuda::use_device(device_);
    kernels::relu_forward(x, y, n, stream_);
  }
  void relu_backward(const float* y, const float* dy, float* dx, std::size_t n) override {
    cuda::use_device(device_);
    kernels::relu_backward(y, dy, dx, n, stream_);
  }
  void axpby(float a, const float* x, float b, float* y, std::size_t n) override {
    cuda::use_device(device_);
    kernels::axpby(a, x, b, y, n, stream_);
  }

  void activation_forward(Activation f, const float* x, float* y, std::size_t n) override {
    cuda::use_device(device_);
    switch (f) {
      case Activation::kGelu: kernels::gelu_forward(x, y, n, stream_); return;
      case Activation::kTanh: kernels::tanh_forward(x, y, n, stream_); return;
      case Activation::kSigmoid: kernels::sigmoid_forward(x, y, n, stream_); return;
      case Activation::kGeluTanh: kernels::gelu_tanh_forward(x, y, n, stream_); return;
    }
    throw Error(str(rank_tag(), ": unknown activation ", static_cast<int>(f)));
  }
  // GELU's gradient reads x, tanh's and sigmoid's read y (the other may be null).
  void activation_backward(Activation f, const float* x, const float* y, const float* dy, float* dx,
                           std::size_t n) override {
    cuda::use_device(device_);
    switch (f) {
      case Activation::kGelu: kernels::gelu_backward(x, dy, dx, n, stream_); return;
      case Activation::kTanh: kernels::tanh_backward(y, dy, dx, n, stream_); return;
      case Activation::kSigmoid: kernels::sigmoid_backward(y, dy, dx, n, stream_); return;
      case Activation::kGeluTanh: kernels::gelu_tanh_backward(x, dy, dx, n, stream_); return;
    }
    throw Error(str(rank_tag(), ": unknown activation ", static_cast<int>(f)));
  }

  std::size_t conv2d_workspace_floats(const Conv2dShape&) const override { return 0; }  // the backend's own

  void conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y,
                      float*) override {
    cuda::use_device(device_);
    const ConvPlan& p = conv_plan(s);
    const float one = 1.0f, zero = 0.0f;
    DRT_CUDNN_CHECK(cudnnConvolutionForward(cudnn_, &one, p.x.get(), x, p.w.get(), w, p.conv.get(), p.forward,
                                            workspace_, workspace_bytes_, &zero, p.y.get(), y));
    if (bias) DRT_CUDNN_CHECK(cudnnAddTensor(cudnn_, &one, p.bias.get(), bias, &one, p.y.get(), y));
  }

  void conv2d_backward(const Conv2dShape& s, const float* x, const float* w, const float* dy, float* dw, float* dbias,
                       float* dx, float*) override {
    cuda::use_device(device_);
    const ConvPlan& p = conv_plan(s);
    const float one = 1.0f, zero = 0.0f;
    if (dbias) DRT_CUDNN_CHECK(cudnnConvolutionBackwardBias(cudnn_, &one, p.y.get(), dy, &zero, p.bias.get(), dbias));
    DRT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(cudnn_, &one, p.x.get(), x, p.y.get(), dy, p.conv.get(),
                                                   p.backward_filter, workspace_, workspace_bytes_, &zero, p.w.get(),
                                                   dw));
    if (dx)
      DRT_CUDNN_CHECK(cudnnConvolutionBackwardData(cudnn_, &one, p.w.get(), w, p.y.get(), dy, p.conv.get(),
                                                   p.backward_data, workspace_, workspace_bytes_, &zero, p.x.get(),
                                                   dx));
  }

  // cuDNN max pooling; its backward finds each window's maximum again from x and y, so the
  // argmax buffer the CPU backend fills is not used here.
  void maxpool2d_forward(const Pool2dShape& s, const float* x, float* y, std::int32_t*) override {
    cuda::use_device(device_);
    const PoolPlan& p = pool_plan(s, PoolKind::kMax);
    const float one = 1.0f, zero = 0.0f;
    DRT_CUDNN_CHECK(cudnnPoolingForward(cudnn_, p.pool.get(), &one, p.x.get(), x, &zero, p.y.get(), y));
  }
  void maxpool2d_backward(const Pool2dShape& s, const float* x, const float* y, const float* dy, const std::int32_t*,
                          float* dx) override {
    cuda::use_device(device_);
    const PoolPlan& p = pool_plan(s, PoolKind::kMax);
    const float one = 1.0f, zero = 0.0f;
    DRT_CUDNN_CHECK(cudnnPoolingBackward(cudnn_, p.pool.get(), &one, p.y.get(), y, p.y.get(), dy, p.x.get(), x, &zero,
                                         p.x.get(), dx));
  }

  // Average pooling counting the padded cells (CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING: the
  // divisor is window * window everywhere). The backward is drtrain's gather kernel
  // (kernels/pooling.cu): cudnnPoolingBackward would want the forward's x and y, which the
  // contract does not pass.
  void avgpool2d_forward(const Pool2dShape& s, const float* x, float* y) override {
    cuda::use_device(device_);
    const PoolPlan& p = pool_plan(s, PoolKind::kAverage);
    const float one = 1.0f, zero = 0.0f;
    DRT_CUDNN_CHECK(cudnnPoolingForward(cudnn_, p.pool.get(), &one, p.x.get(), x, &zero, p.y.get(), y));
  }
  void avgpool2d_backward(const Pool2dShape& s, const float* dy, float* dx) override {
    cuda::use_device(device_);
    check_pool_shape(s);
    kernels::avgpool2d_backward(pool_geometry(s), dy, dx, stream_);
  }
  void global_avgpool_forward(const float* x, float* y, std::size_t planes, std::size_t plane_size) override {
    cuda::use_device(device_);
    kernels::global_avgpool_forward(x, y, planes, plane_size, stream_);
  }
  void global_avgpool_backward(const float* dy, float* dx, std::size_t planes, std::size_t plane_size) override {
    cuda::use_device(device_);
    kernels::global_avgpool_backward(dy, dx, planes, plane_size, stream_);
  }

  void batchnorm_forward_train(const BatchNormShape& s, const float* x, const float* gamma, const float* beta,
                               float eps, float* y, float* save_mean, float* save_inv_std, float momentum,
                               const float* running_mean, const float* running_var, float* new_mean,
                               float* new_var) override {
    cuda::use_device(device_);
    check_batchnorm_eps(eps);
    const bool running = new_mean != nullptr;
    if (running) {
      DRT_ASSERT(new_var != nullptr && running_mean != nullptr && running_var != nullptr,
                 "batchnorm_forward_train: new_mean without new_var, running_mean or running_var");
      if (s.count() <= 1)
        throw Error(str(rank_tag(), ": batch normalisation of ", s.batch, " x ", s.spatial,
                        " value(s) per channel in training mode: the running variance needs more than one value "
                        "per channel (use a larger batch, or drop the last partial batch)"));
    }
    const BatchNormPlan& p = batchnorm_plan(s);
    const std::size_t stats_bytes = static_cast<std::size_t>(s.channels) * sizeof(float);
    if (running) {
      // cuDNN updates its running statistics in place; the contract keeps running_* unchanged.
      if (new_mean != running_mean)
        DRT_CUDA_CHECK(cudaMemcpyAsync(new_mean, running_mean, stats_bytes, cudaMemcpyDeviceToDevice, stream_));
      if (new_var != running_var)
        DRT_CUDA_CHECK(cudaMemcpyAsync(new_var, running_var, stats_bytes, cudaMemcpyDeviceToDevice, stream_));
    }
    const float one = 1.0f, zero = 0.0f;
    DRT_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(cudnn_, kBatchNormMode, &one, &zero, p.x.get(), x, p.x.get(),
                                                           y, p.stats.get(), gamma, beta, static_cast<double>(momentum),
                                                           running ? new_mean : nullptr, running ? new_var : nullptr,
                                                           static_cast<double>(eps), save_mean, save_inv_std));
  }

  void batchnorm_forward_infer(const BatchNormShape& s, const float* x, const float* gamma, const float* beta,
                               const float* running_mean, const float* running_var, float eps, float* y) override {
    cuda::use_device(device_);
    check_batchnorm_eps(eps);
    const BatchNormPlan& p = batchnorm_plan(s);
    const float one = 1.0f, zero = 0.0f;
    DRT_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(cudnn_, kBatchNormMode, &one, &zero, p.x.get(), x,
                                                            p.x.get(), y, p.stats.get(), gamma, beta, running_mean,
                                                            running_var, static_cast<double>(eps)));
  }

  void batchnorm_backward(const BatchNormShape& s, const float* x, const float* dy, const float* gamma,
                          const float* save_mean, const float* save_inv_std, float eps, float* dx, float* dgamma,
                          float* dbeta) override {
    cuda::use_device(device_);
    const BatchNormPlan& p = batchnorm_plan(s);
    if (!dx) {
      // cuDNN always writes dx: a scratch buffer (grown once, for the largest shape) takes it.
      grow(bn_dx_scratch_, bn_dx_scratch_bytes_, static_cast<std::size_t>(s.channels) * s.count() * sizeof(float));
      dx = static_cast<float*>(bn_dx_scratch_);
    }
    check_batchnorm_eps(eps);
    const float one = 1.0f, zero = 0.0f;
    // Data and parameter gradients overwritten (beta factors 0).
    DRT_CUDNN_CHECK(cudnnBatchNormalizationBackward(cudnn_, kBatchNormMode, &one, &zero, &one, &zero, p.x.get(), x,
                                                    p.x.get(), dy, p.x.get(), dx, p.stats.get(), gamma, dgamma, dbeta,
                                                    static_cast<double>(eps), save_mean, save_inv_std));
  }

  void dropout_forward(const DropoutShape& s, const float* x, float* y, std::uint8_t* mask) override {
    cuda::use_device(device_);
    check_dropout_p(s.p);
    kernels::dropout_forward(s.key, s.first_sample, s.rows, s.per_sample, s.p, x, y, mask, stream_);
  }
  void dropout_backward(const DropoutShape& s, const float* dy, const std::uint8_t* mask, float* dx) override {
    cuda::use_device(device_);
    check_dropout_p(s.p);
    kernels::dropout_backward(s.rows, s.per_sample, s.p, dy, mask, dx, stream_);
  }

  // The language-model operations: drtrain's kernels (kernels/sequence.cu).
  void layernorm_forward(const LayerNormShape& s, const float* x, const float* gamma, const float* beta, float* y,
                         float* mean, float* inv_std) override {
    cuda::use_device(device_);
    kernels::layernorm_forward(s.rows, s.dim, s.eps, x, gamma, beta, y, mean, inv_std, stream_);
  }
  void layernorm_backward(const LayerNormShape& s, const float* x, const float* dy, const float* gamma,
                          const float* mean, const float* inv_std, float* dx, float* dgamma, float* dbeta) override {
    cuda::use_device(device_);
    kernels::layernorm_backward(s.rows, s.dim, x, dy, gamma, mean, inv_std, dx, dgamma, dbeta, stream_);
  }
  void embedding_forward(const EmbeddingShape& s, const float* ids, const float* table, float* y) override {
    cuda::use_device(device_);
    kernels::embedding_forward(s.rows, s.vocab, s.dim, ids, table, y, stream_);
  }
  void embedding_backward(const EmbeddingShape& s, const float* ids, const float* dy, float* dtable,
                          bool accumulate) override {
    cuda::use_device(device_);
    kernels::embedding_backward(s.rows, s.vocab, s.dim, ids, dy, dtable, accumulate, stream_);
  }
  void attention_forward(const AttentionShape& s, const float* qkv, float* y, float* lse) override {
    cuda::use_device(device_);
    kernels::attention_forward(attention_geometry(s), qkv, y, lse, stream_);
  }
  void attention_backward(const AttentionShape& s, const float* qkv, const float* y, const float* lse, const float* dy,
                          float* dqkv) override {
    cuda::use_device(device_);
    const kernels::AttentionGeometry g = attention_geometry(s);
    grow(attention_scratch_, attention_scratch_bytes_,
         static_cast<std::size_t>(s.batch) * s.heads * s.length * sizeof(float));
    kernels::attention_backward(g, qkv, y, lse, dy, dqkv, static_cast<float*>(attention_scratch_), stream_);
  }

  void copy_rows(float* dst, std::size_t dst_stride, const float* src, std::size_t src_stride, std::size_t row_floats,
                 std::size_t rows) override {
    if (rows == 0 || row_floats == 0) return;
    cuda::use_device(device_);
    const std::size_t width = row_floats * sizeof(float);
    if (rows == 1 || (dst_stride == row_floats && src_stride == row_floats)) {
      // One row (whose strides do not matter, and cudaMemcpy2D would reject one below the row),
      // or rows back to back: one contiguous copy.
      DRT_CUDA_CHECK(cudaMemcpyAsync(dst, src, width * rows, cudaMemcpyDeviceToDevice, stream_));
      return;
    }
    DRT_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_stride * sizeof(float), src, src_stride * sizeof(float), width, rows,
                                     cudaMemcpyDeviceToDevice, stream_));
  }

  void accumulate_softmax_cross_entropy(const float* logits, const std::int32_t* labels, int rows, int classes,
                                        float* dlogits, float grad_scale, float label_smoothing) override {
    if (!(label_smoothing >= 0.0f && label_smoothing < 1.0f))
      throw Error(str(rank_tag(), ": label smoothing ", label_smoothing, " is outside [0, 1)"));
    if (rows == 0) return;
    cuda::use_device(device_);
    if (static_cast<std::size_t>(rows) > row_scratch_rows_) {
      // Growing waits for the stream, whose queued kernels may use the old buffer; it happens for
      // the first (largest) batch only.
      DRT_CUDA_CHECK(cudaStreamSynchronize(stream_));
      if (row_scratch_) DRT_CUDA_CHECK(cudaFree(row_scratch_));
      row_scratch_ = nullptr;
      DRT_CUDA_CHECK(cudaMalloc(&row_scratch_, static_cast<std::size_t>(rows) * sizeof(double)));
      row_scratch_rows_ = static_cast<std::size_t>(rows);
    }
    kernels::softmax_cross_entropy(logits, labels, rows, classes, dlogits, grad_scale, label_smoothing, row_scratch_,
                                   loss_sums_, stream_);
  }

  LossSums take_loss_sums() override {
    cuda::use_device(device_);
    // The only mid-run host wait of a training step: the loss is needed on the host. Pinned
    // memory makes the copy a true async DMA; the stream sync orders it after the kernels.
    DRT_CUDA_CHECK(cudaMemcpyAsync(loss_host_, loss_sums_, 3 * sizeof(double), cudaMemcpyDeviceToHost, stream_));
    DRT_CUDA_CHECK(cudaMemsetAsync(loss_sums_, 0, 3 * sizeof(double), stream_));
    DRT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (loss_host_[2] > 0.0)
      throw Error(str(rank_tag(), ": ", static_cast<long long>(loss_host_[2]),
                      " label(s) outside [0, classes) in a batch on ", name(), "; check the dataset's labels"));
    LossSums sums;
    sums.loss = loss_host_[0];
    sums.correct = static_cast<std::int64_t>(loss_host_[1]);
    return sums;
  }

 private:
  const ConvPlan& conv_plan(const Conv2dShape& s) {
    const ConvKey key{s.batch, s.in_channels, s.height, s.width, s.out_channels, s.kernel, s.stride, s.pad, s.groups};
    auto it = conv_plans_.find(key);
    if (it != conv_plans_.end()) return *it->second;
    if (s.groups < 1 || s.in_channels % s.groups != 0 || s.out_channels % s.groups != 0)
      throw Error(str(rank_tag(), ": a convolution of ", s.in_channels, " to ", s.out_channels, " channels in ",
                      s.groups, " groups: the groups must divide both channel counts"));
    auto p = std::make_unique<ConvPlan>();
    set_nchw(p->x, s.batch, s.in_channels, s.height, s.width);
    set_nchw(p->y, s.batch, s.out_channels, s.out_height(), s.out_width());
    set_nchw(p->bias, 1, s.out_channels, 1, 1);
    // Grouped: the filter is [out x in/groups x k x k], group g of the input feeds group g of the
    // output (as the contract's weight layout).
    DRT_CUDNN_CHECK(cudnnSetFilter4dDescriptor(p->w.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, s.out_channels,
                                               s.in_per_group(), s.kernel, s.kernel));
    DRT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(p->conv.get(), s.pad, s.pad, s.stride, s.stride, 1, 1,
                                                    CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    DRT_CUDNN_CHECK(cudnnSetConvolutionGroupCount(p->conv.get(), s.groups));
    DRT_CUDNN_CHECK(
        cudnnSetConvolutionMathType(p->conv.get(), options_.allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
    constexpr int kAsk = 16;  // more than cuDNN has algorithms of each kind
    // Timing (Find) picks the fastest, but which one wins can change from run to run, and with it
    // the rounding; --deterministic promises bitwise repeatable runs, so there the choice comes
    // from cuDNN's heuristics (_v7: a fixed ranking for the shape, GPU and library version).
    const bool timed = !options_.deterministic;
    int got = 0;
    std::vector<cudnnConvolutionFwdAlgoPerf_t> fwd(kAsk);
    DRT_CUDNN_CHECK(timed ? cudnnFindConvolutionForwardAlgorithm(cudnn_, p->x.get(), p->w.get(), p->conv.get(),
                                                                 p->y.get(), kAsk, &got, fwd.data())
                          : cudnnGetConvolutionForwardAlgorithm_v7(cudnn_, p->x.get(), p->w.get(), p->conv.get(),
                                                                   p->y.get(), kAsk, &got, fwd.data()));
    const auto f = pick_algorithm(fwd, got, options_.deterministic, "forward", s);
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> bwd_data(kAsk);
    DRT_CUDNN_CHECK(timed ? cudnnFindConvolutionBackwardDataAlgorithm(cudnn_, p->w.get(), p->y.get(), p->conv.get(),
                                                                      p->x.get(), kAsk, &got, bwd_data.data())
                          : cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnn_, p->w.get(), p->y.get(), p->conv.get(),
                                                                        p->x.get(), kAsk, &got, bwd_data.data()));
    const auto d = pick_algorithm(bwd_data, got, options_.deterministic, "backward-data", s);
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> bwd_filter(kAsk);
    DRT_CUDNN_CHECK(timed ? cudnnFindConvolutionBackwardFilterAlgorithm(cudnn_, p->x.get(), p->y.get(), p->conv.get(),
                                                                        p->w.get(), kAsk, &got, bwd_filter.data())
                          : cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnn_, p->x.get(), p->y.get(), p->conv.get(),
                                                                          p->w.get(), kAsk, &got, bwd_filter.data()));
    const auto b = pick_algorithm(bwd_filter, got, options_.deterministic, "backward-filter", s);
    p->forward = f.algo;
    p->backward_data = d.algo;
    p->backward_filter = b.algo;
    p->workspace = std::max({f.memory, d.memory, b.memory});
    reserve_workspace(p->workspace);
    return *(conv_plans_[key] = std::move(p));
  }

  enum class PoolKind { kMax, kAverage };

  // The contract's limits (Pool2dShape), checked when a shape's plan is made.
  static void check_pool_shape(const Pool2dShape& s) {
    if (s.window < 1 || s.stride < 1 || s.pad < 0 || s.pad > s.window / 2)
      throw Error(str(rank_tag(), ": pooling with window ", s.window, ", stride ", s.stride, " and padding ", s.pad,
                      ": needs window >= 1, stride >= 1 and 0 <= padding <= window / 2"));
  }

  const PoolPlan& pool_plan(const Pool2dShape& s, PoolKind kind) {
    const PoolKey key{s.batch, s.channels, s.height, s.width, s.window, s.stride, s.pad, static_cast<int>(kind)};
    auto it = pool_plans_.find(key);
    if (it != pool_plans_.end()) return *it->second;
    check_pool_shape(s);
    auto p = std::make_unique<PoolPlan>();
    set_nchw(p->x, s.batch, s.channels, s.height, s.width);
    set_nchw(p->y, s.batch, s.channels, s.out_height(), s.out_width());
    // Max: the deterministic mode, one winner per window like the CPU backend's argmax; padded
    // cells never win. Average: padded cells count as zeros in a window * window divisor.
    const cudnnPoolingMode_t mode =
        kind == PoolKind::kMax ? CUDNN_POOLING_MAX_DETERMINISTIC : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
    DRT_CUDNN_CHECK(cudnnSetPooling2dDescriptor(p->pool.get(), mode, CUDNN_NOT_PROPAGATE_NAN, s.window, s.window, s.pad,
                                                s.pad, s.stride, s.stride));
    // cuDNN's output size must be the contract's (rounded down).
    int n = 0, c = 0, h = 0, w = 0;
    DRT_CUDNN_CHECK(cudnnGetPooling2dForwardOutputDim(p->pool.get(), p->x.get(), &n, &c, &h, &w));
    DRT_ASSERT(n == s.batch && c == s.channels && h == s.out_height() && w == s.out_width(),
               str("cuDNN pools ", s.height, "x", s.width, " to ", h, "x", w, ", the contract to ", s.out_height(), "x",
                   s.out_width()));
    return *(pool_plans_[key] = std::move(p));
  }

  const BatchNormPlan& batchnorm_plan(const BatchNormShape& s) {
    const BatchNormKey key{s.batch, s.channels, s.spatial};
    auto it = bn_plans_.find(key);
    if (it != bn_plans_.end()) return *it->second;
    auto p = std::make_unique<BatchNormPlan>();
    set_nchw(p->x, s.batch, s.channels, s.spatial, 1);
    DRT_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(p->stats.get(), p->x.get(), kBatchNormMode));
    return *(bn_plans_[key] = std::move(p));
  }

  // cuDNN's lower limit (CUDNN_BN_MIN_EPSILON: 1e-5 before cuDNN 7.5, 0 since).
  static void check_batchnorm_eps(float eps) {
    if (!(static_cast<double>(eps) >= CUDNN_BN_MIN_EPSILON))
      throw Error(str(rank_tag(), ": batch normalisation eps ", eps, " is below cuDNN's minimum ", CUDNN_BN_MIN_EPSILON,
                      " (CUDNN_BN_MIN_EPSILON)"));
  }

  static void check_dropout_p(float p) {
    if (!(p >= 0.0f && p < 1.0f)) throw Error(str(rank_tag(), ": dropout probability ", p, " is outside [0, 1)"));
  }

  void reserve_workspace(std::size_t bytes) { grow(workspace_, workspace_bytes_, bytes); }

  // Grows a device scratch buffer to at least `bytes`. Growing waits for the stream, whose queued
  // work may use the old buffer; it happens on the first use of a (larger) shape.
  kernels::AttentionGeometry attention_geometry(const AttentionShape& s) const {
    if (!kernels::attention_supported(s.head_dim))
      throw Error(str(rank_tag(), ": attention with ", s.head_dim,
                      " values per head on a GPU: drtrain's kernel takes at most 256 (use more heads)"));
    check_dropout_p(s.dropout);
    kernels::AttentionGeometry g;
    g.batch = s.batch, g.length = s.length, g.heads = s.heads, g.head_dim = s.head_dim;
    g.dropout = s.dropout, g.key = s.key, g.first_sample = s.first_sample;
    return g;
  }

  void grow(void*& buffer, std::size_t& size, std::size_t bytes) {
    if (bytes <= size) return;
    DRT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (buffer) DRT_CUDA_CHECK(cudaFree(buffer));
    buffer = nullptr;
    size = 0;
    DRT_CUDA_CHECK(cudaMalloc(&buffer, bytes));
    size = bytes;
  }

  using ConvKey = std::array<int, 9>;  // batch, in, h, w, out, kernel, stride, pad, groups
  using PoolKey = std::array<int, 8>;  // batch, channels, h, w, window, stride, pad, kind
  using BatchNormKey = std::array<int, 3>;
  CudaOptions options_;
  int device_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  std::array<cudaEvent_t, kMarks> marks_{};
  double* loss_sums_ = nullptr;  // device: loss, correct, bad labels
  double* loss_host_ = nullptr;  // pinned
  double* row_scratch_ = nullptr;
  std::size_t row_scratch_rows_ = 0;
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_ = 0;
  void* bn_dx_scratch_ = nullptr;  // dx of a batch norm backward without dx
  std::size_t bn_dx_scratch_bytes_ = 0;
  void* attention_scratch_ = nullptr;  // attention backward's dO . O per row
  std::size_t attention_scratch_bytes_ = 0;
  std::map<ConvKey, std::unique_ptr<ConvPlan>> conv_plans_;
  std::map<PoolKey, std::unique_ptr<PoolPlan>> pool_plans_;
  std::map<BatchNormKey, std::unique_ptr<BatchNormPlan>> bn_plans_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const CudaOptions& options) {
  const CudaDevices gpus = query_cuda_devices();
  if (options.device < 0 || options.device >= gpus.count)
    throw ConfigError(str("GPU ", options.device,
                          " is not available: ", gpus.count == 0 ? gpus.why_none : str(gpus.count, " GPU(s) visible"),
                          " (CUDA_VISIBLE_DEVICES=", gpus.visible_env, ")"));
  return std::make_unique<CudaBackend>(options);
}

void* cuda_stream(Backend& cuda_backend) {
  auto* b = dynamic_cast<CudaBackend*>(&cuda_backend);
  DRT_ASSERT(b != nullptr, "cuda_stream() of a backend that is not CUDA");
  return b->stream();
}

int cuda_device_of(Backend& cuda_backend) {
  auto* b = dynamic_cast<CudaBackend*>(&cuda_backend);
  DRT_ASSERT(b != nullptr, "cuda_device_of() of a backend that is not CUDA");
  return b->device();
}

}  // namespace drt::backend
