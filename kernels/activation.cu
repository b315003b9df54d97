// CUDA kernels of the activation and dropout launchers (launchers.hpp): GELU (exact, erf, and
// the tanh approximation),
// tanh and the logistic sigmoid, forward and backward, and inverted dropout. The per-element
// math is that of rules.hpp, as in the CPU references (reference.cpp).
//
// The activations are bandwidth-bound maps over one or two input arrays: grid-stride loops over
// float4 when every pointer is 16-byte aligned, then the n % 4 tail, as in elementwise.cu. They
// differ from the CPU in the last bits only where the device's erff/expf/tanhf do (a few ulp).
//
// Dropout: one thread per element. The mask is a hash of (key, global sample, element within
// the sample), rules.hpp dropout_keep, so the GPU draws exactly the CPU's mask, whatever the
// split of the batch over towers. Each thread keeps its element's (row, element) pair up to date
// by addition as it strides (no division per element).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "drtrain/kernels/launchers.hpp"
#include "grid_stride.cuh"

namespace drt::kernels {
namespace {

using namespace detail;

bool aligned16(const void* p) { return aligned(p, 16); }

struct Gelu {
  __device__ float operator()(float x) const { return gelu(x); }
};
struct GeluTanh {
  __device__ float operator()(float x) const { return gelu_tanh(x); }
};
struct GeluTanhGrad {
  __device__ float operator()(float x, float dy) const { return gelu_tanh_grad(x, dy); }
};
struct Tanh {
  __device__ float operator()(float x) const { return tanhf(x); }
};
struct Sigmoid {
  __device__ float operator()(float x) const { return sigmoid(x); }
};
// Gradients: (forward input or output, dy) -> dx.
struct GeluGrad {
  __device__ float operator()(float x, float dy) const { return gelu_grad(x, dy); }
};
struct TanhGrad {
  __device__ float operator()(float y, float dy) const { return tanh_grad(y, dy); }
};
struct SigmoidGrad {
  __device__ float operator()(float y, float dy) const { return sigmoid_grad(y, dy); }
};

// y = f(x); y == x allowed (each element is read before it is written, by the same thread).
template <typename F>
__global__ void map_kernel(const float* x, float* y, std::size_t n, bool vector, F f) {
  const auto* x4 = reinterpret_cast<const float4*>(x);
  auto* y4 = reinterpret_cast<float4*>(y);
  for_each_element(
      n, vector,
      [&](std::size_t q) {
        const float4 v = x4[q];
        y4[q] = make_float4(f(v.x), f(v.y), f(v.z), f(v.w));
      },
      [&](std::size_t i) { y[i] = f(x[i]); });
}

// dx = f(a, dy); dx == dy (or dx == a) allowed.
template <typename F>
__global__ void map2_kernel(const float* a, const float* dy, float* dx, std::size_t n, bool vector, F f) {
  const auto* a4 = reinterpret_cast<const float4*>(a);
  const auto* dy4 = reinterpret_cast<const float4*>(dy);
  auto* dx4 = reinterpret_cast<float4*>(dx);
  for_each_element(
      n, vector,
      [&](std::size_t q) {
        const float4 u = a4[q], d = dy4[q];
        dx4[q] = make_float4(f(u.x, d.x), f(u.y, d.y), f(u.z, d.z), f(u.w, d.w));
      },
      [&](std::size_t i) { dx[i] = f(a[i], dy[i]); });
}

template <typename F>
void launch_map(const float* x, float* y, std::size_t n, Stream stream, const char* name) {
  if (n == 0) return;
  const bool vector = aligned16(x) && aligned16(y);
  map_kernel<<<grid(n, vector), kBlock, 0, cuda(stream)>>>(x, y, n, vector, F{});
  DRT_CUDA_LAUNCH_CHECK(name);
}

template <typename F>
void launch_map2(const float* a, const float* dy, float* dx, std::size_t n, Stream stream, const char* name) {
  if (n == 0) return;
  const bool vector = aligned16(a) && aligned16(dy) && aligned16(dx);
  map2_kernel<<<grid(n, vector), kBlock, 0, cuda(stream)>>>(a, dy, dx, n, vector, F{});
  DRT_CUDA_LAUNCH_CHECK(name);
}

// Element i = r * per_sample + e of rows x per_sample values: mask[i] = dropout_keep(key,
// first_sample + r, e, p), y[i] = x[i] * mask[i] * scale. y == x allowed.
__global__ void dropout_forward_kernel(std::uint64_t key, std::int64_t first_sample, std::size_t n,
                                       std::size_t per_sample, float p, float scale, const float* x, float* y,
                                       std::uint8_t* mask) {
  const std::size_t stride = grid_threads();
  const std::size_t row_step = stride / per_sample, element_step = stride % per_sample;
  std::size_t i = first_index();
  std::size_t r = i / per_sample, e = i % per_sample;
  for (; i < n; i += stride) {
    const bool keep = dropout_keep(key, first_sample + static_cast<std::int64_t>(r), e, p);
    mask[i] = keep ? 1 : 0;
    y[i] = x[i] * (keep ? scale : 0.0f);
    r += row_step;
    e += element_step;
    if (e >= per_sample) {
      e -= per_sample;
      ++r;
    }
  }
}

// dx = dy * mask * scale; dx == dy allowed.
__global__ void dropout_backward_kernel(std::size_t n, float scale, const float* dy, const std::uint8_t* mask,
                                        float* dx) {
  for (std::size_t i = first_index(); i < n; i += grid_threads()) dx[i] = dy[i] * (mask[i] ? scale : 0.0f);
}

// The factor of the kept values, 1 / (1 - p), formed once on the host.
float keep_scale(float p) { return 1.0f / (1.0f - p); }

}  // namespace

void gelu_forward(const float* x, float* y, std::size_t n, Stream stream) {
  launch_map<Gelu>(x, y, n, stream, "gelu_forward");
}
void gelu_backward(const float* x, const float* dy, float* dx, std::size_t n, Stream stream) {
  launch_map2<GeluGrad>(x, dy, dx, n, stream, "gelu_backward");
}
void gelu_tanh_forward(const float* x, float* y, std::size_t n, Stream stream) {
  launch_map<GeluTanh>(x, y, n, stream, "gelu_tanh_forward");
}
void gelu_tanh_backward(const float* x, const float* dy, float* dx, std::size_t n, Stream stream) {
  launch_map2<GeluTanhGrad>(x, dy, dx, n, stream, "gelu_tanh_backward");
}
void tanh_forward(const float* x, float* y, std::size_t n, Stream stream) {
  launch_map<Tanh>(x, y, n, stream, "tanh_forward");
}
void tanh_backward(const float* y, const float* dy, float* dx, std::size_t n, Stream stream) {
  launch_map2<TanhGrad>(y, dy, dx, n, stream, "tanh_backward");
}
void sigmoid_forward(const float* x, float* y, std::size_t n, Stream stream) {
  launch_map<Sigmoid>(x, y, n, stream, "sigmoid_forward");
}
void sigmoid_backward(const float* y, const float* dy, float* dx, std::size_t n, Stream stream) {
  launch_map2<SigmoidGrad>(y, dy, dx, n, stream, "sigmoid_backward");
}

void dropout_forward(std::uint64_t key, std::int64_t first_sample, int rows, std::size_t per_sample, float p,
                     const float* x, float* y, std::uint8_t* mask, Stream stream) {
  if (rows <= 0 || per_sample == 0) return;
  const std::size_t n = static_cast<std::size_t>(rows) * per_sample;
  dropout_forward_kernel<<<cuda::grid_for(n, kBlock), kBlock, 0, cuda(stream)>>>(key, first_sample, n, per_sample, p,
                                                                                 keep_scale(p), x, y, mask);
  DRT_CUDA_LAUNCH_CHECK("dropout_forward");
}

void dropout_backward(int rows, std::size_t per_sample, float p, const float* dy, const std::uint8_t* mask, float* dx,
                      Stream stream) {
  if (rows <= 0 || per_sample == 0) return;
  const std::size_t n = static_cast<std::size_t>(rows) * per_sample;
  dropout_backward_kernel<<<cuda::grid_for(n, kBlock), kBlock, 0, cuda(stream)>>>(n, keep_scale(p), dy, mask, dx);
  DRT_CUDA_LAUNCH_CHECK("dropout_backward");
}

}  // namespace drt::kernels
