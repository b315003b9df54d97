// SGD with optional (Nesterov) momentum and L2 weight decay, as torch.optim.SGD (dampening 0).
#pragma once

#include "drtrain/kernels/rules.hpp"
#include "drtrain/optim/optimizer.hpp"

namespace drt::optim {

class Sgd final : public Optimizer {
 public:
  Sgd(const OptimizerConfig& config, std::size_t shard_size);
  void update(std::size_t offset, std::size_t n, float* params, const float* grad, float grad_scale) override;
  // One pass for a run of updates (kernels::ref::sgd_update_run).
  void begin_run(const std::vector<StepPoint>& points) override;
  void update_run(std::size_t offset, std::size_t n, float* params, const float* const* grads,
                  float grad_scale) override;
  // This step's constants of the per-element rule (kernels/rules.hpp), for a GPU update.
  kernels::SgdCoefficients coefficients() const;

 private:
  std::vector<kernels::SgdCoefficients> run_coefficients_;       // begin_run()'s, one per update
  std::vector<kernels::SgdCoefficients> no_decay_coefficients_;  // update_run() under set_decay(false)
};

}  // namespace drt::optim
