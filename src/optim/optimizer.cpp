#include "drtrain/optim/optimizer.hpp"

#include <cmath>

#include "drtrain/core/choices.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "adam.hpp"
#include "sgd.hpp"

namespace drt::optim {

namespace {
constexpr Choice<OptimizerKind> kOptimizers[] = {
    {OptimizerKind::kSgd, "sgd"}, {OptimizerKind::kAdam, "adam"}, {OptimizerKind::kAdamW, "adamw"}};
}  // namespace

OptimizerKind parse_optimizer(const std::string& text) { return parse_choice(text, kOptimizers, "--optimizer"); }
std::string to_string(OptimizerKind kind) { return choice_name(kind, kOptimizers); }

void OptimizerConfig::validate() const {
  if (!(lr > 0.0) || !std::isfinite(lr)) throw ConfigError(str("--lr must be a positive number (got ", lr, ")"));
  if (!(momentum >= 0.0 && momentum < 1.0)) throw ConfigError(str("--momentum must be in [0, 1) (got ", momentum, ")"));
  if (nesterov && (kind != OptimizerKind::kSgd || momentum == 0.0))
    throw ConfigError("--nesterov needs --optimizer sgd with --momentum above 0");
  if (!(beta1 >= 0.0 && beta1 < 1.0) || !(beta2 >= 0.0 && beta2 < 1.0))
    throw ConfigError(str("--beta1 and --beta2 must be in [0, 1) (got ", beta1, ", ", beta2, ")"));
  if (!(eps > 0.0)) throw ConfigError(str("--eps must be positive (got ", eps, ")"));
  if (!(weight_decay >= 0.0) || !std::isfinite(weight_decay))
    throw ConfigError(str("--weight-decay must be >= 0 (got ", weight_decay, ")"));
  if (!(grad_clip >= 0.0) || !std::isfinite(grad_clip))
    throw ConfigError(str("--grad-clip must be >= 0 (the largest global gradient norm; 0: off), got ", grad_clip));
  schedule.validate();
}

int OptimizerConfig::num_slots() const {
  if (kind == OptimizerKind::kSgd) return momentum > 0.0 ? 1 : 0;
  return 2;
}

std::string OptimizerConfig::describe() const {
  std::string out = str(to_string(kind), " lr=", lr);
  if (kind == OptimizerKind::kSgd && momentum > 0.0) out += str(" momentum=", momentum, nesterov ? " (nesterov)" : "");
  if (kind != OptimizerKind::kSgd) out += str(" betas=(", beta1, ", ", beta2, ") eps=", eps);
  if (weight_decay > 0.0)
    out += str(" weight_decay=", weight_decay, kind == OptimizerKind::kAdamW ? " (decoupled" : " (L2",
               ", --decay-rule ", to_string(decay_rule), ")");
  if (grad_clip > 0.0) out += str(" grad_clip=", grad_clip);
  return out + ", schedule " + schedule.describe();
}

Optimizer::Optimizer(const OptimizerConfig& config, std::size_t shard_size, std::vector<std::string> slots)
    : config_(config), shard_size_(shard_size), slot_names_(std::move(slots)) {
  for (std::size_t k = 0; k < slot_names_.size(); ++k) slots_.emplace_back(shard_size);
}

void Optimizer::begin_step(std::int64_t step, std::int64_t updates_before) {
  step_ = step;
  updates_ = updates_before < 0 ? step : updates_before;
  lr_ = config_.schedule.lr_at(config_.lr, step);
  on_begin_step();
}

void Optimizer::begin_run(const std::vector<StepPoint>& points) {
  DRT_ASSERT(!points.empty(), "a run of updates has at least one");
  run_ = points;
  begin_step(run_.back().step, run_.back().updates_before);
}

// Without a fused kernel: the updates one after the other, each a pass of its own.
void Optimizer::update_run(std::size_t offset, std::size_t n, float* params, const float* const* grads,
                           float grad_scale) {
  for (std::size_t j = 0; j < run_.size(); ++j) {
    begin_step(run_[j].step, run_[j].updates_before);
    update(offset, n, params, grads[j], grad_scale);
  }
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, std::size_t shard_size) {
  config.validate();
  if (config.kind == OptimizerKind::kSgd) return std::make_unique<Sgd>(config, shard_size);
  return std::make_unique<Adam>(config, shard_size);
}

}  // namespace drt::optim
