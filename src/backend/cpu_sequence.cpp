#include "cpu_sequence.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#include "drtrain/core/error.hpp"
#include "drtrain/core/simd_clones.hpp"
#include "drtrain/core/strings.hpp"
#include "cpu_parallel.hpp"

namespace drt::backend::cpu {
namespace {

// Rows per piece of work: the pieces, not the threads, fix how column sums are split, so the
// sums do not depend on the thread count.
constexpr std::size_t kRowsPerPiece = 64;

std::size_t pieces(int rows) { return (static_cast<std::size_t>(rows) + kRowsPerPiece - 1) / kRowsPerPiece; }

// One row: mean and 1 / sqrt(biased variance + eps) (two passes, sums in double), then y.
DRT_SIMD_CLONES
void layernorm_row(const float* x, const float* gamma, const float* beta, int dim, float eps, float* y, float* mean_out,
                   float* inv_out) {
  double sum = 0.0;
  for (int j = 0; j < dim; ++j) sum += x[j];
  const float mean = static_cast<float>(sum / dim);
  double sq = 0.0;
  for (int j = 0; j < dim; ++j) {
    const float d = x[j] - mean;
    sq += static_cast<double>(d) * d;
  }
  const float inv = static_cast<float>(1.0 / std::sqrt(sq / dim + static_cast<double>(eps)));
  if (beta)
    for (int j = 0; j < dim; ++j) y[j] = (x[j] - mean) * inv * gamma[j] + beta[j];
  else
    for (int j = 0; j < dim; ++j) y[j] = (x[j] - mean) * inv * gamma[j];
  *mean_out = mean;
  *inv_out = inv;
}

// One row's dx (when dx is not null), and its terms added into the column sums dgamma_part
// (dy * xhat) and dbeta_part (dy).
DRT_SIMD_CLONES
void layernorm_row_backward(const float* x, const float* dy, const float* gamma, float mean, float inv, int dim,
                            float* dx, float* dgamma_part, float* dbeta_part) {
  double a = 0.0, b = 0.0;  // sums of g and g * xhat, g = dy * gamma
  for (int j = 0; j < dim; ++j) {
    const float xhat = (x[j] - mean) * inv;
    const float g = dy[j] * gamma[j];
    a += g;
    b += static_cast<double>(g) * xhat;
    dgamma_part[j] += dy[j] * xhat;
    dbeta_part[j] += dy[j];
  }
  if (!dx) return;
  const float ma = static_cast<float>(a / dim), mb = static_cast<float>(b / dim);
  for (int j = 0; j < dim; ++j) {
    const float xhat = (x[j] - mean) * inv;
    dx[j] = inv * (dy[j] * gamma[j] - ma - xhat * mb);
  }
}

DRT_SIMD_CLONES
void add_into(float* sum, const float* part, int n) {
  for (int j = 0; j < n; ++j) sum[j] += part[j];
}

// Token ids as floats: whole numbers in [0, vocab), checked before any thread starts.
void check_ids(const EmbeddingShape& s, const float* ids) {
  for (int r = 0; r < s.rows; ++r) {
    const float v = ids[r];
    if (!(v >= 0.0f && v < static_cast<float>(s.vocab)) || v != std::floor(v))
      throw Error(str("embedding: token id ", v, " at position ", r, " of the batch is not a whole number in [0, ",
                      s.vocab, "); the data's tokens must be below the embedding's vocab"));
  }
}

}  // namespace

void layernorm_forward(const LayerNormShape& s, const float* x, const float* gamma, const float* beta, float* y,
                       float* mean, float* inv_std) {
  const std::size_t dim = static_cast<std::size_t>(s.dim);
  parallel_for(pieces(s.rows), s.size(), [&](std::size_t p) {
    const std::size_t end = std::min(static_cast<std::size_t>(s.rows), (p + 1) * kRowsPerPiece);
    for (std::size_t r = p * kRowsPerPiece; r < end; ++r)
      layernorm_row(x + r * dim, gamma, beta, s.dim, s.eps, y + r * dim, mean + r, inv_std + r);
  });
}

void layernorm_backward(const LayerNormShape& s, const float* x, const float* dy, const float* gamma, const float* mean,
                        const float* inv_std, float* dx, float* dgamma, float* dbeta) {
  const std::size_t dim = static_cast<std::size_t>(s.dim), count = pieces(s.rows);
  // Per piece: its column sums of dy * xhat, then of dy; added up in piece order.
  std::vector<float> parts(count * 2 * dim, 0.0f);
  parallel_for(count, s.size(), [&](std::size_t p) {
    float* part = parts.data() + p * 2 * dim;
    const std::size_t end = std::min(static_cast<std::size_t>(s.rows), (p + 1) * kRowsPerPiece);
    for (std::size_t r = p * kRowsPerPiece; r < end; ++r)
      layernorm_row_backward(x + r * dim, dy + r * dim, gamma, mean[r], inv_std[r], s.dim, dx ? dx + r * dim : nullptr,
                             part, part + dim);
  });
  std::fill(dgamma, dgamma + dim, 0.0f);
  if (dbeta) std::fill(dbeta, dbeta + dim, 0.0f);
  for (std::size_t p = 0; p < count; ++p) {
    add_into(dgamma, parts.data() + p * 2 * dim, s.dim);
    if (dbeta) add_into(dbeta, parts.data() + p * 2 * dim + dim, s.dim);
  }
}

void embedding_forward(const EmbeddingShape& s, const float* ids, const float* table, float* y) {
  check_ids(s, ids);
  const std::size_t dim = static_cast<std::size_t>(s.dim);
  parallel_for(pieces(s.rows), static_cast<std::size_t>(s.rows) * dim, [&](std::size_t p) {
    const std::size_t end = std::min(static_cast<std::size_t>(s.rows), (p + 1) * kRowsPerPiece);
    for (std::size_t r = p * kRowsPerPiece; r < end; ++r)
      std::memcpy(y + r * dim, table + static_cast<std::size_t>(ids[r]) * dim, dim * sizeof(float));
  });
}

void embedding_backward(const EmbeddingShape& s, const float* ids, const float* dy, float* dtable, bool accumulate) {
  check_ids(s, ids);
  const std::size_t dim = static_cast<std::size_t>(s.dim);
  if (!accumulate)
    parallel_ranges(static_cast<std::size_t>(s.vocab) * dim,
                    [&](std::size_t b, std::size_t e) { std::fill(dtable + b, dtable + e, 0.0f); });
  // Each thread owns a block of columns and adds the rows in order: no two threads write one
  // value, and every value's sum runs in row order (deterministic).
  constexpr std::size_t kColumns = 64;
  const std::size_t blocks = (dim + kColumns - 1) / kColumns;
  parallel_for(blocks, static_cast<std::size_t>(s.rows) * dim, [&](std::size_t b) {
    const std::size_t c0 = b * kColumns, c1 = std::min(dim, c0 + kColumns);
    for (int r = 0; r < s.rows; ++r) {
      float* to = dtable + static_cast<std::size_t>(ids[r]) * dim;
      const float* from = dy + static_cast<std::size_t>(r) * dim;
      for (std::size_t c = c0; c < c1; ++c) to[c] += from[c];
    }
  });
}

}  // namespace drt::backend::cpu
