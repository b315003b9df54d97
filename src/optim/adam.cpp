#include "adam.hpp"

#include <cmath>

#include "drtrain/kernels/reference.hpp"

namespace drt::optim {

Adam::Adam(const OptimizerConfig& config, std::size_t shard_size)
    : Optimizer(config, shard_size, {"exp_avg", "exp_avg_sq"}) {}

void Adam::on_begin_step() {
  const double t = static_cast<double>(updates_ + 1);
  step_size_ = static_cast<float>(lr_ / (1.0 - std::pow(config_.beta1, t)));
  inv_sqrt_bias2_ = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(config_.beta2, t)));
}

kernels::AdamCoefficients Adam::coefficients() const {
  kernels::AdamCoefficients c;
  c.beta1 = static_cast<float>(config_.beta1);
  c.beta2 = static_cast<float>(config_.beta2);
  // 1 - beta is formed in double, as torch does: 1.0f - 0.999f is 1.3e-5 off 0.001.
  c.one_minus_beta1 = static_cast<float>(1.0 - config_.beta1);
  c.one_minus_beta2 = static_cast<float>(1.0 - config_.beta2);
  c.eps = static_cast<float>(config_.eps);
  const float wd = static_cast<float>(weight_decay());
  const bool decoupled = config_.kind == OptimizerKind::kAdamW;
  c.l2 = decoupled ? 0.0f : wd;
  c.shrink = decoupled ? 1.0f - static_cast<float>(lr_) * wd : 1.0f;
  c.step_size = fraction_ == 1.0 ? step_size_ : static_cast<float>(step_size_ * fraction_);
  c.inv_sqrt_bias2 = inv_sqrt_bias2_;
  return c;
}

void Adam::update(std::size_t offset, std::size_t n, float* params, const float* grad, float grad_scale) {
  kernels::ref::adam_update(coefficients(), params, grad, grad_scale, slots_[0].data() + offset,
                            slots_[1].data() + offset, n);
}

}  // namespace drt::optim
