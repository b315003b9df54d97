// The CUDA backend: one GPU tower's device. GEMMs go to cuBLAS, convolution and pooling to
// cuDNN's legacy (v7-style) API, everything else to drtrain's kernels (kernels/). All work is
// queued on the backend's own stream; the calls return before the GPU has finished, except
// copy_to_host, take_loss_sums and synchronize, which wait for the stream.
//
// cuDNN choices (docs/ARCHITECTURE.md, "GPU path"): the legacy convolution API
// (cudnnConvolutionForward/BackwardData/BackwardFilter) fits our fixed NCHW float32 layers with
// a few lines per call; the graph API would buy fusions we do not need yet. Algorithms are
// chosen per shape by cudnnFind*Algorithm (it times every algorithm once, on first use of a
// shape, batch size included, so an epoch's last partial batch pays one more search) rather than
// by heuristics, keeping the fastest whose workspace fits kMaxWorkspace; with
// --deterministic only algorithms cuDNN reports as deterministic qualify. Math: FMA only (exact
// float32, comparable with the CPU) unless TF32 is allowed (--cuda-tf32).
#include "drtrain/backend/cuda_backend.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
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

// Picks the first (fastest: cuDNN sorts by time) usable result of a cudnnFind*Algorithm call.
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
                  s.in_channels, "x", s.height, "x", s.width, " by ", s.out_channels, "x", s.kernel, "x", s.kernel,
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
    if (workspace_) cudaFree(workspace_);
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

  std::size_t conv2d_workspace_floats(const Conv2dShape&) const override { return 0; }  // the backend's own

  void conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y,
                      float*) override {
    cuda::use_device(device_);
    const ConvPlan& p = conv_plan(s);
    const float one = 1.0f, zero = 0.0f;
    DRT_CUDNN_CHECK(cudnnConvolutionForward(cudnn_, &one, p.x.get(), x, p.w.get(), w, p.conv.get(), p.forward,
                                            workspace_, workspace_bytes_, &zero, p.y.get(), y));
    DRT_CUDNN_CHECK(cudnnAddTensor(cudnn_, &one, p.bias.get(), bias, &one, p.y.get(), y));
  }

  void conv2d_backward(const Conv2dShape& s, const float* x, const float* w, const float* dy, float* dw, float* dbias,
                       float* dx, float*) override {
    cuda::use_device(device_);
    const ConvPlan& p = conv_plan(s);
    const float one = 1.0f, zero = 0.0f;
    DRT_CUDNN_CHECK(cudnnConvolutionBackwardBias(cudnn_, &one, p.y.get(), dy, &zero, p.bias.get(), dbias));
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
    const PoolPlan& p = pool_plan(s);
    const float one = 1.0f, zero = 0.0f;
    DRT_CUDNN_CHECK(cudnnPoolingForward(cudnn_, p.pool.get(), &one, p.x.get(), x, &zero, p.y.get(), y));
  }
  void maxpool2d_backward(const Pool2dShape& s, const float* x, const float* y, const float* dy, const std::int32_t*,
                          float* dx) override {
    cuda::use_device(device_);
    const PoolPlan& p = pool_plan(s);
    const float one = 1.0f, zero = 0.0f;
    DRT_CUDNN_CHECK(cudnnPoolingBackward(cudnn_, p.pool.get(), &one, p.y.get(), y, p.y.get(), dy, p.x.get(), x, &zero,
                                         p.x.get(), dx));
  }

  void accumulate_softmax_cross_entropy(const float* logits, const std::int32_t* labels, int rows, int classes,
                                        float* dlogits, float grad_scale) override {
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
    kernels::softmax_cross_entropy(logits, labels, rows, classes, dlogits, grad_scale, row_scratch_, loss_sums_,
                                   stream_);
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
    const auto key =
        std::make_tuple(s.batch, s.in_channels, s.height, s.width, s.out_channels, s.kernel, s.stride, s.pad);
    auto it = conv_plans_.find(key);
    if (it != conv_plans_.end()) return *it->second;
    auto p = std::make_unique<ConvPlan>();
    set_nchw(p->x, s.batch, s.in_channels, s.height, s.width);
    set_nchw(p->y, s.batch, s.out_channels, s.out_height(), s.out_width());
    set_nchw(p->bias, 1, s.out_channels, 1, 1);
    DRT_CUDNN_CHECK(cudnnSetFilter4dDescriptor(p->w.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, s.out_channels,
                                               s.in_channels, s.kernel, s.kernel));
    DRT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(p->conv.get(), s.pad, s.pad, s.stride, s.stride, 1, 1,
                                                    CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    DRT_CUDNN_CHECK(
        cudnnSetConvolutionMathType(p->conv.get(), options_.allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
    constexpr int kAsk = 16;  // more than cuDNN has algorithms of each kind
    int got = 0;
    std::vector<cudnnConvolutionFwdAlgoPerf_t> fwd(kAsk);
    DRT_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithm(cudnn_, p->x.get(), p->w.get(), p->conv.get(), p->y.get(),
                                                         kAsk, &got, fwd.data()));
    const auto f = pick_algorithm(fwd, got, options_.deterministic, "forward", s);
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> bwd_data(kAsk);
    DRT_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithm(cudnn_, p->w.get(), p->y.get(), p->conv.get(), p->x.get(),
                                                              kAsk, &got, bwd_data.data()));
    const auto d = pick_algorithm(bwd_data, got, options_.deterministic, "backward-data", s);
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> bwd_filter(kAsk);
    DRT_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithm(cudnn_, p->x.get(), p->y.get(), p->conv.get(),
                                                                p->w.get(), kAsk, &got, bwd_filter.data()));
    const auto b = pick_algorithm(bwd_filter, got, options_.deterministic, "backward-filter", s);
    p->forward = f.algo;
    p->backward_data = d.algo;
    p->backward_filter = b.algo;
    p->workspace = std::max({f.memory, d.memory, b.memory});
    reserve_workspace(p->workspace);
    return *(conv_plans_[key] = std::move(p));
  }

  const PoolPlan& pool_plan(const Pool2dShape& s) {
    const auto key = std::make_tuple(s.batch, s.channels, s.height, s.width, s.window, s.stride, 0, 0);
    auto it = pool_plans_.find(key);
    if (it != pool_plans_.end()) return *it->second;
    auto p = std::make_unique<PoolPlan>();
    set_nchw(p->x, s.batch, s.channels, s.height, s.width);
    set_nchw(p->y, s.batch, s.channels, s.out_height(), s.out_width());
    // The deterministic max mode: one winner per window, like the CPU backend's argmax.
    DRT_CUDNN_CHECK(cudnnSetPooling2dDescriptor(p->pool.get(), CUDNN_POOLING_MAX_DETERMINISTIC, CUDNN_NOT_PROPAGATE_NAN,
                                                s.window, s.window, 0, 0, s.stride, s.stride));
    return *(pool_plans_[key] = std::move(p));
  }

  void reserve_workspace(std::size_t bytes) {
    if (bytes <= workspace_bytes_) return;
    // Growing waits for the stream, whose queued work may use the old workspace; it happens while
    // plans are made, on the first use of a shape.
    DRT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (workspace_) DRT_CUDA_CHECK(cudaFree(workspace_));
    workspace_ = nullptr;
    DRT_CUDA_CHECK(cudaMalloc(&workspace_, bytes));
    workspace_bytes_ = bytes;
  }

  using ShapeKey = std::tuple<int, int, int, int, int, int, int, int>;
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
  std::map<ShapeKey, std::unique_ptr<ConvPlan>> conv_plans_;
  std::map<ShapeKey, std::unique_ptr<PoolPlan>> pool_plans_;
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
