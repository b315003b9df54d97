// Adam (L2 weight decay added to the gradient) and AdamW (decoupled weight decay), as
// torch.optim.Adam / AdamW with amsgrad off.
#pragma once

#include "drtrain/kernels/rules.hpp"
#include "drtrain/optim/optimizer.hpp"

namespace drt::optim {

class Adam final : public Optimizer {
 public:
  Adam(const OptimizerConfig& config, std::size_t shard_size);
  void update(std::size_t offset, std::size_t n, float* params, const float* grad, float grad_scale) override;
  // This step's constants of the per-element rule (kernels/rules.hpp), for a GPU update.
  kernels::AdamCoefficients coefficients() const;

 private:
  void on_begin_step() override;
  float step_size_ = 0.0f;       // lr / (1 - beta1^t)
  float inv_sqrt_bias2_ = 1.0f;  // 1 / sqrt(1 - beta2^t)
};

}  // namespace drt::optim
