// The optimizer a transformer needs, applied by the PS under real mpiexec: AdamW with the decay
// rule (decay on matrices, none on biases, norms and embeddings, a node's decay= forcing it either
// way, state tensors averaged), linear warmup and cosine decay, and --grad-clip (the global norm
// of each step's mean gradient over every PS's shard, torch.nn.utils.clip_grad_norm_). The PS's
// float32 master and what the workers pull equal a float64 reference that implements
// clip_grad_norm_ and AdamW with per-tensor decay (tests/support/reference_optimizer.hpp), to
// float32 rounding, in every mode that supports clipping: --sync-mode sync over --rma-sync
// passive and fence, with --deterministic, --wire bf16 and the striped shard plan, and
// backup:B. Steps alternate between clipped and not; a case with a large maximum clips none.
// Controls: the reference without clipping, or with the decay rule `all`, is far from what the
// PS computed (so the comparison would see either mistake). --deterministic with clipping is
// bitwise reproducible. The norms the PS report (stats, and PS 0's words the chief reads) are
// the reference's.
// Run as: mpiexec -n P+W test_optim --num-ps P
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "drtrain/comm/mpi_check.hpp"
#include "drtrain/comm/topology.hpp"
#include "drtrain/core/param_layout.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/kernels/rules.hpp"
#include "drtrain/ps/server.hpp"
#include "drtrain/ps/worker_exchange.hpp"
#include "support/mpi_test.hpp"
#include "support/reference_optimizer.hpp"

