// Launch geometry and the grid-stride loop shared by the bandwidth-bound kernels (internal to
// kernels/). Each thread handles elements i, i + grid size, ...; on the vector path four at a
// time (16-byte loads and stores) and then the n % 4 tail one by one.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda_check.hpp"

namespace drt::kernels::detail {

constexpr unsigned kBlock = 256;

inline cudaStream_t cuda(void* stream) { return static_cast<cudaStream_t>(stream); }
inline bool aligned(const void* p, std::uintptr_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

__device__ inline std::size_t first_index() { return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline std::size_t grid_threads() { return static_cast<std::size_t>(gridDim.x) * blockDim.x; }

// Blocks to cover n elements: one group of four per thread on the vector path.
inline unsigned grid(std::size_t n, bool vector) { return cuda::grid_for(vector ? (n + 3) / 4 : n, kBlock); }

// quad(q) for every group of four q < n / 4 when `vector`, then one(i) for the elements left.
template <typename Quad, typename One>
__device__ void for_each_element(std::size_t n, bool vector, Quad quad, One one) {
  const std::size_t stride = grid_threads();
  std::size_t done = 0;
  if (vector) {
    const std::size_t quads = n / 4;
    for (std::size_t q = first_index(); q < quads; q += stride) quad(q);
    done = quads * 4;
  }
  for (std::size_t i = done + first_index(); i < n; i += stride) one(i);
}

}  // namespace drt::kernels::detail
