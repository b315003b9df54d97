#include "cpu_batchnorm.hpp"

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

// Two sums over one channel, sum_i a_i and sum_i a_i * b_i with a_i = u[i] - u_shift and
// b_i = v[i] - v_shift.
struct Sums {
  double first = 0.0, second = 0.0;
};

// Float lanes, added into double every kRun values: a channel's values are summed in float in
// kLanes independent partial sums (one AVX-512 register, written as a GCC vector so that the
// compiler keeps it in registers; one running sum would chain every addition to the previous
// one, and the compiler may not reassociate), and the lanes are added into double whenever
// kRun values have gone in since the last time. A lane so adds up about kRun / kLanes = 32 values
// in float, which loses nothing that matters, while the loop runs at the full float vector width
// (double lanes would halve it) and small maps (7x7) do not pay a reduction per block.
constexpr std::size_t kLanes = 16, kRun = 512;
using Lanes = float __attribute__((vector_size(kLanes * sizeof(float))));

// The sums of one channel: its block of spatial values in each of `batch` samples, stride apart.
DRT_SIMD_CLONES
Sums one_channel_sums(const float* u, float u_shift, const float* v, float v_shift, std::size_t spatial,
                      std::size_t stride, int batch) {
  Sums out;
  Lanes la = {}, lb = {};
  std::size_t pending = 0;  // values in la and lb
  const auto flush = [&] {
    double sa = 0.0, sb = 0.0;
    for (std::size_t l = 0; l < kLanes; ++l) {
      sa += la[l];
      sb += lb[l];
    }
    out.first += sa;
    out.second += sb;
    la = Lanes{};
    lb = Lanes{};
    pending = 0;
  };
  for (int n = 0; n < batch; ++n) {
    const float* a = u + static_cast<std::size_t>(n) * stride;
    const float* b = v + static_cast<std::size_t>(n) * stride;
    for (std::size_t at = 0; at < spatial;) {
      const std::size_t end = std::min(spatial, at + (kRun - pending));
      std::size_t i = at;
      for (; i + kLanes <= end; i += kLanes) {
        Lanes x, y;  // unaligned loads
        std::memcpy(&x, a + i, sizeof x);
        std::memcpy(&y, b + i, sizeof y);
        const Lanes du = x - u_shift;
        la += du;
        lb += du * (y - v_shift);
      }
      for (; i < end; ++i) {
        const float du = a[i] - u_shift;
        la[0] += du;
        lb[0] += du * (b[i] - v_shift);
      }
      pending += end - at;
      at = end;
      if (pending >= kRun) flush();
    }
  }
  flush();
  return out;
}

// The sums of every channel, one channel per task (so the result does not depend on the number
// of threads).
std::vector<Sums> channel_sums(const BatchNormShape& s, const float* u, const std::vector<float>& u_shift,
                               const float* v, const std::vector<float>& v_shift) {
  const auto spatial = static_cast<std::size_t>(s.spatial);
  const auto channels = static_cast<std::size_t>(s.channels);
  std::vector<Sums> sums(channels);
  parallel_for(channels, s.count() * channels, [&](std::size_t c) {
    sums[c] = one_channel_sums(u + c * spatial, u_shift[c], v + c * spatial, v_shift[c], spatial, channels * spatial,
                               s.batch);
  });
  return sums;
}

// Calls fn(c, offset) for every (sample, channel) block, the blocks split over the threads.
template <typename Fn>
void for_each_block(const BatchNormShape& s, Fn&& fn) {
  const auto spatial = static_cast<std::size_t>(s.spatial);
  const auto channels = static_cast<std::size_t>(s.channels);
  parallel_for(static_cast<std::size_t>(s.batch) * channels, s.count() * channels,
               [&](std::size_t block) { fn(block % channels, block * spatial); });
}

// y = (x - mean) * scale + beta over one block.
DRT_SIMD_CLONES
void normalise_block(const float* x, float mean, float scale, float beta, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * scale + beta;
}

// dx = k * (dy - mean_dy - (x - mean) * coef) over one block.
DRT_SIMD_CLONES
void input_grad_block(const float* x, const float* dy, float mean, float k, float mean_dy, float coef, float* dx,
                      std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dx[i] = k * (dy[i] - mean_dy - (x[i] - mean) * coef);
}

void normalise(const BatchNormShape& s, const float* x, const std::vector<float>& mean, const std::vector<float>& scale,
               const float* beta, float* y) {
  const auto spatial = static_cast<std::size_t>(s.spatial);
  for_each_block(
      s, [&](std::size_t c, std::size_t at) { normalise_block(x + at, mean[c], scale[c], beta[c], y + at, spatial); });
}

}  // namespace

