// Causal self-attention on the CPU, FlashAttention-2 style (Dao 2023): for each (sample, head),
// tiles of tile_q queries x tile_k keys. Forward: S = Q_i K_j^T / sqrt(hd) by one GEMM, an
// online softmax (running row maximum m and denominator l; the output rows so far are rescaled
// when m grows), O_i += P V_j by a second GEMM; at the end O_i /= l and lse_i = m + log l. Only
// y and lse are kept. Backward recomputes each tile's P = exp(S - lse) and runs the four GEMMs
// of dV += Z^T dO, dZ = dO V^T, dQ += dS K, dK += dS^T Q with dS = P (dP - D), D_i = dO_i . O_i
// (Z = P with dropout applied, dP = dZ with the same mask). Tiles above the diagonal are never
// visited. Memory: per thread three tile_q x tile_k tiles and a mask, whatever the length.
//
// The q, k, v and output blocks of a head are strided views of the fused rows (leading
// dimension 3D, or D), which the GEMMs read in place: no copies. Parallel over (sample, head):
// each task owns its head's columns of y, lse and dqkv, so threads never write the same value
// and the result does not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "drtrain/core/simd_clones.hpp"
#include "drtrain/kernels/cpu_math.hpp"
#include "drtrain/kernels/rules.hpp"
#include "cpu_gemm.hpp"
#include "cpu_parallel.hpp"
#include "cpu_sequence.hpp"

