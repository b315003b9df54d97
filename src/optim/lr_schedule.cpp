#include "drtrain/optim/lr_schedule.hpp"

#include <algorithm>
#include <cmath>

#include "drtrain/core/choices.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::optim {

namespace {
constexpr Choice<LrScheduleKind> kSchedules[] = {
    {LrScheduleKind::kConstant, "constant"}, {LrScheduleKind::kStep, "step"}, {LrScheduleKind::kCosine, "cosine"}};
}  // namespace

LrScheduleKind parse_lr_schedule(const std::string& text) { return parse_choice(text, kSchedules, "--lr-schedule"); }
std::string to_string(LrScheduleKind kind) { return choice_name(kind, kSchedules); }

void LrSchedule::validate() const {
  if (warmup_steps < 0) throw ConfigError(str("--warmup-steps must be >= 0 (got ", warmup_steps, ")"));
  if (kind == LrScheduleKind::kStep && decay_steps < 1)
    throw ConfigError(str("--lr-decay-steps must be >= 1 for --lr-schedule step (got ", decay_steps, ")"));
  if (kind == LrScheduleKind::kStep && !(decay_rate > 0.0 && decay_rate <= 1.0))
    throw ConfigError(str("--lr-decay-rate must be in (0, 1] (got ", decay_rate, ")"));
  if (total_steps < 0)
    throw ConfigError(str("--cosine-steps must be >= 0 (0: the run's total steps), got ", total_steps));
  if (kind == LrScheduleKind::kCosine && total_steps <= warmup_steps)
    throw ConfigError(
        str("--lr-schedule cosine needs a decay length above --warmup-steps (", warmup_steps, "); got ", total_steps,
            " (--cosine-steps, or the run's total steps when it is 0): raise it or lower --warmup-steps"));
  if (!(min_lr >= 0.0)) throw ConfigError(str("--min-lr must be >= 0 (got ", min_lr, ")"));
}

double LrSchedule::lr_at(double base_lr, std::int64_t step) const {
  if (step < warmup_steps) return base_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  const double s = static_cast<double>(step - warmup_steps);
  switch (kind) {
    case LrScheduleKind::kConstant: return base_lr;
    case LrScheduleKind::kStep: return base_lr * std::pow(decay_rate, std::floor(s / static_cast<double>(decay_steps)));
    case LrScheduleKind::kCosine: {
      // nanoGPT's get_lr, operation for operation: past the decay length, min_lr; else
      // min_lr + coeff * (lr - min_lr) (tests/unit/test_optimizers.cpp compares every step).
      if (step > total_steps) return min_lr;
      const double decay_ratio = s / static_cast<double>(total_steps - warmup_steps);
      const double coeff = 0.5 * (1.0 + std::cos(M_PI * decay_ratio));
      return min_lr + coeff * (base_lr - min_lr);
    }
  }
  return base_lr;
}

std::string LrSchedule::describe() const {
  std::string out = to_string(kind);
  if (kind == LrScheduleKind::kStep) out += str(" (x", decay_rate, " every ", decay_steps, " steps)");
  if (kind == LrScheduleKind::kCosine) out += str(" (to ", min_lr, " at step ", total_steps, ")");
  if (warmup_steps > 0) out += str(", linear warmup ", warmup_steps, " steps");
  return out;
}

}  // namespace drt::optim
