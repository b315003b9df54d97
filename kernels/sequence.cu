// CUDA kernels of the language-model launchers (launchers.hpp): layer normalisation, the token
// embedding and causal self-attention. Written for correctness and determinism first (the CPU
// path is the one tuned; bench/RESULTS.md):
//
//   - layer norm forward and dx: one warp per row, lanes striding over the features, shuffle
//     trees (the order depends only on dim). dgamma and dbeta: one thread per feature adding the
//     rows in order (as bias_grad_rows), no atomics.
//   - embedding forward: one thread per output value; an id that is not a whole number in
//     [0, vocab) gives a row of NaN. Backward: atomicAdd into the table (repeated tokens collide:
//     the order of their additions, and so the last bits, vary from run to run).
//   - attention: one warp per (sample, head, query) row, head_dim <= 256 (up to 8 values per
//     lane in registers). Forward runs an online softmax over the keys j <= i (FlashAttention's
//     recurrence, one key at a time) and writes the output and the row's log-sum-exp. Backward
//     recomputes each probability from q, k and lse: one kernel per query row for dq, one per key
//     row for dk and dv (looping over the queries i >= j), so no value is written twice and
//     nothing needs atomics. The dropout mask is rules.hpp's hash, as on the CPU.
#include <cuda_runtime.h>
#include <math_constants.h>

#include <cstddef>
#include <cstdint>

#include "drtrain/kernels/launchers.hpp"
#include "grid_stride.cuh"

