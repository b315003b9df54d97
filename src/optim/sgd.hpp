// SGD with optional (Nesterov) momentum and L2 weight decay, as torch.optim.SGD (dampening 0).
#pragma once

#include "drtrain/kernels/rules.hpp"
#include "drtrain/optim/optimizer.hpp"

namespace drt::optim {

class Sgd final : public Optimizer {
 public:
  Sgd(const OptimizerConfig& config, std::size_t shard_size);
  void update(std::size_t offset, std::size_t n, float* params, const float* grad, float grad_scale) override;
  // This step's constants of the per-element rule (kernels/rules.hpp), for a GPU update.
  kernels::SgdCoefficients coefficients() const;
};

}  // namespace drt::optim