namespace drt::backend::cpu {
namespace {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

using kernels::cpu_math::exp_nonpositive;

// Reductions in 16 float lanes (a GCC vector: one AVX-512 register, two AVX2 ones), which the
// compiler may not form itself from a running sum or maximum without -ffast-math.
constexpr int kLanes = 16;
using Lanes = float __attribute__((vector_size(kLanes * sizeof(float))));

// p[c] = exp(p[c] - shift) for c < valid, 0 for valid <= c < cols; returns the sum.
DRT_SIMD_CLONES
float exp_row(float* p, int valid, int cols, float shift) {
  for (int c = 0; c < valid; ++c) p[c] = exp_nonpositive(p[c] - shift);
  for (int c = valid; c < cols; ++c) p[c] = 0.0f;
  Lanes acc = {};
  int c = 0;
  for (; c + kLanes <= valid; c += kLanes) {
    Lanes v;
    std::memcpy(&v, p + c, sizeof v);
    acc += v;
  }
  float sum = 0.0f;
  for (int l = 0; l < kLanes; ++l) sum += acc[l];
  for (; c < valid; ++c) sum += p[c];
  return sum;
}

DRT_SIMD_CLONES
float row_max(const float* p, int n) {
  Lanes acc = Lanes{} + kMinusInf;
  int c = 0;
  for (; c + kLanes <= n; c += kLanes) {
    Lanes v;
    std::memcpy(&v, p + c, sizeof v);
    acc = v > acc ? v : acc;
  }
  float m = kMinusInf;
  for (int l = 0; l < kLanes; ++l) m = acc[l] > m ? acc[l] : m;
  for (; c < n; ++c) m = p[c] > m ? p[c] : m;
  return m;
}

DRT_SIMD_CLONES
void scale_row(float* x, int n, float a) {
  for (int c = 0; c < n; ++c) x[c] *= a;
}

DRT_SIMD_CLONES
float dot_row(const float* a, const float* b, int n) {
  Lanes acc = {};
  int c = 0;
  for (; c + kLanes <= n; c += kLanes) {
    Lanes x, y;
    std::memcpy(&x, a + c, sizeof x);
    std::memcpy(&y, b + c, sizeof y);
    acc += x * y;
  }
  float s = 0.0f;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  for (; c < n; ++c) s += a[c] * b[c];
  return s;
}

// mask[c] = 1 when element base + c of global sample `sample` is kept (rules.hpp's hash; the
// AVX-512 clone runs it 8 lanes at a time).
DRT_SIMD_CLONES
void keep_row(std::uint64_t key, std::int64_t sample, std::uint64_t base, int n, float p, std::uint8_t* mask) {
  for (int c = 0; c < n; ++c)
    mask[c] = kernels::dropout_keep(key, sample, base + static_cast<std::uint64_t>(c), p) ? 1 : 0;
}

// p[c] = p[c] * keep_scale where mask[c], else 0.
DRT_SIMD_CLONES
void drop_row(float* p, const std::uint8_t* mask, int n, float keep_scale) {
  for (int c = 0; c < n; ++c) p[c] = mask[c] ? p[c] * keep_scale : 0.0f;
}

// dS = P (dZ' - d) where dZ' = dZ, or with dropout dZ * mask * keep_scale; in place over dz.
DRT_SIMD_CLONES
void ds_row(const float* p, float* dz, const std::uint8_t* mask, float keep_scale, float d, int cols) {
  if (mask)
    for (int c = 0; c < cols; ++c) dz[c] = p[c] * ((mask[c] ? dz[c] * keep_scale : 0.0f) - d);
  else
    for (int c = 0; c < cols; ++c) dz[c] = p[c] * (dz[c] - d);
}

// One (sample, head): its views and the tiles.
struct Head {
  Head(const AttentionShape& s, int n, int h)
      : T(s.length),
        hd(s.head_dim),
        D(s.dim()),
        ld(3 * s.dim()),
        bq(s.tile_q > 0 ? s.tile_q : kAttentionTileQ),
        bk(s.tile_k > 0 ? s.tile_k : kAttentionTileK),
        scale(1.0f / std::sqrt(static_cast<float>(s.head_dim))),
        row0(static_cast<std::size_t>(n) * static_cast<std::size_t>(s.length)),
        column(static_cast<std::size_t>(h) * static_cast<std::size_t>(s.head_dim)),
        sample(s.first_sample + n),
        element0(static_cast<std::uint64_t>(h) * static_cast<std::uint64_t>(s.length)) {}
  // Row i of q, k or v (part 0, 1, 2) of this head in qkv-shaped memory; row i of y-shaped.
  std::size_t qkv_at(int part, int i) const {
    return (row0 + static_cast<std::size_t>(i)) * static_cast<std::size_t>(ld) +
           static_cast<std::size_t>(part) * static_cast<std::size_t>(D) + column;
  }
  std::size_t y_at(int i) const { return (row0 + static_cast<std::size_t>(i)) * static_cast<std::size_t>(D) + column; }
  // Keys [j0, j0 + cols) visible from query i: the first `valid` of them.
  static int valid(int i, int j0, int cols) { return std::clamp(i - j0 + 1, 0, cols); }
  // The dropout mask of query i's keys [j0, j0 + valid): 1 kept, 0 dropped.
  void mask_row(const AttentionShape& s, int i, int j0, int valid, std::uint8_t* out) const {
    const std::uint64_t base = (element0 + static_cast<std::uint64_t>(i)) * static_cast<std::uint64_t>(T);
    keep_row(s.key, sample, base + static_cast<std::uint64_t>(j0), valid, s.dropout, out);
  }

