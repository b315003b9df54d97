// CUDA kernels of the float32 <-> bfloat16 conversions (launchers.hpp), bf16 as raw 16-bit
// patterns. Rounding is CUDA's own __float2bfloat16_rn (round to nearest even), an
// implementation independent of the bit arithmetic of rules.hpp float_to_bf16_bits that the
// CPU runs, so the GPU test that compares the two bit for bit checks both. NaNs are converted
// here by hand, to keep rules.hpp's contract (a quiet NaN of the same sign and the top of the
// payload): the hardware conversion returns a canonical NaN instead.
//
// Bandwidth-bound: grid-stride loops over 4 elements at a time (a float4 and a 4 x 16-bit
// ushort4) when the float side is 16-byte aligned and the bf16 side 8-byte aligned, then the
// n % 4 tail; scalar throughout otherwise.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "drtrain/kernels/launchers.hpp"
#include "grid_stride.cuh"

namespace drt::kernels {
namespace {

using namespace detail;

__device__ unsigned short to_bf16(float x) {
  if (isnan(x)) return static_cast<unsigned short>((__float_as_uint(x) >> 16) | 0x0040u);
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

__device__ float from_bf16(unsigned short b) {
  if ((b & 0x7fffu) > 0x7f80u) return __uint_as_float(static_cast<unsigned>(b) << 16);  // NaN, bits kept
  return __bfloat162float(__ushort_as_bfloat16(b));
}

__global__ void float_to_bf16_kernel(const float* x, std::uint16_t* y, std::size_t n, bool vector) {
  const auto* x4 = reinterpret_cast<const float4*>(x);
  auto* y4 = reinterpret_cast<ushort4*>(y);
  for_each_element(
      n, vector,
      [&](std::size_t q) {
        const float4 v = x4[q];
        y4[q] = make_ushort4(to_bf16(v.x), to_bf16(v.y), to_bf16(v.z), to_bf16(v.w));
      },
      [&](std::size_t i) { y[i] = to_bf16(x[i]); });
}

__global__ void bf16_to_float_kernel(const std::uint16_t* x, float* y, std::size_t n, bool vector) {
  const auto* x4 = reinterpret_cast<const ushort4*>(x);
  auto* y4 = reinterpret_cast<float4*>(y);
  for_each_element(
      n, vector,
      [&](std::size_t q) {
        const ushort4 v = x4[q];
        y4[q] = make_float4(from_bf16(v.x), from_bf16(v.y), from_bf16(v.z), from_bf16(v.w));
      },
      [&](std::size_t i) { y[i] = from_bf16(x[i]); });
}

}  // namespace

void float_to_bf16(const float* x, std::uint16_t* y, std::size_t n, Stream stream) {
  if (n == 0) return;
  const bool vector = aligned(x, 16) && aligned(y, 8);
  float_to_bf16_kernel<<<grid(n, vector), kBlock, 0, cuda(stream)>>>(x, y, n, vector);
  DRT_CUDA_LAUNCH_CHECK("float_to_bf16");
}

void bf16_to_float(const std::uint16_t* x, float* y, std::size_t n, Stream stream) {
  if (n == 0) return;
  const bool vector = aligned(x, 8) && aligned(y, 16);
  bf16_to_float_kernel<<<grid(n, vector), kBlock, 0, cuda(stream)>>>(x, y, n, vector);
  DRT_CUDA_LAUNCH_CHECK("bf16_to_float");
}

}  // namespace drt::kernels
