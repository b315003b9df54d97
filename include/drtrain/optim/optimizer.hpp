// Optimizers applied by a PS to its shard of the flat parameter space. Formulas follow
// torch.optim (documented in docs/OPTIMIZERS.md); g is the mean gradient (clipped by the PS
// under --grad-clip), wd the weight decay (0 on the tensors --decay-rule exempts):
//   sgd:       g += wd * p;  [momentum m > 0: b = m * b + g;  g = nesterov ? g + m * b : b]
//              p -= lr * g
//   adam:      g += wd * p  (L2);  then the Adam update with bias correction
//   adamw:     p -= lr * wd * p  (decoupled);  then the Adam update
// State ("slots": momentum buffer; Adam's exp_avg and exp_avg_sq) lives only on the PS that owns
// the shard, one float per shard element per slot.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "drtrain/core/aligned_buffer.hpp"
#include "drtrain/core/param_layout.hpp"
#include "drtrain/optim/lr_schedule.hpp"

namespace drt::optim {

enum class OptimizerKind { kSgd, kAdam, kAdamW };
OptimizerKind parse_optimizer(const std::string& text);  // ConfigError lists the choices
std::string to_string(OptimizerKind kind);

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kSgd;
  double lr = 0.05;
  double momentum = 0.9;  // sgd only; 0 = plain SGD
  bool nesterov = false;  // sgd with momentum only
  double beta1 = 0.9;     // adam, adamw
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  // Which tensors weight decay applies to (core/param_layout.hpp; the PS gets the others' ranges,
  // ParameterServer::set_no_decay_ranges): matrices (linear and conv weights) or all.
  DecayRule decay_rule = DecayRule::kMatrices;
  // --grad-clip: the mean gradient of each step scaled by min(1, grad_clip / (norm + 1e-6)), norm
  // its global L2 norm over every trainable tensor (torch.nn.utils.clip_grad_norm_); 0: off.
  double grad_clip = 0.0;
  LrSchedule schedule;

  void validate() const;  // ConfigError naming the flag
  int num_slots() const;  // state floats per parameter
  bool has_momentum_buffer() const { return kind == OptimizerKind::kSgd && momentum > 0.0; }  // SGD's one slot
  std::string describe() const;
};

// One update of a run (Optimizer::begin_run): begin_step()'s arguments.
struct StepPoint {
  std::int64_t step = 0;
  std::int64_t updates_before = -1;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Sets up global step `step` (0-based), which sets the learning rate (the schedule follows the
  // position in the data), after `updates_before` updates (Adam's bias correction counts updates;
  // -1: as many as `step`). The two differ after a resume at another --batch-size.
  void begin_step(std::int64_t step, std::int64_t updates_before = -1);
  // For i in [0, n): params[i] updated with gradient grad[i] * grad_scale; the state used is
  // that of shard element offset + i. Must follow begin_step(); blocks of one step may come in
  // any order, each element once.
  virtual void update(std::size_t offset, std::size_t n, float* params, const float* grad, float grad_scale) = 0;

  // Several updates in a row on the same elements (--sync-mode ssp/async: several workers'
  // gradients pending at once). After begin_run(points), update_run() applies grads[j] *
  // grad_scale as update j, at points[j], for j = 0, 1, ... in turn: bitwise what begin_step()
  // and update() for each would give, in one pass over the parameters and the state where the
  // optimizer has a fused kernel (SGD). Blocks of a run may come in any order, each element once;
  // the optimizer stands at the last point afterwards (current_lr() is its rate).
  virtual void begin_run(const std::vector<StepPoint>& points);
  virtual void update_run(std::size_t offset, std::size_t n, float* params, const float* const* grads,
                          float grad_scale);

  // Each update() from now on is `fraction` of an optimizer step (0 < fraction <= 1; default 1):
  // it carries that fraction of the weight decay and, for Adam, of the step size (the gradient's
  // own share is grad_scale). --sync-mode ssp/async apply each of W workers' gradients as 1/W of
  // a step, so that W of them move the parameters as far as one synchronous step would (they
  // count each application as an update for Adam's bias correction: its averages see each).
  void set_step_fraction(double fraction) { fraction_ = fraction; }
  // Whether the update() and update_run() calls from now on apply the weight decay (default
  // true): the PS turns it off on the ranges --decay-rule exempts, for the L2 decay of sgd and
  // adam and the decoupled one of adamw alike.
  void set_decay(bool decay) { decay_ = decay; }
  bool decay() const { return decay_; }
  const OptimizerConfig& config() const { return config_; }
  double current_lr() const { return lr_; }
  std::int64_t current_step() const { return step_; }
  std::int64_t updates_before() const { return updates_; }
  std::size_t shard_size() const { return shard_size_; }
  const std::vector<std::string>& slot_names() const { return slot_names_; }
  AlignedBuffer<float>& slot(std::size_t k) { return slots_[k]; }

 protected:
  Optimizer(const OptimizerConfig& config, std::size_t shard_size, std::vector<std::string> slots);
  virtual void on_begin_step() {}

  OptimizerConfig config_;
  std::size_t shard_size_;
  std::vector<std::string> slot_names_;
  std::vector<AlignedBuffer<float>> slots_;
  std::int64_t step_ = -1;
  std::int64_t updates_ = -1;  // updates applied before the current step
  double lr_ = 0.0;
  double fraction_ = 1.0;  // set_step_fraction()
  bool decay_ = true;      // set_decay()
  // This update's weight decay: the configured one times the step fraction, 0 where set_decay(false).
  double weight_decay() const { return decay_ ? config_.weight_decay * fraction_ : 0.0; }
  std::vector<StepPoint> run_;  // begin_run()
};

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, std::size_t shard_size);

}  // namespace drt::optim
