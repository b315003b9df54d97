// Every optimizer and LR schedule against the float64 reference (tests/support), over many
// steps, with and without weight decay; block-wise application equals whole-shard application.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "drtrain/core/error.hpp"
#include "drtrain/optim/optimizer.hpp"
#include "support/reference_optimizer.hpp"

namespace drt::optim {
namespace {

constexpr std::size_t kSize = 1031;  // odd, not a multiple of any vector width
constexpr int kSteps = 40;

std::vector<float> random_floats(std::size_t n, std::uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Runs `config` on float32 (drtrain) and float64 (reference) and returns the largest relative
// difference of the parameters, relative to max(|reference|, 1e-2).
double max_relative_error(const OptimizerConfig& config, float grad_scale = 0.5f) {
  std::vector<float> params = random_floats(kSize, 1, 1.0f);
  testing::ReferenceOptimizer reference(config, std::vector<double>(params.begin(), params.end()));
  auto optimizer = make_optimizer(config, kSize);
  for (int step = 0; step < kSteps; ++step) {
    const std::vector<float> grad = random_floats(kSize, 100 + static_cast<std::uint64_t>(step), 1.0f);
    optimizer->begin_step(step);
    EXPECT_NEAR(optimizer->current_lr(), testing::reference_lr(config, step), 1e-12 * config.lr);
    optimizer->update(0, kSize, params.data(), grad.data(), grad_scale);
    reference.step(grad, grad_scale);
  }
  return reference.max_relative_error(params);
}

struct Case {
  const char* name;
  OptimizerKind kind;
  double momentum;
  bool nesterov;
  double weight_decay;
  LrScheduleKind schedule;
  int warmup;
};

class OptimizerVsReference : public ::testing::TestWithParam<Case> {};

TEST_P(OptimizerVsReference, MatchesFloat64) {
  const Case& c = GetParam();
  OptimizerConfig config;
  config.kind = c.kind;
  config.lr = c.kind == OptimizerKind::kSgd ? 0.05 : 0.01;
  config.momentum = c.momentum;
  config.nesterov = c.nesterov;
  config.weight_decay = c.weight_decay;
  config.schedule.kind = c.schedule;
  config.schedule.warmup_steps = c.warmup;
  config.schedule.decay_steps = 7;
  config.schedule.decay_rate = 0.5;
  config.schedule.total_steps = kSteps - 5;  // reaches min_lr before the end
  config.schedule.min_lr = 0.001;
  EXPECT_LT(max_relative_error(config), 2e-5);
}

INSTANTIATE_TEST_SUITE_P(
    All, OptimizerVsReference,
    ::testing::Values(Case{"sgd", OptimizerKind::kSgd, 0.0, false, 0.0, LrScheduleKind::kConstant, 0},
                      Case{"sgd_wd_step", OptimizerKind::kSgd, 0.0, false, 0.01, LrScheduleKind::kStep, 0},
                      Case{"momentum", OptimizerKind::kSgd, 0.9, false, 0.0, LrScheduleKind::kConstant, 0},
                      Case{"momentum_wd_cosine", OptimizerKind::kSgd, 0.9, false, 5e-4, LrScheduleKind::kCosine, 5},
                      Case{"nesterov", OptimizerKind::kSgd, 0.9, true, 0.0, LrScheduleKind::kStep, 3},
                      Case{"nesterov_wd", OptimizerKind::kSgd, 0.8, true, 1e-3, LrScheduleKind::kConstant, 4},
                      Case{"adam", OptimizerKind::kAdam, 0.0, false, 0.0, LrScheduleKind::kConstant, 0},
                      Case{"adam_l2_cosine", OptimizerKind::kAdam, 0.0, false, 0.01, LrScheduleKind::kCosine, 5},
                      Case{"adamw", OptimizerKind::kAdamW, 0.0, false, 0.05, LrScheduleKind::kConstant, 0},
                      Case{"adamw_step_warmup", OptimizerKind::kAdamW, 0.0, false, 0.01, LrScheduleKind::kStep, 6}),
    [](const ::testing::TestParamInfo<Case>& p) { return std::string(p.param.name); });

TEST(Optimizer, BlockwiseUpdateEqualsWholeShard) {
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kAdam, OptimizerKind::kAdamW}) {
    OptimizerConfig config;
    config.kind = kind;
    config.weight_decay = 0.01;
    auto whole = make_optimizer(config, kSize), blocks = make_optimizer(config, kSize);
    std::vector<float> a = random_floats(kSize, 3, 1.0f), b = a;
    for (int step = 0; step < 5; ++step) {
      const std::vector<float> grad = random_floats(kSize, 50 + static_cast<std::uint64_t>(step), 1.0f);
      whole->begin_step(step);
      blocks->begin_step(step);
      whole->update(0, kSize, a.data(), grad.data(), 0.25f);
      // Blocks in reverse order, of uneven sizes.
      const std::size_t cuts[] = {0, 1, 100, 517, 1000, kSize};
      for (int k = 4; k >= 0; --k)
        blocks->update(cuts[k], cuts[k + 1] - cuts[k], b.data() + cuts[k], grad.data() + cuts[k], 0.25f);
    }
    EXPECT_EQ(a, b) << to_string(kind);
  }
}

// A run of updates (several workers' gradients applied one after the other, --sync-mode
// ssp/async) equals begin_step + update per gradient, bitwise, whatever the optimizer (SGD's
// fused one-pass kernel, Adam's update after update), with blocks in any order; the points
// differ in step (the schedule's rate) and in updates (Adam's bias correction), and the
// optimizer ends at the last one.
TEST(Optimizer, RunOfUpdatesEqualsOneUpdateAfterAnother) {
  struct Kind {
    OptimizerKind kind;
    double momentum;
    bool nesterov;
  };
  for (const Kind& k : {Kind{OptimizerKind::kSgd, 0.9, true}, Kind{OptimizerKind::kSgd, 0.97, false},
                        Kind{OptimizerKind::kSgd, 0.0, false}, Kind{OptimizerKind::kAdam, 0.0, false},
                        Kind{OptimizerKind::kAdamW, 0.0, false}}) {
    OptimizerConfig config;
    config.kind = k.kind;
    config.momentum = k.momentum;
    config.nesterov = k.nesterov;
    config.weight_decay = 0.01;
    config.schedule.kind = LrScheduleKind::kCosine;
    config.schedule.total_steps = 20;
    auto one_by_one = make_optimizer(config, kSize), run = make_optimizer(config, kSize);
    one_by_one->set_step_fraction(0.25);
    run->set_step_fraction(0.25);
    std::vector<float> a = random_floats(kSize, 4, 1.0f), b = a;
    std::int64_t update = 0;
    for (int round = 0; round < 4; ++round) {
      std::vector<std::vector<float>> grads;
      std::vector<const float*> pointers;
      std::vector<StepPoint> points;
      for (int j = 0; j <= round; ++j) {  // runs of 1 to 4 gradients, across step boundaries
        grads.push_back(random_floats(kSize, 60 + static_cast<std::uint64_t>(update), 1.0f));
        points.push_back({update / 4, update});
        ++update;
      }
      pointers.reserve(grads.size());
      for (const auto& g : grads) pointers.push_back(g.data());
      for (std::size_t j = 0; j < points.size(); ++j) {
        one_by_one->begin_step(points[j].step, points[j].updates_before);
        one_by_one->update(0, kSize, a.data(), grads[j].data(), 0.25f);
      }
      run->begin_run(points);
      const std::size_t cuts[] = {0, 3, 700, kSize};
      for (int c = 2; c >= 0; --c) {
        std::vector<const float*> part(pointers.size());
        for (std::size_t j = 0; j < pointers.size(); ++j) part[j] = pointers[j] + cuts[c];
        run->update_run(cuts[c], cuts[c + 1] - cuts[c], b.data() + cuts[c], part.data(), 0.25f);
      }
      ASSERT_EQ(a, b) << to_string(k.kind) << " momentum " << k.momentum << ", run of " << points.size();
      EXPECT_EQ(run->current_step(), points.back().step);
      EXPECT_EQ(run->updates_before(), points.back().updates_before);
      EXPECT_EQ(run->current_lr(), one_by_one->current_lr());
      for (std::size_t slot = 0; slot < run->slot_names().size(); ++slot)
        for (std::size_t i = 0; i < kSize; ++i)
          ASSERT_EQ(run->slot(slot)[i], one_by_one->slot(slot)[i]) << run->slot_names()[slot] << " " << i;
    }
    EXPECT_NE(a, random_floats(kSize, 4, 1.0f));  // the parameters moved
  }
}

// After a resume at another --batch-size the step (position in the data) and the number of
// updates applied differ: the learning rate follows the step, Adam's bias correction the updates.
TEST(Optimizer, AdamBiasCorrectionCountsUpdatesAndTheScheduleCountsSteps) {
  OptimizerConfig config;
  config.kind = OptimizerKind::kAdam;
  config.lr = 1e-3;
  const std::vector<float> grad = random_floats(kSize, 7, 1.0f);
  const std::vector<float> start = random_floats(kSize, 8, 1.0f);
  auto by_updates = make_optimizer(config, kSize), by_step = make_optimizer(config, kSize);
  std::vector<float> a = start, b = start;
  by_updates->begin_step(40, 10);  // constant schedule: only the update count can matter
  by_step->begin_step(10);
  EXPECT_EQ(by_updates->updates_before(), 10);
  by_updates->update(0, kSize, a.data(), grad.data(), 1.0f);
  by_step->update(0, kSize, b.data(), grad.data(), 1.0f);
  EXPECT_EQ(a, b);
  auto at_40 = make_optimizer(config, kSize);
  std::vector<float> c = start;
  at_40->begin_step(40);  // bias correction of update 41: a different (smaller) first step
  at_40->update(0, kSize, c.data(), grad.data(), 1.0f);
  EXPECT_NE(a, c);

  config.schedule.kind = LrScheduleKind::kCosine;
  config.schedule.total_steps = 100;
  auto cosine = make_optimizer(config, kSize);
  cosine->begin_step(40, 10);
  EXPECT_DOUBLE_EQ(cosine->current_lr(), config.schedule.lr_at(config.lr, 40));
  EXPECT_EQ(cosine->current_step(), 40);
  EXPECT_EQ(cosine->updates_before(), 10);
}

// set_step_fraction(f): each update is f of a step (--sync-mode ssp/async apply W gradients at
// f = 1/W). The weight decay is f of a step's: with a zero gradient, plain SGD shrinks p by
// (1 - lr wd f) per update, exactly as float32 computes it; Adam's (and AdamW's) step is f of a
// step's, so W updates of the same gradient move p about as far as one full one. f = 1 is
// bitwise the default.
TEST(Optimizer, StepFractionScalesDecayAndAdamSteps) {
  OptimizerConfig sgd;
  sgd.lr = 0.5;
  sgd.momentum = 0.0;
  sgd.weight_decay = 0.1;
  auto a = make_optimizer(sgd, 1);
  a->set_step_fraction(0.25);
  float p = 3.0f, want = 3.0f;
  const float zero = 0.0f;
  for (int k = 0; k < 4; ++k) {
    a->begin_step(0);
    a->update(0, 1, &p, &zero, 0.25f);
    want = want - 0.5f * (0.0f * 0.25f + static_cast<float>(0.1 * 0.25) * want);
  }
  EXPECT_EQ(p, want);
  EXPECT_NE(p, 3.0f * (1.0f - 0.5f * 0.1f));          // not one step's decay per update either...
  EXPECT_NEAR(p, 3.0f * (1.0f - 0.5f * 0.1f), 0.01);  // ...but about one step's over four

  for (OptimizerKind kind : {OptimizerKind::kAdam, OptimizerKind::kAdamW}) {
    OptimizerConfig adam;
    adam.kind = kind;
    adam.lr = 0.01;
    adam.weight_decay = 0.01;
    auto whole = make_optimizer(adam, 1), parts = make_optimizer(adam, 1), same = make_optimizer(adam, 1);
    parts->set_step_fraction(0.25);
    same->set_step_fraction(1.0);
    float pw = 1.0f, pp = 1.0f, ps = 1.0f;
    const float g = 0.3f;
    // 50 steps, then the move of one more: in steady state (Adam's averages settled on the
    // constant gradient), four quarter-steps of a round move p about as far as one step.
    float moved_whole = 0.0f, moved_parts = 0.0f;
    for (int t = 0; t <= 50; ++t) {
      const float before_w = pw, before_p = pp;
      whole->begin_step(t);
      whole->update(0, 1, &pw, &g, 1.0f);
      same->begin_step(t);
      same->update(0, 1, &ps, &g, 1.0f);
      EXPECT_EQ(ps, pw);  // fraction 1: bitwise the default
      for (int k = 0; k < 4; ++k) {
        parts->begin_step(t, 4 * t + k);  // Adam's averages have seen that many updates
        parts->update(0, 1, &pp, &g, 0.25f);
      }
      moved_whole = pw - before_w, moved_parts = pp - before_p;
    }
    EXPECT_NEAR(moved_parts, moved_whole, 0.15 * std::abs(moved_whole)) << to_string(kind);
  }
}

// nanoGPT's get_lr, transcribed from its Python (karpathy/nanoGPT train.py; the warmup as
// build-nanogpt's train_gpt2.py and llm.c write it, lr * (it + 1) / warmup_iters):
//   if it < warmup_iters: return learning_rate * (it + 1) / warmup_iters
//   if it > lr_decay_iters: return min_lr
//   decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
//   coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
//   return min_lr + coeff * (learning_rate - min_lr)
// Python's int / int is the correctly rounded quotient, as double / double of exact integers.
double nanogpt_get_lr(std::int64_t it, double learning_rate, std::int64_t warmup_iters, std::int64_t lr_decay_iters,
                      double min_lr) {
  if (it < warmup_iters) return learning_rate * static_cast<double>(it + 1) / static_cast<double>(warmup_iters);
  if (it > lr_decay_iters) return min_lr;
  const double decay_ratio =
      static_cast<double>(it - warmup_iters) / static_cast<double>(lr_decay_iters - warmup_iters);
  const double coeff = 0.5 * (1.0 + std::cos(3.141592653589793 * decay_ratio));
  return min_lr + coeff * (learning_rate - min_lr);
}

// --lr-schedule cosine --warmup-steps W --min-lr X [--cosine-steps D] is nanoGPT's schedule
// bitwise, at every step: warmup, the cosine over D - W steps, and min_lr after step D, also when
// D is shorter than the run (--cosine-steps) or the run's length (its default, 0).
TEST(LrSchedule, CosineIsNanoGptsGetLrBitwise) {
  struct Schedule {
    double lr, min_lr;
    std::int64_t warmup, decay_iters, run;
  };
  for (const Schedule& c :
       {Schedule{6e-4, 6e-5, 2000, 600000, 610000}, Schedule{1e-3, 1e-4, 100, 5000, 5000},
        Schedule{0.05, 0.0, 10, 73, 200}, Schedule{3e-4, 3e-5, 0, 1000, 1500}, Schedule{1.0, 0.1, 1, 2, 10}}) {
    LrSchedule s;
    s.kind = LrScheduleKind::kCosine;
    s.warmup_steps = c.warmup;
    s.total_steps = c.decay_iters;
    s.min_lr = c.min_lr;
    s.validate();
    std::int64_t mismatches = 0;
    for (std::int64_t it = 0; it < c.run; ++it) {
      const double want = nanogpt_get_lr(it, c.lr, c.warmup, c.decay_iters, c.min_lr);
      const double got = s.lr_at(c.lr, it);
      if (got != want && ++mismatches <= 3)
        ADD_FAILURE() << "step " << it << " of " << c.run << " (warmup " << c.warmup << ", decay to step "
                      << c.decay_iters << "): " << got << " vs nanoGPT's " << want;
    }
    EXPECT_EQ(mismatches, 0);
    EXPECT_EQ(s.lr_at(c.lr, c.decay_iters), c.min_lr);
    EXPECT_EQ(s.lr_at(c.lr, c.run - 1), c.run - 1 >= c.decay_iters ? c.min_lr : s.lr_at(c.lr, c.run - 1));
  }
  // A control: nanoGPT's train.py warms up by (it + 1) / (warmup_iters + 1) since December 2024,
  // which drtrain does not (the test above would see it at every warmup step).
  LrSchedule s;
  s.kind = LrScheduleKind::kCosine;
  s.warmup_steps = 100;
  s.total_steps = 1000;
  EXPECT_NE(s.lr_at(6e-4, 0), 6e-4 * 1 / 101);
  // And the comparison is sharp: a decay length one step off (an off-by-one in the cosine's span)
  // differs from nanoGPT's at nearly every step of the decay.
  std::int64_t differ = 0;
  for (std::int64_t it = 100; it <= 1000; ++it) differ += s.lr_at(6e-4, it) != nanogpt_get_lr(it, 6e-4, 100, 1001, 0.0);
  EXPECT_GT(differ, 850);
}

// set_decay(false) (the PS's no-decay ranges, --decay-rule) is bitwise an optimizer without
// weight decay, for one update and for a run of them, and set_decay(true) is the default.
TEST(Optimizer, SetDecayFalseIsWeightDecayZero) {
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kAdam, OptimizerKind::kAdamW}) {
    OptimizerConfig with;
    with.kind = kind;
    with.weight_decay = 0.1;
    OptimizerConfig without = with;
    without.weight_decay = 0.0;
    auto off = make_optimizer(with, kSize), zero = make_optimizer(without, kSize), on = make_optimizer(with, kSize),
         plain = make_optimizer(with, kSize);
    std::vector<float> a = random_floats(kSize, 9, 1.0f), b = a, c = a, d = a;
    for (int step = 0; step < 3; ++step) {
      const std::vector<float> g = random_floats(kSize, 90 + static_cast<std::uint64_t>(step), 1.0f);
      const float* const grads[] = {g.data(), g.data()};
      const std::int64_t at = 2 * static_cast<std::int64_t>(step);
      const std::vector<StepPoint> points{{at, at}, {at + 1, at + 1}};
      off->begin_run(points);
      off->set_decay(false);
      off->update_run(0, kSize, a.data(), grads, 0.5f);
      off->set_decay(true);
      zero->begin_run(points);
      zero->update_run(0, kSize, b.data(), grads, 0.5f);
      on->set_decay(true);
      on->begin_run(points);
      on->update_run(0, kSize, c.data(), grads, 0.5f);
      plain->begin_run(points);
      plain->update_run(0, kSize, d.data(), grads, 0.5f);
    }
    EXPECT_EQ(a, b) << to_string(kind);
    EXPECT_EQ(c, d) << to_string(kind);
    EXPECT_NE(a, c) << to_string(kind);  // the decay mattered
  }
}

TEST(Optimizer, SlotsAndValidation) {
  OptimizerConfig config;
  config.momentum = 0.0;
  EXPECT_EQ(config.num_slots(), 0);
  EXPECT_TRUE(make_optimizer(config, 4)->slot_names().empty());
  config.momentum = 0.9;
  EXPECT_EQ(make_optimizer(config, 4)->slot_names(), std::vector<std::string>{"momentum"});
  config.kind = OptimizerKind::kAdam;
  EXPECT_EQ(make_optimizer(config, 4)->slot_names(), (std::vector<std::string>{"exp_avg", "exp_avg_sq"}));
  config.lr = -1.0;
  EXPECT_THROW(make_optimizer(config, 4), ConfigError);
  config.lr = 0.1;
  config.schedule.kind = LrScheduleKind::kCosine;
  config.schedule.total_steps = 0;
  EXPECT_THROW(make_optimizer(config, 4), ConfigError);
  EXPECT_THROW(parse_optimizer("lbfgs"), ConfigError);
  EXPECT_THROW(parse_lr_schedule("exponential"), ConfigError);
}

}  // namespace
}  // namespace drt::optim
