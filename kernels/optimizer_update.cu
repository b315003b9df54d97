// CUDA kernels of the optimizer updates (launchers.hpp): SGD (plain, momentum, Nesterov) and
// Adam/AdamW over n parameters, each element through rules.hpp sgd_update / adam_update, the
// code the PS optimizers run on the CPU (the per-step coefficients come by value from the
// host). Bandwidth-bound: grid-stride loops over float4 when every buffer is 16-byte aligned,
// then the n % 4 tail; scalar throughout otherwise. nvcc contracts a * b + c into FMAs, so the
// results may differ from the CPU in the last bits.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "drtrain/kernels/launchers.hpp"
#include "grid_stride.cuh"

namespace drt::kernels {
namespace {

using namespace detail;

bool aligned16(const void* p) { return aligned(p, 16); }

// kMomentum false: plain SGD, `buf` is not touched (may be null).
template <bool kMomentum>
__global__ void sgd_kernel(SgdCoefficients c, float* p, const float* g, float grad_scale, float* buf, std::size_t n,
                           bool vector) {
  auto* p4 = reinterpret_cast<float4*>(p);
  const auto* g4 = reinterpret_cast<const float4*>(g);
  auto* b4 = reinterpret_cast<float4*>(buf);
  for_each_element(
      n, vector,
      [&](std::size_t q) {
        float4 pv = p4[q];
        const float4 gv = g4[q];
        float4 bv = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (kMomentum) bv = b4[q];
        sgd_update(c, pv.x, gv.x, grad_scale, bv.x);
        sgd_update(c, pv.y, gv.y, grad_scale, bv.y);
        sgd_update(c, pv.z, gv.z, grad_scale, bv.z);
        sgd_update(c, pv.w, gv.w, grad_scale, bv.w);
        p4[q] = pv;
        if (kMomentum) b4[q] = bv;
      },
      [&](std::size_t i) {
        float unused = 0.0f;
        sgd_update(c, p[i], g[i], grad_scale, kMomentum ? buf[i] : unused);
      });
}

__global__ void adam_kernel(AdamCoefficients c, float* p, const float* g, float grad_scale, float* m, float* v,
                            std::size_t n, bool vector) {
  auto* p4 = reinterpret_cast<float4*>(p);
  const auto* g4 = reinterpret_cast<const float4*>(g);
  auto* m4 = reinterpret_cast<float4*>(m);
  auto* v4 = reinterpret_cast<float4*>(v);
  for_each_element(
      n, vector,
      [&](std::size_t q) {
        float4 pv = p4[q], mv = m4[q], vv = v4[q];
        const float4 gv = g4[q];
        adam_update(c, pv.x, gv.x, grad_scale, mv.x, vv.x);
        adam_update(c, pv.y, gv.y, grad_scale, mv.y, vv.y);
        adam_update(c, pv.z, gv.z, grad_scale, mv.z, vv.z);
        adam_update(c, pv.w, gv.w, grad_scale, mv.w, vv.w);
        p4[q] = pv;
        m4[q] = mv;
        v4[q] = vv;
      },
      [&](std::size_t i) { adam_update(c, p[i], g[i], grad_scale, m[i], v[i]); });
}

}  // namespace

void sgd_update(const SgdCoefficients& c, float* params, const float* grad, float grad_scale, float* momentum,
                std::size_t n, Stream stream) {
  if (n == 0) return;
  const cudaStream_t s = cuda(stream);
  if (c.momentum == 0.0f) {
    const bool vector = aligned16(params) && aligned16(grad);
    sgd_kernel<false><<<grid(n, vector), kBlock, 0, s>>>(c, params, grad, grad_scale, nullptr, n, vector);
  } else {
    const bool vector = aligned16(params) && aligned16(grad) && aligned16(momentum);
    sgd_kernel<true><<<grid(n, vector), kBlock, 0, s>>>(c, params, grad, grad_scale, momentum, n, vector);
  }
  DRT_CUDA_LAUNCH_CHECK("sgd_update");
}

void adam_update(const AdamCoefficients& c, float* params, const float* grad, float grad_scale, float* exp_avg,
                 float* exp_avg_sq, std::size_t n, Stream stream) {
  if (n == 0) return;
  const bool vector = aligned16(params) && aligned16(grad) && aligned16(exp_avg) && aligned16(exp_avg_sq);
  adam_kernel<<<grid(n, vector), kBlock, 0, cuda(stream)>>>(c, params, grad, grad_scale, exp_avg, exp_avg_sq, n,
                                                            vector);
  DRT_CUDA_LAUNCH_CHECK("adam_update");
}

}  // namespace drt::kernels
