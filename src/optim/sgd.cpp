#include "sgd.hpp"

namespace drt::optim {
namespace {
std::vector<std::string> sgd_slots(const OptimizerConfig& c) {
  return c.momentum > 0.0 ? std::vector<std::string>{"momentum"} : std::vector<std::string>{};
}
}  // namespace

Sgd::Sgd(const OptimizerConfig& config, std::size_t shard_size)
    : Optimizer(config, shard_size, sgd_slots(config)) {}

void Sgd::update(std::size_t offset, std::size_t n, float* __restrict params,
                 const float* __restrict grad, float grad_scale) {
  const float lr = static_cast<float>(lr_);
  const float wd = static_cast<float>(config_.weight_decay);
  if (slots_.empty()) {
    for (std::size_t i = 0; i < n; ++i) params[i] -= lr * (grad[i] * grad_scale + wd * params[i]);
    return;
  }
  const float mu = static_cast<float>(config_.momentum);
  float* __restrict buf = slots_[0].data() + offset;
  if (config_.nesterov) {
    for (std::size_t i = 0; i < n; ++i) {
      const float g = grad[i] * grad_scale + wd * params[i];
      buf[i] = mu * buf[i] + g;
      params[i] -= lr * (g + mu * buf[i]);
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      buf[i] = mu * buf[i] + (grad[i] * grad_scale + wd * params[i]);
      params[i] -= lr * buf[i];
    }
  }
}

}  // namespace drt::optim
