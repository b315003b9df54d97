#include "sgd.hpp"

#include "drtrain/kernels/reference.hpp"

namespace drt::optim {
namespace {

std::vector<std::string> sgd_slots(const OptimizerConfig& c) {
  return c.momentum > 0.0 ? std::vector<std::string>{"momentum"} : std::vector<std::string>{};
}

}  // namespace

Sgd::Sgd(const OptimizerConfig& config, std::size_t shard_size) : Optimizer(config, shard_size, sgd_slots(config)) {}

kernels::SgdCoefficients Sgd::coefficients() const {
  kernels::SgdCoefficients c;
  c.lr = static_cast<float>(lr_);
  c.weight_decay = static_cast<float>(weight_decay());
  c.momentum = slots_.empty() ? 0.0f : static_cast<float>(config_.momentum);
  c.nesterov = config_.nesterov;
  return c;
}

void Sgd::update(std::size_t offset, std::size_t n, float* params, const float* grad, float grad_scale) {
  kernels::ref::sgd_update(coefficients(), params, grad, grad_scale,
                           slots_.empty() ? nullptr : slots_[0].data() + offset, n);
}

void Sgd::begin_run(const std::vector<StepPoint>& points) {
  const bool decay = decay_;
  decay_ = true;  // the run's own coefficients; update_run() drops the decay where set_decay(false)
  run_coefficients_.clear();
  for (const StepPoint& point : points) {
    begin_step(point.step, point.updates_before);
    run_coefficients_.push_back(coefficients());
  }
  decay_ = decay;
  Optimizer::begin_run(points);
}

void Sgd::update_run(std::size_t offset, std::size_t n, float* params, const float* const* grads, float grad_scale) {
  const std::vector<kernels::SgdCoefficients>* run = &run_coefficients_;
  if (!decay_) {  // set_decay(false) after begin_run(): the same updates without weight decay
    no_decay_coefficients_ = run_coefficients_;
    for (auto& c : no_decay_coefficients_) c.weight_decay = 0.0f;
    run = &no_decay_coefficients_;
  }
  kernels::ref::sgd_update_run(run->data(), grads, run->size(), grad_scale, params,
                               slots_.empty() ? nullptr : slots_[0].data() + offset, n);
}

}  // namespace drt::optim