namespace drt::kernels {
namespace {

using namespace detail;

constexpr unsigned kWarp = 32;
constexpr unsigned kWarpsPerBlock = 4;
constexpr int kPerLane = 8;  // head_dim <= kPerLane * 32

__device__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

unsigned warp_blocks(std::size_t warps) { return static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock); }

// ---------------------------------------------------------------- layer norm

__global__ void layernorm_forward_kernel(int rows, int dim, float eps, const float* x, const float* gamma,
                                         const float* beta, float* y, float* mean, float* inv_std) {
  const std::size_t row = (static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  if (row >= static_cast<std::size_t>(rows)) return;
  const float* in = x + row * dim;
  float sum = 0.0f;
  for (int j = lane; j < dim; j += kWarp) sum += in[j];
  const float m = warp_sum(sum) / dim;
  float sq = 0.0f;
  for (int j = lane; j < dim; j += kWarp) sq += (in[j] - m) * (in[j] - m);
  const float inv = rsqrtf(warp_sum(sq) / dim + eps);
  float* out = y + row * dim;
  for (int j = lane; j < dim; j += kWarp) out[j] = (in[j] - m) * inv * gamma[j] + (beta ? beta[j] : 0.0f);
  if (lane == 0) mean[row] = m, inv_std[row] = inv;
}

__global__ void layernorm_dx_kernel(int rows, int dim, const float* x, const float* dy, const float* gamma,
                                    const float* mean, const float* inv_std, float* dx) {
  const std::size_t row = (static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  if (row >= static_cast<std::size_t>(rows)) return;
  const float* in = x + row * dim;
  const float* g = dy + row * dim;
  const float m = mean[row], inv = inv_std[row];
  float a = 0.0f, b = 0.0f;
  for (int j = lane; j < dim; j += kWarp) {
    const float gj = g[j] * gamma[j];
    a += gj;
    b += gj * (in[j] - m) * inv;
  }
  a = warp_sum(a) / dim;
  b = warp_sum(b) / dim;
  float* out = dx + row * dim;
  for (int j = lane; j < dim; j += kWarp) out[j] = inv * (g[j] * gamma[j] - a - (in[j] - m) * inv * b);
}

__global__ void layernorm_params_kernel(int rows, int dim, const float* x, const float* dy, const float* mean,
                                        const float* inv_std, float* dgamma, float* dbeta) {
  for (std::size_t j = first_index(); j < static_cast<std::size_t>(dim); j += grid_threads()) {
    float sg = 0.0f, sb = 0.0f;
    for (int r = 0; r < rows; ++r) {
      const std::size_t at = static_cast<std::size_t>(r) * dim + j;
      sg += dy[at] * (x[at] - mean[r]) * inv_std[r];
      sb += dy[at];
    }
    dgamma[j] = sg;
    if (dbeta) dbeta[j] = sb;
  }
}

// ---------------------------------------------------------------- embedding

__device__ bool valid_id(float id, int vocab) {
  return id >= 0.0f && id < static_cast<float>(vocab) && id == floorf(id);
}

__global__ void embedding_forward_kernel(int rows, int vocab, int dim, const float* ids, const float* table, float* y) {
  const std::size_t n = static_cast<std::size_t>(rows) * dim;
  for (std::size_t i = first_index(); i < n; i += grid_threads()) {
    const std::size_t r = i / dim, j = i % dim;
    const float id = ids[r];
    y[i] = valid_id(id, vocab) ? table[static_cast<std::size_t>(id) * dim + j] : CUDART_NAN_F;
  }
}

__global__ void embedding_backward_kernel(int rows, int vocab, int dim, const float* ids, const float* dy,
                                          float* dtable) {
  const std::size_t n = static_cast<std::size_t>(rows) * dim;
  for (std::size_t i = first_index(); i < n; i += grid_threads()) {
    const std::size_t r = i / dim, j = i % dim;
    const float id = ids[r];
    if (valid_id(id, vocab)) atomicAdd(dtable + static_cast<std::size_t>(id) * dim + j, dy[i]);
  }
}

// ---------------------------------------------------------------- attention

struct AttentionArgs {
  int batch, length, heads, head_dim;
  float scale, p, keep_scale;
  std::uint64_t key;
  std::int64_t first_sample;
  __host__ __device__ int dim() const { return heads * head_dim; }
};

// The (sample, head, row) of warp w, and the offsets of a row of q, k or v, y.
struct Row {
  int n, h, i;
  __device__ Row(const AttentionArgs& a, std::size_t w)
      : n(static_cast<int>(w / (static_cast<std::size_t>(a.heads) * a.length))),
        h(static_cast<int>((w / a.length) % a.heads)),
        i(static_cast<int>(w % a.length)) {}
  __device__ std::size_t qkv(const AttentionArgs& a, int part, int row) const {
    return (static_cast<std::size_t>(n) * a.length + row) * 3 * a.dim() + static_cast<std::size_t>(part) * a.dim() +
           static_cast<std::size_t>(h) * a.head_dim;
  }
  __device__ std::size_t y(const AttentionArgs& a, int row) const {
    return (static_cast<std::size_t>(n) * a.length + row) * a.dim() + static_cast<std::size_t>(h) * a.head_dim;
  }
  __device__ std::size_t stat(const AttentionArgs& a, int row) const {
    return (static_cast<std::size_t>(n) * a.heads + h) * a.length + row;
  }
  // The dropout factor of probability (query, key): keep_scale or 0.
  __device__ float drop(const AttentionArgs& a, int query, int key) const {
    if (a.p <= 0.0f) return 1.0f;
    const std::uint64_t element =
        (static_cast<std::uint64_t>(h) * a.length + static_cast<std::uint64_t>(query)) * a.length + key;
    return dropout_keep(a.key, a.first_sample + n, element, a.p) ? a.keep_scale : 0.0f;
  }
};

// Loads lane's values c = lane + 32 k of a head row into v[k].
__device__ void load(const float* row, int hd, int lane, float (&v)[kPerLane]) {
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int c = lane + 32 * k;
    v[k] = c < hd ? row[c] : 0.0f;
  }
}

__device__ float dot(const float (&a)[kPerLane], const float* row, int hd, int lane) {
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int c = lane + 32 * k;
    if (c < hd) s += a[k] * row[c];
  }
  return warp_sum(s);
}

__global__ void attention_forward_kernel(AttentionArgs a, const float* qkv, float* y, float* lse) {
  const std::size_t w = (static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  if (w >= static_cast<std::size_t>(a.batch) * a.heads * a.length) return;
  const Row r(a, w);
  float q[kPerLane], acc[kPerLane];
  load(qkv + r.qkv(a, 0, r.i), a.head_dim, lane, q);
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) acc[k] = 0.0f;
  float m = -CUDART_INF_F, l = 0.0f;
  for (int j = 0; j <= r.i; ++j) {
    const float s = dot(q, qkv + r.qkv(a, 1, j), a.head_dim, lane) * a.scale;
    const float m_new = fmaxf(m, s);
    const float alpha = expf(m - m_new);  // 0 for the first key (m = -inf)
    const float e = expf(s - m_new);
    l = l * alpha + e;
    const float z = e * r.drop(a, r.i, j);
    const float* v = qkv + r.qkv(a, 2, j);
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int c = lane + 32 * k;
      acc[k] = acc[k] * alpha + (c < a.head_dim ? z * v[c] : 0.0f);
    }
    m = m_new;
  }
  float* out = y + r.y(a, r.i);
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int c = lane + 32 * k;
    if (c < a.head_dim) out[c] = acc[k] / l;
  }
  if (lane == 0) lse[r.stat(a, r.i)] = m + logf(l);
}

