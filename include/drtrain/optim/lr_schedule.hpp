// Learning-rate schedules, driven by the global step (the number of optimizer applications
// so far, starting at 0). Linear warmup combines with any schedule:
//   warmup  (step < warmup_steps):  lr = base * (step + 1) / warmup_steps
//   then s = step - warmup_steps and, by kind,
//   constant: lr = base
//   step:     lr = base * decay_rate ^ floor(s / decay_steps)
//   cosine:   lr = min_lr + (1 + cos(pi * s / (total_steps - warmup))) / 2 * (base - min_lr), and min_lr
//             after step total_steps (--cosine-steps; by default the run's total steps)
// Warmup and cosine are nanoGPT's get_lr as build-nanogpt and llm.c write it (warmup
// lr * (it + 1) / warmup_iters; lr_decay_iters = total_steps), operation for operation
// (tests/unit/test_optimizers.cpp); nanoGPT's train.py warms up by (it + 1) / (warmup_iters + 1)
// since December 2024.
#pragma once

#include <cstdint>
#include <string>

namespace drt::optim {

enum class LrScheduleKind { kConstant, kStep, kCosine };
LrScheduleKind parse_lr_schedule(const std::string& text);  // ConfigError lists the choices
std::string to_string(LrScheduleKind kind);

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::kConstant;
  std::int64_t warmup_steps = 0;
  std::int64_t decay_steps = 1000;  // step: decay every this many steps
  double decay_rate = 0.1;          // step: multiply by this
  std::int64_t total_steps = 0;     // cosine: the step at which lr reaches min_lr (--cosine-steps; 0: the run's)
  double min_lr = 0.0;              // cosine floor

  // Throws ConfigError naming the flag when a field is out of range.
  void validate() const;
  double lr_at(double base_lr, std::int64_t step) const;
  std::string describe() const;
};

}  // namespace drt::optim
