#include "drtrain/ps/server.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "drtrain/comm/progress.hpp"
#include "drtrain/core/clock.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/kernels/reference.hpp"
#include "protocol.hpp"

namespace drt::ps {
namespace {
// Elements per inner apply step: the slot sum, gradients and parameters of one step stay in
// L1/L2, so summing slots, updating and zeroing cost one pass over memory.
constexpr std::size_t kApplyBlock = 4096;
// Bytes of parameters applied between two turns of MPI progress (comm/progress.hpp): about a
// millisecond of apply, so peers' pushes towards this PS keep flowing on paths that need the
// target's progress (osc/pt2pt, osc/ucx over TCP, MPICH).
constexpr std::size_t kProgressEveryBytes = std::size_t{1} << 20;
}  // namespace

std::size_t ps_memory_bytes(std::size_t shard_size, int num_workers, const ExchangeConfig& config,
                            const optim::OptimizerConfig& optimizer) {
  const std::size_t grad_copies = config.per_worker_slots() ? static_cast<std::size_t>(num_workers) : 1;
  const std::size_t wire = config.wire_bytes();
  const std::size_t published_copy = wire == 4 ? 0 : wire;  // the bf16 parameters next to the master
  return shard_size * (4 + published_copy + wire * grad_copies + 4 * static_cast<std::size_t>(optimizer.num_slots()));
}

std::string describe_ps_memory(const ShardPlan& plan, int num_workers, const ExchangeConfig& config,
                               const optim::OptimizerConfig& optimizer) {
  std::string out =
      str("PS memory (params", config.wire == Wire::kBf16 ? " + their bf16 copy" : "", " + ",
          config.per_worker_slots() ? str(num_workers, config.wire == Wire::kBf16 ? " bf16" : "", " gradient slots")
                                    : std::string("gradient sum"),
          " + ", optimizer.num_slots(), " optimizer slot(s)):");
  for (int p = 0; p < plan.num_shards(); ++p)
    out += str(" PS ", p, " ",
               human_bytes(static_cast<double>(ps_memory_bytes(plan.shard(p).size(), num_workers, config, optimizer))),
               p + 1 < plan.num_shards() ? "," : "");
  return out;
}

ParameterServer::ParameterServer(const comm::Topology& topo, const ShardPlan& plan, const ExchangeConfig& config,
                                 const optim::OptimizerConfig& optimizer, std::int64_t first_step,
                                 std::int64_t first_update)
    : topo_(topo),
      config_(config),
      range_(plan.shard(topo.role_index())),
      first_step_(first_step),
      first_update_(first_update < 0 ? first_step : first_update),
      window_(topo, plan, config),
      protocol_(make_server_protocol(topo, window_, config)),
      optimizer_(optim::make_optimizer(optimizer, range_.size())),
      slot_sum_(config.per_worker_slots() && (topo.num_workers() > 1 || config.wire != Wire::kFp32) ? kApplyBlock : 0) {
}

ParameterServer::~ParameterServer() = default;

const ShardLayout& ParameterServer::layout() const { return window_.layout(topo_.role_index()); }

float* ParameterServer::params() { return window_.local(layout().params(0)); }

void ParameterServer::start() {
  protocol_->start();
  std::vector<int> all(static_cast<std::size_t>(layout().num_blocks()));
  for (std::size_t b = 0; b < all.size(); ++b) all[b] = static_cast<int>(b);
  if (config_.wire == Wire::kBf16)  // the uploaded or restored parameters, as workers will pull them
    kernels::ref::float_to_bf16(params(), window_.local_bf16(layout().wire_params(0)), range_.size());
  protocol_->publish(all, 1);
}

std::int64_t ParameterServer::serve(const StepHook& after_step) {
  const int blocks = layout().num_blocks();
  std::vector<bool> applied;
  std::vector<int> ready;
  for (;;) {
    const std::int64_t pushes = stats_.steps + 1;
    applied.assign(static_cast<std::size_t>(blocks), false);
    optimizer_->begin_step(global_step(), updates());
    for (int remaining = blocks; remaining > 0;) {
      ready.clear();
      const double t0 = now_seconds();
      if (!protocol_->await_blocks(pushes, applied, ready)) return stats_.steps;
      const double t1 = now_seconds();
      for (int b : ready) {
        apply_block(b);
        applied[static_cast<std::size_t>(b)] = true;
      }
      remaining -= static_cast<int>(ready.size());
      const double t2 = now_seconds();
      protocol_->publish(ready, pushes + 1);
      const double t3 = now_seconds();
      stats_.wait_s += t1 - t0;
      stats_.apply_s += t2 - t1;
      stats_.publish_s += t3 - t2;
      if (span_sink_) {
        span_sink_("ps wait", t0, t1, global_step());
        span_sink_("ps apply", t1, t3, global_step());
      }
    }
    ++stats_.steps;
    if (after_step) after_step(global_step());
  }
}

void ParameterServer::apply_block(int block) {
  const ShardLayout& geometry = layout();
  const int workers = topo_.num_workers();
  const float scale = 1.0f / static_cast<float>(workers);
  const bool bf16 = config_.wire == Wire::kBf16;
  const bool sum_slots = config_.per_worker_slots() && workers > 1;
  // Only the accumulate push needs a zeroed sum; ordered starts each step with worker 0's Put.
  const bool zero_sum = config_.grad_push() == GradPush::kAccumulate;
  const std::size_t begin = geometry.block_begin(block), size = geometry.block_size(block);
  float* params = window_.local(geometry.params(begin));
  // bf16 wire: the slots and the published copy hold bf16 bits.
  std::uint16_t* published = bf16 ? window_.local_bf16(geometry.wire_params(begin)) : nullptr;
  const std::size_t progress_before = comm::progress_calls();
  comm::ProgressPacer pacer(kProgressEveryBytes);
  // Fixed order ((g0 + g1) + g2) + ... in float32: bitwise the same whatever order pushes
  // arrived in. `slot(w)` points at worker w's elements, `widen` makes them float32.
  const auto sum_in_worker_order = [workers](float* sum, std::size_t n, auto slot, auto widen) {
    const auto* first = slot(0);
    for (std::size_t i = 0; i < n; ++i) sum[i] = widen(first[i]);
    for (int w = 1; w < workers; ++w) {
      const auto* next = slot(w);
      for (std::size_t i = 0; i < n; ++i) sum[i] += widen(next[i]);
    }
  };
  for (std::size_t b = 0; b < size; b += kApplyBlock) {
    const std::size_t n = std::min(kApplyBlock, size - b);
    const float* grad = slot_sum_.data();
    if (bf16)
      sum_in_worker_order(
          slot_sum_.data(), n, [&](int w) { return window_.local_bf16(geometry.grad(w, begin)) + b; },
          kernels::bf16_bits_to_float);
    else if (sum_slots)
      sum_in_worker_order(
          slot_sum_.data(), n, [&](int w) { return window_.local(geometry.grad(w, begin)) + b; },
          [](float x) { return x; });
    else grad = window_.local(geometry.grad(0, begin)) + b;  // the sum, or worker 0's Put (ordered, or one worker)
    update(begin + b, n, params + b, grad, scale);
    if (published) kernels::ref::float_to_bf16(params + b, published + b, n);
    if (zero_sum) std::memset(window_.local(geometry.grad(0, begin)) + b, 0, n * sizeof(float));
    pacer.advance(n * sizeof(float));
  }
  stats_.apply_progress_calls += comm::progress_calls() - progress_before;
}

void ParameterServer::update(std::size_t offset, std::size_t n, float* params, const float* grad, float scale) {
  std::size_t done = 0;                             // elements [0, done) handled
  const std::size_t first = range_.begin + offset;  // global index of element 0
  for (const auto& [state_begin, state_end] : state_ranges_) {
    if (state_end <= first + done) continue;
    if (state_begin >= first + n) break;
    const std::size_t lo = std::max(state_begin, first + done) - first, hi = std::min(state_end, first + n) - first;
    if (lo > done) optimizer_->update(offset + done, lo - done, params + done, grad + done, scale);
    for (std::size_t i = lo; i < hi; ++i) params[i] += grad[i] * scale;  // the mean of the workers' state updates
    done = hi;
  }
  if (done < n) optimizer_->update(offset + done, n - done, params + done, grad + done, scale);
}

std::size_t ParameterServer::memory_bytes() const {
  return ps_memory_bytes(range_.size(), topo_.num_workers(), config_, optimizer_->config());
}

}  // namespace drt::ps