// d[row] = dO_i . O_i.
__global__ void attention_delta_kernel(AttentionArgs a, const float* y, const float* dy, float* delta) {
  const std::size_t w = (static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  if (w >= static_cast<std::size_t>(a.batch) * a.heads * a.length) return;
  const Row r(a, w);
  float o[kPerLane];
  load(y + r.y(a, r.i), a.head_dim, lane, o);
  const float d = dot(o, dy + r.y(a, r.i), a.head_dim, lane);
  if (lane == 0) delta[r.stat(a, r.i)] = d;
}

// dq_i = scale sum_{j <= i} dS_ij k_j, dS_ij = P_ij (dZ_ij drop_ij - delta_i), dZ_ij = dO_i . v_j.
__global__ void attention_dq_kernel(AttentionArgs a, const float* qkv, const float* lse, const float* dy,
                                    const float* delta, float* dqkv) {
  const std::size_t w = (static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  if (w >= static_cast<std::size_t>(a.batch) * a.heads * a.length) return;
  const Row r(a, w);
  float q[kPerLane], g[kPerLane], dq[kPerLane];
  load(qkv + r.qkv(a, 0, r.i), a.head_dim, lane, q);
  load(dy + r.y(a, r.i), a.head_dim, lane, g);
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) dq[k] = 0.0f;
  const float row_lse = lse[r.stat(a, r.i)], d = delta[r.stat(a, r.i)];
  for (int j = 0; j <= r.i; ++j) {
    const float* kr = qkv + r.qkv(a, 1, j);
    const float p = expf(dot(q, kr, a.head_dim, lane) * a.scale - row_lse);
    const float dz = dot(g, qkv + r.qkv(a, 2, j), a.head_dim, lane);
    const float ds = p * (dz * r.drop(a, r.i, j) - d) * a.scale;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int c = lane + 32 * k;
      if (c < a.head_dim) dq[k] += ds * kr[c];
    }
  }
  float* out = dqkv + r.qkv(a, 0, r.i);
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int c = lane + 32 * k;
    if (c < a.head_dim) out[c] = dq[k];
  }
}

// For key row j: dv_j = sum_{i >= j} Z_ij dO_i, dk_j = scale sum_{i >= j} dS_ij q_i.
__global__ void attention_dkv_kernel(AttentionArgs a, const float* qkv, const float* lse, const float* dy,
                                     const float* delta, float* dqkv) {
  const std::size_t w = (static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  if (w >= static_cast<std::size_t>(a.batch) * a.heads * a.length) return;
  const Row r(a, w);
  const int j = r.i;
  float kj[kPerLane], vj[kPerLane], dk[kPerLane], dv[kPerLane];
  load(qkv + r.qkv(a, 1, j), a.head_dim, lane, kj);
  load(qkv + r.qkv(a, 2, j), a.head_dim, lane, vj);
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) dk[k] = 0.0f, dv[k] = 0.0f;
  for (int i = j; i < a.length; ++i) {
    const float* qi = qkv + r.qkv(a, 0, i);
    const float* gi = dy + r.y(a, i);
    const float p = expf(dot(kj, qi, a.head_dim, lane) * a.scale - lse[r.stat(a, i)]);
    const float drop = r.drop(a, i, j);
    const float dz = dot(vj, gi, a.head_dim, lane);
    const float ds = p * (dz * drop - delta[r.stat(a, i)]) * a.scale;
    const float z = p * drop;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int c = lane + 32 * k;
      if (c < a.head_dim) dv[k] += z * gi[c], dk[k] += ds * qi[c];
    }
  }
  float* out_k = dqkv + r.qkv(a, 1, j);
  float* out_v = dqkv + r.qkv(a, 2, j);
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int c = lane + 32 * k;
    if (c < a.head_dim) out_k[c] = dk[k], out_v[c] = dv[k];
  }
}

AttentionArgs attention_args(const AttentionGeometry& g) {
  AttentionArgs a{};
  a.batch = g.batch, a.length = g.length, a.heads = g.heads, a.head_dim = g.head_dim;
  a.scale = 1.0f / sqrtf(static_cast<float>(g.head_dim));
  a.p = g.dropout;
  a.keep_scale = g.dropout > 0.0f ? 1.0f / (1.0f - g.dropout) : 1.0f;
  a.key = g.key;
  a.first_sample = g.first_sample;
  return a;
}