  int T, hd, D, ld, bq, bk;
  float scale;
  std::size_t row0, column;
  std::int64_t sample;
  std::uint64_t element0;
};

// Per-thread tiles, grown on demand.
struct Scratch {
  std::vector<float> s, z, dp, m, l, d;
  std::vector<std::uint8_t> mask;
  void reserve(int bq, int bk) {
    const std::size_t tile = static_cast<std::size_t>(bq) * static_cast<std::size_t>(bk);
    if (s.size() < tile) s.resize(tile), z.resize(tile), dp.resize(tile), mask.resize(tile);
    if (m.size() < static_cast<std::size_t>(bq)) m.resize(bq), l.resize(bq), d.resize(bq);
  }
};
thread_local Scratch scratch;

void forward_head(bool onednn, const AttentionShape& s, int n, int h, const float* qkv, float* y, float* lse) {
  const Head g(s, n, h);
  Scratch& w = scratch;
  w.reserve(g.bq, g.bk);
  const float keep_scale = s.dropout > 0.0f ? 1.0f / (1.0f - s.dropout) : 1.0f;
  float* lse_row = lse + (static_cast<std::size_t>(n) * s.heads + static_cast<std::size_t>(h)) * g.T;
  for (int i0 = 0; i0 < g.T; i0 += g.bq) {
    const int rows = std::min(g.bq, g.T - i0);
    float* o = y + g.y_at(i0);
    for (int r = 0; r < rows; ++r) {
      std::fill(o + static_cast<std::size_t>(r) * g.D, o + static_cast<std::size_t>(r) * g.D + g.hd, 0.0f);
      w.m[r] = kMinusInf;
      w.l[r] = 0.0f;
    }
    const int keys = i0 + rows;  // causal: keys [0, i0 + rows) at most
    for (int j0 = 0; j0 < keys; j0 += g.bk) {
      const int cols = std::min(g.bk, keys - j0);
      float* tile = w.s.data();
      sgemm(onednn, false, true, rows, cols, g.hd, g.scale, qkv + g.qkv_at(0, i0), g.ld, qkv + g.qkv_at(1, j0), g.ld,
            0.0f, tile, g.bk);
      for (int r = 0; r < rows; ++r) {
        float* p = tile + static_cast<std::size_t>(r) * g.bk;
        const int valid = Head::valid(i0 + r, j0, cols);
        if (valid == 0) {
          std::fill(p, p + cols, 0.0f);
          continue;
        }
        const float m_new = std::max(w.m[r], row_max(p, valid));
        const float alpha = w.m[r] == kMinusInf ? 0.0f : std::exp(w.m[r] - m_new);
        const float sum = exp_row(p, valid, cols, m_new);
        w.l[r] = w.l[r] * alpha + sum;
        w.m[r] = m_new;
        if (alpha != 1.0f) scale_row(o + static_cast<std::size_t>(r) * g.D, g.hd, alpha);
        if (s.dropout > 0.0f) {
          std::uint8_t* mask = w.mask.data();
          g.mask_row(s, i0 + r, j0, valid, mask);
          drop_row(p, mask, valid, keep_scale);
        }
      }
      sgemm(onednn, false, false, rows, g.hd, cols, 1.0f, tile, g.bk, qkv + g.qkv_at(2, j0), g.ld, 1.0f, o, g.D);
    }
    for (int r = 0; r < rows; ++r) {
      scale_row(o + static_cast<std::size_t>(r) * g.D, g.hd, 1.0f / w.l[r]);
      lse_row[i0 + r] = w.m[r] + std::log(w.l[r]);
    }
  }
}

void backward_head(bool onednn, const AttentionShape& s, int n, int h, const float* qkv, const float* y,
                   const float* lse, const float* dy, float* dqkv) {
  const Head g(s, n, h);
  Scratch& w = scratch;
  w.reserve(g.bq, g.bk);
  const bool dropout = s.dropout > 0.0f;
  const float keep_scale = dropout ? 1.0f / (1.0f - s.dropout) : 1.0f;
  const float* lse_row = lse + (static_cast<std::size_t>(n) * s.heads + static_cast<std::size_t>(h)) * g.T;
  for (int i = 0; i < g.T; ++i)
    for (int part = 0; part < 3; ++part) std::fill(dqkv + g.qkv_at(part, i), dqkv + g.qkv_at(part, i) + g.hd, 0.0f);
  for (int i0 = 0; i0 < g.T; i0 += g.bq) {
    const int rows = std::min(g.bq, g.T - i0);
    const float* o = y + g.y_at(i0);
    const float* dout = dy + g.y_at(i0);
    for (int r = 0; r < rows; ++r)
      w.d[r] = dot_row(dout + static_cast<std::size_t>(r) * g.D, o + static_cast<std::size_t>(r) * g.D, g.hd);
    const int keys = i0 + rows;
    for (int j0 = 0; j0 < keys; j0 += g.bk) {
      const int cols = std::min(g.bk, keys - j0);
      float* p = w.s.data();
      float* z = dropout ? w.z.data() : p;
      float* dp = w.dp.data();
      sgemm(onednn, false, true, rows, cols, g.hd, g.scale, qkv + g.qkv_at(0, i0), g.ld, qkv + g.qkv_at(1, j0), g.ld,
            0.0f, p, g.bk);
      for (int r = 0; r < rows; ++r) {
        const std::size_t at = static_cast<std::size_t>(r) * g.bk;
        const int valid = Head::valid(i0 + r, j0, cols);
        exp_row(p + at, valid, cols, lse_row[i0 + r]);
        if (dropout) {
          std::uint8_t* mask = w.mask.data() + at;
          g.mask_row(s, i0 + r, j0, valid, mask);
          std::fill(mask + valid, mask + cols, std::uint8_t{0});
          std::memcpy(z + at, p + at, static_cast<std::size_t>(cols) * sizeof(float));
          drop_row(z + at, mask, cols, keep_scale);
        }
      }
      // dV_j += Z^T dO_i; dZ = dO_i V_j^T.
      sgemm(onednn, true, false, cols, g.hd, rows, 1.0f, z, g.bk, dout, g.D, 1.0f, dqkv + g.qkv_at(2, j0), g.ld);
      sgemm(onednn, false, true, rows, cols, g.hd, 1.0f, dout, g.D, qkv + g.qkv_at(2, j0), g.ld, 0.0f, dp, g.bk);
      for (int r = 0; r < rows; ++r) {
        const std::size_t at = static_cast<std::size_t>(r) * g.bk;
        ds_row(p + at, dp + at, dropout ? w.mask.data() + at : nullptr, keep_scale, w.d[r], cols);
      }
      // dQ_i += dS K_j / sqrt(hd); dK_j += dS^T Q_i / sqrt(hd).
      sgemm(onednn, false, false, rows, g.hd, cols, g.scale, dp, g.bk, qkv + g.qkv_at(1, j0), g.ld, 1.0f,
            dqkv + g.qkv_at(0, i0), g.ld);
      sgemm(onednn, true, false, cols, g.hd, rows, g.scale, dp, g.bk, qkv + g.qkv_at(0, i0), g.ld, 1.0f,
            dqkv + g.qkv_at(1, j0), g.ld);
    }
  }
}

// Runs fn(n, h) for every (sample, head): over the threads when the GEMMs can nest.
template <typename Fn>
void for_each_head(bool onednn, const AttentionShape& s, Fn&& fn) {
  const std::size_t tasks = static_cast<std::size_t>(s.batch) * static_cast<std::size_t>(s.heads);
  const auto run = [&](std::size_t t) {
    fn(static_cast<int>(t / static_cast<std::size_t>(s.heads)),
       static_cast<int>(t % static_cast<std::size_t>(s.heads)));
  };
  if (sgemm_nests(onednn)) {
    // Work ~ length^2 x dim per sample: worth the threads unless tiny.
    const std::size_t work = static_cast<std::size_t>(s.batch) * static_cast<std::size_t>(s.length) *
                             static_cast<std::size_t>(s.length) * static_cast<std::size_t>(s.dim());
    parallel_for(tasks, work, run);
  } else {
    for (std::size_t t = 0; t < tasks; ++t) run(t);
  }
}

}  // namespace

void attention_forward(bool onednn, const AttentionShape& s, const float* qkv, float* y, float* lse) {
  for_each_head(onednn, s, [&](int n, int h) { forward_head(onednn, s, n, h, qkv, y, lse); });
}

void attention_backward(bool onednn, const AttentionShape& s, const float* qkv, const float* y, const float* lse,
                        const float* dy, float* dqkv) {
  for_each_head(onednn, s, [&](int n, int h) { backward_head(onednn, s, n, h, qkv, y, lse, dy, dqkv); });
}

}  // namespace drt::backend::cpu
