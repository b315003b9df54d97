// CUDA kernels of the elementwise launchers (launchers.hpp): bias add and bias gradient over the
// rows of a matrix, ReLU forward and backward, axpby, scale. The per-element math is that of
// rules.hpp and of the CPU references (reference.cpp).
//
// All but bias_grad_rows are bandwidth-bound: grid-stride loops over float4 (16-byte loads and
// stores) when every pointer is 16-byte aligned (backend buffers are: cudaMalloc), then the
// n % 4 tail element by element; scalar throughout when any pointer is not aligned.
// bias_grad_rows gives each column one thread that sums the rows in order, so its result is
// deterministic and equals the CPU reference bit for bit.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "drtrain/kernels/launchers.hpp"
#include "grid_stride.cuh"

namespace drt::kernels {
namespace {

using namespace detail;

bool aligned16(const void* p) { return aligned(p, 16); }

__device__ void add_to(float& v, float b) { v += b; }
__device__ void add_to(float4& v, const float4& b) {
  v.x += b.x;
  v.y += b.y;
  v.z += b.z;
  v.w += b.w;
}

// y[r][j] += bias[j]. Each thread walks the flat index i with its column j = i % cols kept up to
// date by addition (one division per thread, not per element). On the vector path (cols % 4 == 0
// and both pointers aligned) the unit is a float4 and cols counts float4s.
template <typename T>
__global__ void add_bias_kernel(T* y, const T* bias, std::size_t units, std::size_t cols) {
  const std::size_t stride = grid_threads();
  const std::size_t column_step = stride % cols;
  std::size_t i = first_index();
  std::size_t j = i % cols;
  for (; i < units; i += stride) {
    T v = y[i];
    add_to(v, bias[j]);
    y[i] = v;
    j += column_step;
    if (j >= cols) j -= cols;
  }
}

// grad_bias[j] = dy[0][j] + dy[1][j] + ... in row order, as the CPU reference adds them.
// Neighbouring threads read neighbouring columns, so the loads of a warp coalesce.
// One thread per column, so only `cols` threads: the loop is bound by memory latency, not
// bandwidth. Loading kAhead rows before adding them (in row order, so the sum is unchanged)
// keeps kAhead loads in flight per thread instead of one (measured on an H200 with 1024 columns:
// 36 GB/s with one; see bench/RESULTS.md for what this reaches).
__global__ void bias_grad_kernel(const float* dy, float* grad_bias, std::size_t rows, std::size_t cols) {
  constexpr std::size_t kAhead = 16;
  for (std::size_t j = first_index(); j < cols; j += grid_threads()) {
    float sum = 0.0f;
    std::size_t r = 0;
    for (; r + kAhead <= rows; r += kAhead) {
      float v[kAhead];
#pragma unroll
      for (std::size_t k = 0; k < kAhead; ++k) v[k] = dy[(r + k) * cols + j];
#pragma unroll
      for (std::size_t k = 0; k < kAhead; ++k) sum += v[k];
    }
    for (; r < rows; ++r) sum += dy[r * cols + j];
    grad_bias[j] = sum;
  }
}

// y = relu(x); y == x allowed (each element is read before it is written, by the same thread).
__global__ void relu_forward_kernel(const float* x, float* y, std::size_t n, bool vector) {
  const auto* x4 = reinterpret_cast<const float4*>(x);
  auto* y4 = reinterpret_cast<float4*>(y);
  for_each_element(
      n, vector,
      [&](std::size_t q) {
        const float4 v = x4[q];
        y4[q] = make_float4(relu(v.x), relu(v.y), relu(v.z), relu(v.w));
      },
      [&](std::size_t i) { y[i] = relu(x[i]); });
}

// dx = relu_grad(y, dy); dx == dy allowed.
__global__ void relu_backward_kernel(const float* y, const float* dy, float* dx, std::size_t n, bool vector) {
  const auto* y4 = reinterpret_cast<const float4*>(y);
  const auto* dy4 = reinterpret_cast<const float4*>(dy);
  auto* dx4 = reinterpret_cast<float4*>(dx);
  for_each_element(
      n, vector,
      [&](std::size_t q) {
        const float4 a = y4[q], d = dy4[q];
        dx4[q] = make_float4(relu_grad(a.x, d.x), relu_grad(a.y, d.y), relu_grad(a.z, d.z), relu_grad(a.w, d.w));
      },
      [&](std::size_t i) { dx[i] = relu_grad(y[i], dy[i]); });
}

// y = a * x + b * y (nvcc may fuse one product into an FMA: the last bit can differ from the CPU).
__global__ void axpby_kernel(float a, const float* x, float b, float* y, std::size_t n, bool vector) {
  const auto* x4 = reinterpret_cast<const float4*>(x);
  auto* y4 = reinterpret_cast<float4*>(y);
  for_each_element(
      n, vector,
      [&](std::size_t q) {
        const float4 u = x4[q], v = y4[q];
        y4[q] = make_float4(a * u.x + b * v.x, a * u.y + b * v.y, a * u.z + b * v.z, a * u.w + b * v.w);
      },
      [&](std::size_t i) { y[i] = a * x[i] + b * y[i]; });
}

__global__ void scale_kernel(float a, float* x, std::size_t n, bool vector) {
  auto* x4 = reinterpret_cast<float4*>(x);
  for_each_element(
      n, vector,
      [&](std::size_t q) {
        const float4 v = x4[q];
        x4[q] = make_float4(a * v.x, a * v.y, a * v.z, a * v.w);
      },
      [&](std::size_t i) { x[i] *= a; });
}

}  // namespace

void add_bias_rows(float* y, const float* bias, int rows, int cols, Stream stream) {
  if (rows <= 0 || cols <= 0) return;
  const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
  if (cols % 4 == 0 && aligned16(y) && aligned16(bias)) {
    add_bias_kernel<float4><<<grid(n, true), kBlock, 0, cuda(stream)>>>(
        reinterpret_cast<float4*>(y), reinterpret_cast<const float4*>(bias), n / 4, static_cast<std::size_t>(cols) / 4);
  } else {
    add_bias_kernel<float><<<grid(n, false), kBlock, 0, cuda(stream)>>>(y, bias, n, static_cast<std::size_t>(cols));
  }
  DRT_CUDA_LAUNCH_CHECK("add_bias_rows");
}

void bias_grad_rows(const float* dy, float* grad_bias, int rows, int cols, Stream stream) {
  if (cols <= 0) return;
  // rows == 0 still runs: the gradient is then zero, as on the CPU.
  const std::size_t r = rows > 0 ? static_cast<std::size_t>(rows) : 0;
  bias_grad_kernel<<<cuda::grid_for(static_cast<std::size_t>(cols), kBlock), kBlock, 0, cuda(stream)>>>(
      dy, grad_bias, r, static_cast<std::size_t>(cols));
  DRT_CUDA_LAUNCH_CHECK("bias_grad_rows");
}

void relu_forward(const float* x, float* y, std::size_t n, Stream stream) {
  if (n == 0) return;
  const bool vector = aligned16(x) && aligned16(y);
  relu_forward_kernel<<<grid(n, vector), kBlock, 0, cuda(stream)>>>(x, y, n, vector);
  DRT_CUDA_LAUNCH_CHECK("relu_forward");
}

void relu_backward(const float* y, const float* dy, float* dx, std::size_t n, Stream stream) {
  if (n == 0) return;
  const bool vector = aligned16(y) && aligned16(dy) && aligned16(dx);
  relu_backward_kernel<<<grid(n, vector), kBlock, 0, cuda(stream)>>>(y, dy, dx, n, vector);
  DRT_CUDA_LAUNCH_CHECK("relu_backward");
}

void axpby(float a, const float* x, float b, float* y, std::size_t n, Stream stream) {
  if (n == 0) return;
  const bool vector = aligned16(x) && aligned16(y);
  axpby_kernel<<<grid(n, vector), kBlock, 0, cuda(stream)>>>(a, x, b, y, n, vector);
  DRT_CUDA_LAUNCH_CHECK("axpby");
}

void scale(float a, float* x, std::size_t n, Stream stream) {
  if (n == 0) return;
  const bool vector = aligned16(x);
  scale_kernel<<<grid(n, vector), kBlock, 0, cuda(stream)>>>(a, x, n, vector);
  DRT_CUDA_LAUNCH_CHECK("scale");
}

}  // namespace drt::kernels
