#include "adam.hpp"

#include <cmath>

namespace drt::optim {

Adam::Adam(const OptimizerConfig& config, std::size_t shard_size)
    : Optimizer(config, shard_size, {"exp_avg", "exp_avg_sq"}) {}

void Adam::on_begin_step() {
  const double t = static_cast<double>(step_ + 1);
  step_size_ = static_cast<float>(lr_ / (1.0 - std::pow(config_.beta1, t)));
  inv_sqrt_bias2_ = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(config_.beta2, t)));
}

void Adam::update(std::size_t offset, std::size_t n, float* __restrict params,
                  const float* __restrict grad, float grad_scale) {
  // 1 - beta is formed in double, as torch does: 1.0f - 0.999f is 1.3e-5 off 0.001.
  const float b1 = static_cast<float>(config_.beta1), b2 = static_cast<float>(config_.beta2);
  const float c1 = static_cast<float>(1.0 - config_.beta1), c2 = static_cast<float>(1.0 - config_.beta2);
  const float eps = static_cast<float>(config_.eps);
  const float wd = static_cast<float>(config_.weight_decay);
  const bool decoupled = config_.kind == OptimizerKind::kAdamW;
  const float l2 = decoupled ? 0.0f : wd;
  const float shrink = decoupled ? 1.0f - static_cast<float>(lr_) * wd : 1.0f;
  float* __restrict m = slots_[0].data() + offset;
  float* __restrict v = slots_[1].data() + offset;
  const float step_size = step_size_, inv_sqrt_bias2 = inv_sqrt_bias2_;
  for (std::size_t i = 0; i < n; ++i) {
    const float g = grad[i] * grad_scale + l2 * params[i];
    m[i] = b1 * m[i] + c1 * g;
    v[i] = b2 * v[i] + c2 * g * g;
    const float denom = std::sqrt(v[i]) * inv_sqrt_bias2 + eps;
    params[i] = params[i] * shrink - step_size * m[i] / denom;
  }
}

}  // namespace drt::optim