namespace drt::ps {
namespace {

std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}
// Uniform in (-1, 1) with full float mantissas, the same on every rank.
float uniform(std::uint64_t a, std::uint64_t b, std::uint64_t c) {
  const double u = static_cast<double>(mix(a * 0x9E3779B97F4A7C15ULL ^ mix(b * 31 + c)) >> 11) * 0x1.0p-53;
  return static_cast<float>(2.0 * u - 1.0);
}

// A model's flat space as the layer kinds would mark it: an embedding, linear layers (weights
// decay, biases not), a layer norm, batch norm's running mean (state), a head whose node says
// decay=false and a position table whose node says decay=true (what reproduces nanoGPT).
ParamLayout make_layout() {
  ParamLayout l;
  l.add("wte.weight", {64, 24});
  l.add("fc1.weight", {48, 24}, false, true);
  l.add("fc1.bias", {48});
  l.add("ln.weight", {48});
  l.add("ln.bias", {48});
  l.add("bn.running_mean", {48}, true);
  l.add("fc2.weight", {40, 48}, false, true);
  l.add("fc2.bias", {40});
  l.add("head.weight", {10, 40}, false, true, Decay::kOff);
  l.add("wpe.weight", {16, 24}, false, false, Decay::kOn);
  return l;
}

// Per step, the scale of the gradients: the step's norm swings across --grad-clip's maximum (5),
// so that some steps are clipped and others not, and Adam's averages mix the two (a constant
// clip coefficient would nearly cancel in Adam's m / sqrt(v)).
constexpr double kStepScale[] = {0.05, 1.0, 0.1, 3.0, 0.25, 1.0};
constexpr int kSteps = 6;

struct Case {
  std::string name;
  RmaSync sync = RmaSync::kPassive;
  bool deterministic = false;
  Wire wire = Wire::kFp32;
  PlanKind plan = PlanKind::kContiguous;
  SyncMode mode;
  bool same_grads = false;  // every worker pushes worker 0's gradient (backup:B: the mean is known)
  double max_norm = 5.0;
  DecayRule rule = DecayRule::kMatrices;
};

optim::OptimizerConfig adamw(const Case& c) {
  optim::OptimizerConfig o;
  o.kind = optim::OptimizerKind::kAdamW;
  o.lr = 0.01;
  o.weight_decay = 0.1;
  o.decay_rule = c.rule;
  o.grad_clip = c.max_norm;
  o.schedule.kind = optim::LrScheduleKind::kCosine;
  o.schedule.warmup_steps = 2;
  o.schedule.total_steps = kSteps;
  o.schedule.min_lr = 1e-3;
  return o;
}

float initial_param(std::size_t i) { return uniform(1, 0, i); }

float gradient(const Case& c, int step, int worker, std::size_t i) {
  if (c.same_grads) worker = 0;
  return static_cast<float>(uniform(2 + std::uint64_t(step), std::uint64_t(worker), i) *
                            kStepScale[static_cast<std::size_t>(step)]);
}

float on_wire(const Case& c, float x) {
  return c.wire == Wire::kBf16 ? kernels::bf16_bits_to_float(kernels::float_to_bf16_bits(x)) : x;
}

ExchangeConfig exchange_config(const Case& c) {
  ExchangeConfig x;
  x.sync = c.sync;
  x.deterministic = c.deterministic;
  x.wire = c.wire;
  x.plan = c.plan;
  x.mode = c.mode;
  x.chunk_bytes = 2048;  // 512 elements: several blocks per PS
  x.hang_timeout_s = 60;
  return x;
}

ShardPlan plan_of(const Case& c, const comm::Topology& topo, std::size_t total) {
  return exchange_config(c).shard_plan_for(total, topo.num_ps(), topo.num_nodes());
}

struct Outcome {
  std::vector<float> params;  // worker: what it pulled after the last step; PS: its master shard
  ServerStats stats;          // PS
  GradNormTotals totals;      // worker: PS 0's words after the last step
};

Outcome run_case(const comm::Topology& topo, const Case& c) {
  const ParamLayout layout = make_layout();
  const ExchangeConfig config = exchange_config(c);
  const ShardPlan plan = plan_of(c, topo, layout.total());
  const optim::OptimizerConfig optimizer = adamw(c);
  Outcome run;
  if (topo.is_ps()) {
    ParameterServer server(topo, plan, config, optimizer);
    server.set_state_ranges(layout.state_ranges());
    server.set_no_decay_ranges(layout.no_decay_ranges(optimizer.decay_rule));
    server.start();
    EXPECT_EQ(server.serve(), kSteps);
    run.stats = server.stats();
    run.params.assign(server.params(), server.params() + plan.shard_size(topo.role_index()));
    return run;
  }
  WorkerExchange exchange(topo, plan, config);
  std::vector<float> params(layout.total()), grad(layout.total());
  for (std::size_t i = 0; i < params.size(); ++i) params[i] = initial_param(i);
  exchange.start(params.data());
  exchange.pull_all(params.data());
  for (int s = 0; s < kSteps; ++s) {
    for (std::size_t i = 0; i < grad.size(); ++i) grad[i] = gradient(c, s, topo.role_index(), i);
    exchange.step(grad.data(), params.data());
  }
  run.totals = exchange.grad_norm_totals();
  exchange.finish();
  run.params = params;
  return run;
}

struct Reference {
  std::vector<double> params;
  std::vector<double> norms;  // before clipping, per step
  std::int64_t clipped = 0;
};

// The float64 reference: the mean of the workers' gradients (as the PS receives them), clipped
// as torch.nn.utils.clip_grad_norm_ over the trainable elements (clip false: not clipped), then
// AdamW with weight decay on the tensors `rule` decays; state elements take the mean update.
Reference reference(const Case& c, int workers, bool clip, DecayRule rule) {
  const ParamLayout layout = make_layout();
  std::vector<double> init(layout.total()), mean(layout.total());
  for (std::size_t i = 0; i < init.size(); ++i) init[i] = initial_param(i);
  std::vector<bool> decays(layout.total()), parameter(layout.total()), state(layout.total());
  for (const TensorSpec& t : layout.tensors())
    for (std::size_t i = t.offset; i < t.offset + t.numel; ++i) {
      decays[i] = t.decays(rule);
      parameter[i] = !t.state;
      state[i] = t.state;
    }
  testing::ReferenceOptimizer ref(adamw(c), init);
  ref.set_decay(decays);
  ref.set_state(state);
  Reference out;
  for (int s = 0; s < kSteps; ++s) {
    for (std::size_t i = 0; i < mean.size(); ++i) {
      double sum = 0.0;
      for (int w = 0; w < workers; ++w) sum += on_wire(c, gradient(c, s, w, i));
      mean[i] = sum / workers;
    }
    if (clip) {
      out.norms.push_back(testing::clip_grad_norm(mean, c.max_norm, parameter));
      out.clipped += out.norms.back() + 1e-6 > c.max_norm ? 1 : 0;
    }
    ref.step(mean);
  }
  out.params = ref.params();
  return out;
}

// The largest difference of `got` (the elements `at` of the flat space) from `want`, relative to
// max(1, |want|).
double worst_error(const std::vector<float>& got, const std::vector<std::size_t>& at, const std::vector<double>& want) {
  double worst = 0.0;
  for (std::size_t k = 0; k < got.size(); ++k) {
    const double ref = want[at[k]];
    worst = std::max(worst, std::abs(got[k] - ref) / std::max(1.0, std::abs(ref)));
  }
  return worst;
}

// The flat-space index of each value a rank compares: a PS its shard's, a worker every one.
std::vector<std::size_t> elements(const comm::Topology& topo, const Case& c) {
  const std::size_t total = make_layout().total();
  std::vector<std::size_t> out;
  if (topo.is_ps()) {
    for (const ShardSpan& s : plan_of(c, topo, total).spans(topo.role_index()))
      for (std::size_t g = s.begin; g < s.end; ++g) out.push_back(g);
  } else {
    for (std::size_t g = 0; g < total; ++g) out.push_back(g);
  }
  return out;
}

class Optim : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    topo_ = new comm::Topology(comm::Topology::create(testing::int_argument("--num-ps", 1), comm::Placement::kFirst));
  }
  static void TearDownTestSuite() { delete topo_; }
  static comm::Topology* topo_;
};
comm::Topology* Optim::topo_ = nullptr;

