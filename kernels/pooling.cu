// CUDA kernels of the pooling launchers (launchers.hpp) that cuDNN's pooling calls do not fit:
//
//   - the backward of average pooling (padded cells counted as zeros). cudnnPoolingBackward also
//     wants the forward's x and y, which Backend::avgpool2d_backward does not have; a gather
//     needs neither: one thread per input value adds the dy of every window containing it, in a
//     fixed order, so the result is deterministic (no atomics) and every dx is written.
//   - global average pooling: one warp per plane, each lane summing a fixed stride of the plane,
//     then a shuffle tree, so the order of the additions depends only on plane_size
//     (deterministic). Its backward is a map.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "drtrain/kernels/launchers.hpp"
#include "grid_stride.cuh"

namespace drt::kernels {
namespace {

using namespace detail;

constexpr unsigned kWarp = 32;

// dx[plane][ih][iw] = inv_area * sum of dy[plane][oh][ow] over the windows that contain (ih, iw):
// window oh covers rows oh * stride - pad .. oh * stride - pad + window - 1.
__global__ void avgpool_backward_kernel(PoolGeometry g, int out_h, int out_w, float inv_area, const float* dy,
                                        float* dx) {
  const std::size_t n = g.planes * static_cast<std::size_t>(g.height) * static_cast<std::size_t>(g.width);
  const std::size_t out_plane = static_cast<std::size_t>(out_h) * static_cast<std::size_t>(out_w);
  for (std::size_t i = first_index(); i < n; i += grid_threads()) {
    const int iw = static_cast<int>(i % static_cast<std::size_t>(g.width));
    const std::size_t rest = i / static_cast<std::size_t>(g.width);
    const int ih = static_cast<int>(rest % static_cast<std::size_t>(g.height));
    const std::size_t plane = rest / static_cast<std::size_t>(g.height);
    // First window reaching the cell: the smallest o with o * stride + window - 1 >= cell + pad.
    const int h_reach = ih + g.pad - g.window + 1, w_reach = iw + g.pad - g.window + 1;
    const int oh_first = h_reach <= 0 ? 0 : (h_reach + g.stride - 1) / g.stride;
    const int ow_first = w_reach <= 0 ? 0 : (w_reach + g.stride - 1) / g.stride;
    const int oh_last = min((ih + g.pad) / g.stride, out_h - 1);
    const int ow_last = min((iw + g.pad) / g.stride, out_w - 1);
    const float* plane_dy = dy + plane * out_plane;
    float sum = 0.0f;
    for (int oh = oh_first; oh <= oh_last; ++oh)
      for (int ow = ow_first; ow <= ow_last; ++ow) sum += plane_dy[static_cast<std::size_t>(oh) * out_w + ow];
    dx[i] = sum * inv_area;
  }
}

// One warp per plane (the loop over planes is uniform within a warp, so every lane reaches the
// shuffles): lane l sums elements l, l + 32, ..., then the lanes' sums are added in a tree.
__global__ void global_avgpool_forward_kernel(const float* x, float* y, std::size_t planes, std::size_t plane_size) {
  const std::size_t warps = grid_threads() / kWarp;
  const unsigned lane = threadIdx.x % kWarp;
  const float count = static_cast<float>(plane_size);
  for (std::size_t p = first_index() / kWarp; p < planes; p += warps) {
    const float* plane = x + p * plane_size;
    float sum = 0.0f;
    for (std::size_t j = lane; j < plane_size; j += kWarp) sum += plane[j];
    for (unsigned offset = kWarp / 2; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
    if (lane == 0) y[p] = sum / count;
  }
}

__global__ void global_avgpool_backward_kernel(const float* dy, float* dx, std::size_t n, std::size_t plane_size) {
  const float count = static_cast<float>(plane_size);
  for (std::size_t i = first_index(); i < n; i += grid_threads()) dx[i] = dy[i / plane_size] / count;
}

}  // namespace

void avgpool2d_backward(const PoolGeometry& g, const float* dy, float* dx, Stream stream) {
  const std::size_t n =
      g.planes * static_cast<std::size_t>(std::max(g.height, 0)) * static_cast<std::size_t>(std::max(g.width, 0));
  if (n == 0) return;
  const int out_h = g.out_height(), out_w = g.out_width();
  const float inv_area = 1.0f / static_cast<float>(g.window * g.window);
  avgpool_backward_kernel<<<cuda::grid_for(n, kBlock), kBlock, 0, cuda(stream)>>>(g, out_h, out_w, inv_area, dy, dx);
  DRT_CUDA_LAUNCH_CHECK("avgpool2d_backward");
}

void global_avgpool_forward(const float* x, float* y, std::size_t planes, std::size_t plane_size, Stream stream) {
  if (planes == 0 || plane_size == 0) return;
  global_avgpool_forward_kernel<<<cuda::grid_for(planes * kWarp, kBlock), kBlock, 0, cuda(stream)>>>(x, y, planes,
                                                                                                     plane_size);
  DRT_CUDA_LAUNCH_CHECK("global_avgpool_forward");
}

void global_avgpool_backward(const float* dy, float* dx, std::size_t planes, std::size_t plane_size, Stream stream) {
  const std::size_t n = planes * plane_size;
  if (n == 0) return;
  global_avgpool_backward_kernel<<<cuda::grid_for(n, kBlock), kBlock, 0, cuda(stream)>>>(dy, dx, n, plane_size);
  DRT_CUDA_LAUNCH_CHECK("global_avgpool_backward");
}

}  // namespace drt::kernels
