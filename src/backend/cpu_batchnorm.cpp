#include "cpu_batchnorm.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::backend::cpu {
namespace {

// Channel c of sample n is the contiguous block x + (n * channels + c) * spatial. The passes walk
// the blocks in memory order (sample-major), which suits both large images and spatial = 1.
template <typename Fn>
void for_each_block(const BatchNormShape& s, Fn&& fn) {
  const auto spatial = static_cast<std::size_t>(s.spatial);
  for (int n = 0; n < s.batch; ++n)
    for (int c = 0; c < s.channels; ++c)
      fn(c,
         (static_cast<std::size_t>(n) * static_cast<std::size_t>(s.channels) + static_cast<std::size_t>(c)) * spatial);
}

// Two sums over a block, sum_i a_i and sum_i a_i * b_i with a_i = u[i] - u_shift and b_i =
// v[i] - v_shift, in double and in kLanes independent partial sums: one running sum would chain
// every addition to the previous one (and the compiler may not reassociate it).
struct Sums {
  double first = 0.0, second = 0.0;
};
void add_sums(const float* u, double u_shift, const float* v, double v_shift, std::size_t n, Sums& out) {
  constexpr std::size_t kLanes = 8;
  double a[kLanes] = {}, b[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (std::size_t l = 0; l < kLanes; ++l) {
      const double du = static_cast<double>(u[i + l]) - u_shift;
      a[l] += du;
      b[l] += du * (static_cast<double>(v[i + l]) - v_shift);
    }
  for (; i < n; ++i) {
    const double du = static_cast<double>(u[i]) - u_shift;
    a[0] += du;
    b[0] += du * (static_cast<double>(v[i]) - v_shift);
  }
  for (std::size_t l = 0; l < kLanes; ++l) {
    out.first += a[l];
    out.second += b[l];
  }
}

// y = (x - mean) * scale + beta per channel, for both forward modes.
void normalise(const BatchNormShape& s, const float* x, const std::vector<float>& mean, const std::vector<float>& scale,
               const float* beta, float* y) {
  const auto spatial = static_cast<std::size_t>(s.spatial);
  for_each_block(s, [&](int c, std::size_t at) {
    const float m = mean[c], k = scale[c], b = beta[c];
    for (std::size_t i = at; i < at + spatial; ++i) y[i] = (x[i] - m) * k + b;
  });
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
  std::vector<double> shift(channels);
  for (std::size_t c = 0; c < channels; ++c) shift[c] = count ? x[c * spatial] : 0.0;
  std::vector<Sums> sums(channels);
  for_each_block(s, [&](int c, std::size_t at) { add_sums(x + at, shift[c], x + at, shift[c], spatial, sums[c]); });
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
  std::vector<Sums> sums(channels);  // first: sum dy; second: sum dy * (x - mean)
  for_each_block(s, [&](int c, std::size_t at) {
    add_sums(dy + at, 0.0, x + at, static_cast<double>(save_mean[c]), spatial, sums[c]);
  });
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
  for_each_block(s, [&](int c, std::size_t at) {
    const float m = save_mean[c], kc = k[c], md = mean_dy[c], cc = coef[c];
    for (std::size_t i = at; i < at + spatial; ++i) dx[i] = kc * (dy[i] - md - (x[i] - m) * cc);
  });
}

}  // namespace drt::backend::cpu