std::size_t attention_rows(const AttentionGeometry& g) {
  return static_cast<std::size_t>(g.batch) * static_cast<std::size_t>(g.heads) * static_cast<std::size_t>(g.length);
}

}  // namespace

void layernorm_forward(int rows, int dim, float eps, const float* x, const float* gamma, const float* beta, float* y,
                       float* mean, float* inv_std, Stream stream) {
  if (rows <= 0 || dim <= 0) return;
  layernorm_forward_kernel<<<warp_blocks(static_cast<std::size_t>(rows)), kWarpsPerBlock * kWarp, 0, cuda(stream)>>>(
      rows, dim, eps, x, gamma, beta, y, mean, inv_std);
  DRT_CUDA_LAUNCH_CHECK("layernorm_forward");
}

void layernorm_backward(int rows, int dim, const float* x, const float* dy, const float* gamma, const float* mean,
                        const float* inv_std, float* dx, float* dgamma, float* dbeta, Stream stream) {
  if (rows <= 0 || dim <= 0) return;
  if (dx) {
    layernorm_dx_kernel<<<warp_blocks(static_cast<std::size_t>(rows)), kWarpsPerBlock * kWarp, 0, cuda(stream)>>>(
        rows, dim, x, dy, gamma, mean, inv_std, dx);
    DRT_CUDA_LAUNCH_CHECK("layernorm_backward dx");
  }
  layernorm_params_kernel<<<cuda::grid_for(static_cast<std::size_t>(dim), kBlock), kBlock, 0, cuda(stream)>>>(
      rows, dim, x, dy, mean, inv_std, dgamma, dbeta);
  DRT_CUDA_LAUNCH_CHECK("layernorm_backward parameters");
}

void embedding_forward(int rows, int vocab, int dim, const float* ids, const float* table, float* y, Stream stream) {
  const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(dim);
  if (n == 0) return;
  embedding_forward_kernel<<<cuda::grid_for(n, kBlock), kBlock, 0, cuda(stream)>>>(rows, vocab, dim, ids, table, y);
  DRT_CUDA_LAUNCH_CHECK("embedding_forward");
}

void embedding_backward(int rows, int vocab, int dim, const float* ids, const float* dy, float* dtable, bool accumulate,
                        Stream stream) {
  if (!accumulate)
    DRT_CUDA_CHECK(cudaMemsetAsync(dtable, 0, static_cast<std::size_t>(vocab) * dim * sizeof(float), cuda(stream)));
  const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(dim);
  if (n == 0) return;
  embedding_backward_kernel<<<cuda::grid_for(n, kBlock), kBlock, 0, cuda(stream)>>>(rows, vocab, dim, ids, dy, dtable);
  DRT_CUDA_LAUNCH_CHECK("embedding_backward");
}

bool attention_supported(int head_dim) { return head_dim >= 1 && head_dim <= kPerLane * 32; }

void attention_forward(const AttentionGeometry& g, const float* qkv, float* y, float* lse, Stream stream) {
  const std::size_t rows = attention_rows(g);
  if (rows == 0) return;
  attention_forward_kernel<<<warp_blocks(rows), kWarpsPerBlock * kWarp, 0, cuda(stream)>>>(attention_args(g), qkv, y,
                                                                                           lse);
  DRT_CUDA_LAUNCH_CHECK("attention_forward");
}

void attention_backward(const AttentionGeometry& g, const float* qkv, const float* y, const float* lse, const float* dy,
                        float* dqkv, float* delta, Stream stream) {
  const std::size_t rows = attention_rows(g);
  if (rows == 0) return;
  const AttentionArgs a = attention_args(g);
  const unsigned blocks = warp_blocks(rows), threads = kWarpsPerBlock * kWarp;
  attention_delta_kernel<<<blocks, threads, 0, cuda(stream)>>>(a, y, dy, delta);
  DRT_CUDA_LAUNCH_CHECK("attention_backward delta");
  attention_dq_kernel<<<blocks, threads, 0, cuda(stream)>>>(a, qkv, lse, dy, delta, dqkv);
  DRT_CUDA_LAUNCH_CHECK("attention_backward dq");
  attention_dkv_kernel<<<blocks, threads, 0, cuda(stream)>>>(a, qkv, lse, dy, delta, dqkv);
  DRT_CUDA_LAUNCH_CHECK("attention_backward dk dv");
}

}  // namespace drt::kernels
