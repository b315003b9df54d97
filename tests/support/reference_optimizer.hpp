// Float64 reference implementations of the learning-rate schedules, the optimizers and gradient
// clipping, written straight from the torch.optim and torch.nn.utils documentation (not from
// src/optim or src/ps), for checking drtrain's float32 versions.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "drtrain/optim/optimizer.hpp"

namespace drt::testing {

inline double reference_lr(const optim::OptimizerConfig& c, std::int64_t step) {
  const auto& s = c.schedule;
  if (step < s.warmup_steps) return c.lr * double(step + 1) / double(s.warmup_steps);
  const std::int64_t k = step - s.warmup_steps;
  switch (s.kind) {
    case optim::LrScheduleKind::kConstant: return c.lr;
    case optim::LrScheduleKind::kStep: {
      double lr = c.lr;
      for (std::int64_t i = 0; i < k / s.decay_steps; ++i) lr *= s.decay_rate;
      return lr;
    }
    case optim::LrScheduleKind::kCosine: {
      const double t = std::min<double>(1.0, double(k) / double(s.total_steps - s.warmup_steps));
      return s.min_lr + (c.lr - s.min_lr) * (1.0 + std::cos(3.14159265358979323846 * t)) / 2.0;
    }
  }
  return c.lr;
}

// torch.nn.utils.clip_grad_norm_(parameters, max_norm) with norm_type 2, in float64: the L2 norm
// of every gradient together (as one vector), then every gradient multiplied by
// clamp(max_norm / (total_norm + 1e-6), max=1). Returns the norm before clipping. Elements i with
// `parameter[i]` false are not a parameter's gradient (a state tensor's update): neither counted
// nor scaled. Empty `parameter`: all are.
inline double clip_grad_norm(std::vector<double>& grad, double max_norm, const std::vector<bool>& parameter = {}) {
  double sum = 0.0;
  for (std::size_t i = 0; i < grad.size(); ++i)
    if (parameter.empty() || parameter[i]) sum += grad[i] * grad[i];
  const double total_norm = std::sqrt(sum);
  const double clip_coef_clamped = std::min(max_norm / (total_norm + 1e-6), 1.0);
  for (std::size_t i = 0; i < grad.size(); ++i)
    if (parameter.empty() || parameter[i]) grad[i] *= clip_coef_clamped;
  return total_norm;
}

// One parameter vector and its optimizer state, stepped with mean gradients in float64.
class ReferenceOptimizer {
 public:
  ReferenceOptimizer(const optim::OptimizerConfig& config, std::vector<double> params)
      : c_(config), p_(std::move(params)), a_(p_.size(), 0.0), b_(p_.size(), 0.0) {}

  // Per element: whether weight decay applies (torch: the parameter group's weight_decay, 0 for
  // the no-decay group); empty: everywhere.
  void set_decay(std::vector<bool> decays) { decay_ = std::move(decays); }
  // Per element: a state value (batch norm's running statistics), which takes the mean of the
  // workers' updates, p += g, and no optimizer; empty: none.
  void set_state(std::vector<bool> state) { state_ = std::move(state); }

  void step(const std::vector<double>& grad) {
    const double lr = reference_lr(c_, t_);
    ++t_;
    for (std::size_t i = 0; i < p_.size(); ++i) {
      double g = grad[i];
      if (!state_.empty() && state_[i]) {
        p_[i] += g;
        continue;
      }
      const double weight_decay = decay_.empty() || decay_[i] ? c_.weight_decay : 0.0;
      if (c_.kind == optim::OptimizerKind::kSgd) {
        g += weight_decay * p_[i];
        if (c_.momentum > 0.0) {
          a_[i] = t_ == 1 ? g : c_.momentum * a_[i] + g;  // torch: the buffer starts as g
          g = c_.nesterov ? g + c_.momentum * a_[i] : a_[i];
        }
        p_[i] -= lr * g;
      } else {
        if (c_.kind == optim::OptimizerKind::kAdamW) p_[i] *= 1.0 - lr * weight_decay;
        else g += weight_decay * p_[i];
        a_[i] = c_.beta1 * a_[i] + (1.0 - c_.beta1) * g;
        b_[i] = c_.beta2 * b_[i] + (1.0 - c_.beta2) * g * g;
        const double m_hat = a_[i] / (1.0 - std::pow(c_.beta1, double(t_)));
        const double v_hat = b_[i] / (1.0 - std::pow(c_.beta2, double(t_)));
        p_[i] -= lr * m_hat / (std::sqrt(v_hat) + c_.eps);
      }
    }
  }

  // One step with the mean gradient grad * grad_scale (float32 gradients, as drtrain's).
  void step(const std::vector<float>& grad, float grad_scale) {
    std::vector<double> mean(grad.size());
    for (std::size_t i = 0; i < grad.size(); ++i) mean[i] = static_cast<double>(grad[i]) * grad_scale;
    step(mean);
  }

  const std::vector<double>& params() const { return p_; }
  const std::vector<double>& momentum() const { return a_; }  // SGD's momentum buffer

  // The largest difference of `params` from these, relative to max(|reference|, 1e-2).
  double max_relative_error(const std::vector<float>& params) const {
    double worst = 0.0;
    for (std::size_t i = 0; i < p_.size(); ++i)
      worst = std::max(worst, std::fabs(params[i] - p_[i]) / std::max(std::fabs(p_[i]), 1e-2));
    return worst;
  }

 private:
  optim::OptimizerConfig c_;
  std::vector<double> p_, a_, b_;
  std::vector<bool> decay_, state_;
  std::int64_t t_ = 0;
};

}  // namespace drt::testing