// The variance is the mean square of x - shift minus the square of its mean, with shift = the
// channel's first value: close enough to the mean that the subtraction loses nothing that
// matters in double, and one pass over x instead of two.
void batchnorm_forward_train(const BatchNormShape& s, const float* x, const float* gamma, const float* beta, float eps,
                             float* y, float* save_mean, float* save_inv_std, float momentum, const float* running_mean,
                             const float* running_var, float* new_mean, float* new_var) {
  const std::size_t count = s.count();
  if (new_mean && count < 2)
    throw Error(str("batch norm: the running variance needs more than one value per channel (batch ", s.batch,
                    " x spatial ", s.spatial, ")"));
  const auto spatial = static_cast<std::size_t>(s.spatial);
  const auto channels = static_cast<std::size_t>(s.channels);
  std::vector<float> shift(channels);
  for (std::size_t c = 0; c < channels; ++c) shift[c] = count ? x[c * spatial] : 0.0f;
  const std::vector<Sums> sums = channel_sums(s, x, shift, x, shift);
  std::vector<float> mean(channels), scale(channels);
  const auto n = static_cast<double>(count);
  for (std::size_t c = 0; c < channels; ++c) {
    const double shifted_mean = sums[c].first / n;
    const double var = std::max(0.0, sums[c].second / n - shifted_mean * shifted_mean);  // biased
    const double batch_mean = shift[c] + shifted_mean, inv_std = 1.0 / std::sqrt(var + eps);
    mean[c] = save_mean[c] = static_cast<float>(batch_mean);
    save_inv_std[c] = static_cast<float>(inv_std);
    scale[c] = static_cast<float>(gamma[c] * inv_std);
    if (new_mean) {
      // Read before written: new_mean may be running_mean (and new_var running_var).
      const double m = momentum, unbiased = var * n / (n - 1.0);
      new_mean[c] = static_cast<float>((1.0 - m) * running_mean[c] + m * batch_mean);
      new_var[c] = static_cast<float>((1.0 - m) * running_var[c] + m * unbiased);
    }
  }
  normalise(s, x, mean, scale, beta, y);
}

void batchnorm_forward_infer(const BatchNormShape& s, const float* x, const float* gamma, const float* beta,
                             const float* running_mean, const float* running_var, float eps, float* y) {
  const auto channels = static_cast<std::size_t>(s.channels);
  std::vector<float> mean(running_mean, running_mean + channels), scale(channels);
  for (std::size_t c = 0; c < channels; ++c)
    scale[c] = static_cast<float>(gamma[c] / std::sqrt(static_cast<double>(running_var[c]) + eps));
  normalise(s, x, mean, scale, beta, y);
}

// With xhat = (x - mean) * inv_std: dbeta = sum dy, dgamma = sum dy * xhat, and
// dx = gamma * inv_std * (dy - dbeta / count - xhat * dgamma / count).
void batchnorm_backward(const BatchNormShape& s, const float* x, const float* dy, const float* gamma,
                        const float* save_mean, const float* save_inv_std, float* dx, float* dgamma, float* dbeta) {
  const auto spatial = static_cast<std::size_t>(s.spatial);
  const auto channels = static_cast<std::size_t>(s.channels);
  const std::vector<float> zero(channels, 0.0f), mean(save_mean, save_mean + channels);
  const std::vector<Sums> sums = channel_sums(s, dy, zero, x, mean);  // sum dy, sum dy * (x - mean)
  const auto n = static_cast<double>(s.count());
  std::vector<float> k(channels), mean_dy(channels), coef(channels);
  for (std::size_t c = 0; c < channels; ++c) {
    const double inv_std = save_inv_std[c], dg = sums[c].second * inv_std;
    dbeta[c] = static_cast<float>(sums[c].first);
    dgamma[c] = static_cast<float>(dg);
    k[c] = static_cast<float>(gamma[c] * inv_std);
    mean_dy[c] = static_cast<float>(sums[c].first / n);
    coef[c] = static_cast<float>(inv_std * dg / n);
  }
  if (!dx) return;
  for_each_block(s, [&](std::size_t c, std::size_t at) {
    input_grad_block(x + at, dy + at, mean[c], k[c], mean_dy[c], coef[c], dx + at, spatial);
  });
}

}  // namespace drt::backend::cpu