std::vector<Case> cases(int workers) {
  std::vector<Case> out;
  Case c;
  c.name = "sync passive accumulate";
  out.push_back(c);
  c.name = "sync passive accumulate, no step clipped";
  c.max_norm = 1e6;
  out.push_back(c);
  c = Case{};
  c.name = "sync fence --deterministic";
  c.sync = RmaSync::kFence;
  c.deterministic = true;
  out.push_back(c);
  c = Case{};
  c.name = "sync passive --deterministic, striped";
  c.deterministic = true;
  c.plan = PlanKind::kStriped;
  out.push_back(c);
  c = Case{};
  c.name = "sync passive --wire bf16";
  c.wire = Wire::kBf16;
  out.push_back(c);
  c = Case{};
  c.name = "sync passive, --decay-rule all";
  c.rule = DecayRule::kAll;
  out.push_back(c);
  c = Case{};
  c.name = "backup:0";
  c.mode = parse_sync_mode("backup:0");
  out.push_back(c);
  if (workers >= 2) {  // which gradients a step holds depends on timing: all workers push the same
    c.name = "backup:1, equal gradients";
    c.mode = parse_sync_mode("backup:1");
    c.same_grads = true;
    out.push_back(c);
  }
  return out;
}

TEST_F(Optim, AdamWWithDecayRuleWarmupAndClippingMatchesFloat64Reference) {
  const int workers = topo_->num_workers();
  for (const Case& c : cases(workers)) {
    SCOPED_TRACE(c.name);
    const Outcome run = run_case(*topo_, c);
    const Reference want = reference(c, workers, true, c.rule);
    // The case is well posed: no step's norm within 1% of the maximum (the float32 and float64
    // norms then agree on which steps are clipped), and the first case clips some steps, not all.
    for (double n : want.norms) ASSERT_GT(std::abs(n - c.max_norm), 0.01 * c.max_norm) << c.name;
    if (c.max_norm < 100) {
      ASSERT_TRUE(want.clipped > 0 && want.clipped < kSteps) << c.name;
    } else {
      ASSERT_EQ(want.clipped, 0) << c.name;
    }

    const std::vector<std::size_t> at = elements(*topo_, c);
    std::string detail;
    // Float32 rounding of 6 AdamW steps (and the master under --wire bf16; workers pull its bf16
    // rounding, within 2^-8 of it).
    const double tolerance = topo_->is_worker() && c.wire == Wire::kBf16 ? 0x1p-8 : 2e-6;
    const double error = worst_error(run.params, at, want.params);
    if (!(error <= tolerance))
      detail = str(c.name, ": ", topo_->is_ps() ? "master" : "pulled",
                   " parameters differ from the float64 reference by ", error, " (relative), more than ", tolerance);
    // Controls: the reference without clipping, and with the other decay rule, are far away.
    if (detail.empty() && topo_->is_ps()) {
      const double unclipped = worst_error(run.params, at, reference(c, workers, false, c.rule).params);
      const DecayRule other = c.rule == DecayRule::kAll ? DecayRule::kMatrices : DecayRule::kAll;
      const double other_rule = worst_error(run.params, at, reference(c, workers, true, other).params);
      if (want.clipped > 0 && !(unclipped > 100 * tolerance))
        detail = str(c.name, ": the reference without clipping is only ", unclipped, " away: the test cannot see it");
      if (want.clipped == 0 && !(unclipped <= tolerance))
        detail = str(c.name, ": no step is clipped, yet the unclipped reference is ", unclipped, " away");
      if (!(other_rule > 100 * tolerance))
        detail = str(c.name, ": the reference with the other decay rule is only ", other_rule, " away");
      if (topo_->role_index() == 0)
        std::printf("%s: %lld of %d steps clipped; PS 0's master within %.2g of the reference, %.2g of it without "
                    "clipping, %.2g of it with the other decay rule\n",
                    c.name.c_str(), static_cast<long long>(want.clipped), kSteps, error, unclipped, other_rule);
    }
    // The norms: every PS took the same ones (the all-gather), the reference's; the chief's read of
    // PS 0's words gives the same totals.
    double mean_norm = 0.0;
    for (double n : want.norms) mean_norm += n / kSteps;
    const double got_mean = topo_->is_ps() ? run.stats.grad_norm_sum / static_cast<double>(run.stats.grad_norm_steps)
                                           : run.totals.norm_sum / static_cast<double>(run.totals.steps);
    const std::int64_t got_steps = topo_->is_ps() ? run.stats.grad_norm_steps : run.totals.steps;
    const std::int64_t got_clipped = topo_->is_ps() ? run.stats.clipped_steps : run.totals.clipped;
    if (detail.empty() &&
        (got_steps != kSteps || got_clipped != want.clipped || !(std::abs(got_mean - mean_norm) <= 1e-6 * mean_norm)))
      detail = str(c.name, ": norms over ", got_steps, " steps, mean ", got_mean, ", ", got_clipped,
                   " clipped; the reference: ", kSteps, " steps, mean ", mean_norm, ", ", want.clipped, " clipped");
    if (detail.empty() && topo_->is_ps()) {
      double sums[2] = {run.stats.grad_norm_sum, -run.stats.grad_norm_sum};
      DRT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_MAX, topo_->role_comm().get()));
      if (sums[0] != -sums[1]) detail = str(c.name, ": the PS took different norms (", sums[0], " vs ", -sums[1], ")");
    } else if (topo_->is_ps()) {
      double sums[2] = {0.0, 0.0};  // the collective still runs on every PS
      DRT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_MAX, topo_->role_comm().get()));
    }
    ASSERT_TRUE(testing::all_ranks(detail.empty(), detail)) << c.name;
  }
}

std::uint64_t bits(double x) {
  std::uint64_t b = 0;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

// --deterministic with --grad-clip: two runs give the same bits (the norm's shares are summed in
// block order on each PS and in PS order across them, whatever order the blocks arrive in).
TEST_F(Optim, DeterministicClippingIsBitwiseReproducible) {
  for (RmaSync sync : {RmaSync::kPassive, RmaSync::kFence}) {
    Case c;
    c.name = str("--deterministic ", to_string(sync));
    c.sync = sync;
    c.deterministic = true;
    const Outcome first = run_case(*topo_, c);
    const Outcome second = run_case(*topo_, c);
    const bool same = first.params == second.params &&
                      (topo_->is_ps() ? bits(first.stats.grad_norm_sum) == bits(second.stats.grad_norm_sum)
                                      : bits(first.totals.norm_sum) == bits(second.totals.norm_sum));
    ASSERT_TRUE(testing::all_ranks(same, str(c.name, ": two runs differ"))) << c.name;
  }
}

}  // namespace
}  // namespace drt::ps
