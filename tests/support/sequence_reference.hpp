// float64 references of the language-model operations, written from their definitions (plain
// loops, not copied from src/), for test_backend_ops.cpp, test_layers.cpp and the whole-GPT
// check: layer norm (torch.nn.LayerNorm), GELU with the tanh approximation, causal multi-head
// self-attention on nanoGPT's fused q, k, v rows with dropout on the probabilities.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "drtrain/kernels/rules.hpp"

namespace drt::sequence_reference {

using Vec = std::vector<double>;

// rows x dim values, each row normalised by its mean and biased variance; beta may be empty.
inline Vec layernorm(const Vec& x, const Vec& gamma, const Vec& beta, int rows, int dim, double eps) {
  Vec y(x.size());
  for (int r = 0; r < rows; ++r) {
    const double* row = x.data() + static_cast<std::size_t>(r) * dim;
    double mean = 0.0, var = 0.0;
    for (int j = 0; j < dim; ++j) mean += row[j];
    mean /= dim;
    for (int j = 0; j < dim; ++j) var += (row[j] - mean) * (row[j] - mean);
    var /= dim;
    for (int j = 0; j < dim; ++j)
      y[static_cast<std::size_t>(r) * dim + j] =
          (row[j] - mean) / std::sqrt(var + eps) * gamma[j] + (beta.empty() ? 0.0 : beta[j]);
  }
  return y;
}

// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
inline double gelu_tanh(double x) {
  const double pi = 3.14159265358979323846;
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (x + 0.044715 * x * x * x)));
}

struct Attention {
  int batch = 1, length = 1, heads = 1, head_dim = 1;
  double dropout = 0.0;
  std::uint64_t key = 0;
  std::int64_t first_sample = 0;
  int dim() const { return heads * head_dim; }
};

// y [batch, length, D] from qkv [batch, length, 3D]: for each sample, head h and query i,
// A_ij = softmax_{j <= i}(q_i . k_j / sqrt(hd)), dropped with the hash of (sample, (h T + i) T +
// j), y_i = sum_j A_ij mask_ij / (1 - p) v_j. lse (if not null): log sum_j exp(q_i . k_j / sqrt(hd)).
inline Vec attention(const Attention& a, const Vec& qkv, Vec* lse = nullptr) {
  const int T = a.length, D = a.dim(), hd = a.head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  Vec y(static_cast<std::size_t>(a.batch) * T * D, 0.0);
  if (lse) lse->assign(static_cast<std::size_t>(a.batch) * a.heads * T, 0.0);
  std::vector<double> s(static_cast<std::size_t>(T));
  for (int n = 0; n < a.batch; ++n)
    for (int h = 0; h < a.heads; ++h)
      for (int i = 0; i < T; ++i) {
        const double* q = qkv.data() + (static_cast<std::size_t>(n) * T + i) * 3 * D + h * hd;
        double top = -std::numeric_limits<double>::infinity();
        for (int j = 0; j <= i; ++j) {
          const double* k = qkv.data() + (static_cast<std::size_t>(n) * T + j) * 3 * D + D + h * hd;
          double dot = 0.0;
          for (int c = 0; c < hd; ++c) dot += q[c] * k[c];
          s[j] = dot * scale;
          top = std::max(top, s[j]);
        }
        double total = 0.0;
        for (int j = 0; j <= i; ++j) total += std::exp(s[j] - top);
        if (lse) (*lse)[(static_cast<std::size_t>(n) * a.heads + h) * T + i] = top + std::log(total);
        double* out = y.data() + (static_cast<std::size_t>(n) * T + i) * D + h * hd;
        for (int j = 0; j <= i; ++j) {
          double weight = std::exp(s[j] - top) / total;
          if (a.dropout > 0.0) {
            const std::uint64_t element = (static_cast<std::uint64_t>(h) * T + i) * T + j;
            weight = kernels::dropout_keep(a.key, a.first_sample + n, element, static_cast<float>(a.dropout))
                         ? weight / (1.0 - a.dropout)
                         : 0.0;
          }
          const double* v = qkv.data() + (static_cast<std::size_t>(n) * T + j) * 3 * D + 2 * D + h * hd;
          for (int c = 0; c < hd; ++c) out[c] += weight * v[c];
        }
      }
  return y;
}

}  // namespace drt::sequence_reference
