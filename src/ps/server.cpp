#include "drtrain/ps/server.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "drtrain/comm/liveness.hpp"
#include "drtrain/comm/poll.hpp"
#include "drtrain/comm/progress.hpp"
#include "drtrain/core/clock.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/stop_signals.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/core/test_faults.hpp"
#include "drtrain/kernels/reference.hpp"
#include "protocol.hpp"
#include "relaxed_server.hpp"

namespace drt::ps {
namespace {
// Elements per inner apply step: the slot sum, gradients and parameters of one step stay in
// L1/L2, so summing slots, updating and zeroing cost one pass over memory.
constexpr std::size_t kApplyBlock = 4096;
// Bytes of parameters applied between two turns of MPI progress (comm/progress.hpp): about a
// millisecond of apply, so peers' pushes towards this PS keep flowing on paths that need the
// target's progress (osc/pt2pt, osc/ucx over TCP, MPICH).
constexpr std::size_t kProgressEveryBytes = std::size_t{1} << 20;

// sum[i] = the slots of `workers` summed in that order, ((g0 + g1) + g2) + ..., in float32: bitwise
// the same whatever order the pushes arrived in. `slot(w)` points at worker w's elements, `widen`
// makes them float32.
template <typename Slot, typename Widen>
void sum_in_order(float* sum, std::size_t n, const std::vector<int>& workers, Slot slot, Widen widen) {
  const auto* first = slot(workers.front());
  for (std::size_t i = 0; i < n; ++i) sum[i] = widen(first[i]);
  for (std::size_t k = 1; k < workers.size(); ++k) {
    const auto* next = slot(workers[k]);
    for (std::size_t i = 0; i < n; ++i) sum[i] += widen(next[i]);
  }
}
}  // namespace

std::size_t ps_memory_bytes(std::size_t shard_size, int num_workers, const ExchangeConfig& config,
                            const optim::OptimizerConfig& optimizer) {
  const std::size_t grad_copies = config.per_worker_slots() ? static_cast<std::size_t>(num_workers) : 1;
  const std::size_t wire = config.wire_bytes();
  const std::size_t published_copy = wire == 4 ? 0 : wire;  // the bf16 parameters next to the master
  const std::size_t lookahead_master = config.lookahead_active(optimizer.has_momentum_buffer(), num_workers) ? 4 : 0;
  return shard_size * (4 + lookahead_master + published_copy + wire * grad_copies +
                       4 * static_cast<std::size_t>(optimizer.num_slots()));
}

std::string describe_ps_memory(const ShardPlan& plan, int num_workers, const ExchangeConfig& config,
                               const optim::OptimizerConfig& optimizer) {
  std::string out =
      str("PS memory (params",
          config.lookahead_active(optimizer.has_momentum_buffer(), num_workers) ? " + their look-ahead" : "",
          config.wire == Wire::kBf16 ? " + their bf16 copy" : "", " + ",
          config.per_worker_slots() ? str(num_workers, config.wire == Wire::kBf16 ? " bf16" : "", " gradient slots")
                                    : std::string("gradient sum"),
          " + ", optimizer.num_slots(), " optimizer slot(s)):");
  for (int p = 0; p < plan.num_shards(); ++p)
    out += str(" PS ", p, " ",
               human_bytes(static_cast<double>(ps_memory_bytes(plan.shard_size(p), num_workers, config, optimizer))),
               p + 1 < plan.num_shards() ? "," : "");
  return out;
}

ParameterServer::ParameterServer(const comm::Topology& topo, const ShardPlan& plan, const ExchangeConfig& config,
                                 const optim::OptimizerConfig& optimizer, std::int64_t first_step,
                                 std::int64_t first_update)
    : topo_(topo),
      config_(config),
      spans_(plan.spans(topo.role_index())),
      shard_size_(plan.shard_size(topo.role_index())),
      first_step_(first_step),
      first_update_(first_update < 0 ? first_step : first_update),
      window_(topo, plan, config),
      protocol_(config.mode.relaxed() ? nullptr : make_server_protocol(topo, window_, config)),
      relaxed_(config.mode.relaxed() ? std::make_unique<RelaxedServer>(topo, window_, config) : nullptr),
      optimizer_(optim::make_optimizer(optimizer, shard_size_)),
      slot_sum_(config.per_worker_slots() && (topo.num_workers() > 1 || config.wire != Wire::kFp32) ? kApplyBlock : 0),
      widened_(config.mode.relaxed() && config.wire == Wire::kBf16
                   ? static_cast<std::size_t>(topo.num_workers()) * kApplyBlock
                   : 0),
      all_workers_(static_cast<std::size_t>(topo.num_workers())),
      lookahead_(config.lookahead_active(optimizer.has_momentum_buffer(), topo.num_workers())),
      master_(lookahead_ ? shard_size_ : 0) {
  for (std::size_t w = 0; w < all_workers_.size(); ++w) all_workers_[w] = static_cast<int>(w);
  if (optimizer.grad_clip > 0.0 && config.mode.per_gradient())
    throw ConfigError(str("--grad-clip needs --sync-mode sync or backup:B, not ", to_string(config.mode),
                          " (each gradient is applied on its own there: no step's norm to clip by)"));
}

void ParameterServer::set_state_ranges(std::vector<std::pair<std::size_t, std::size_t>> ranges) {
  state_ranges_ = std::move(ranges);
  merge_ranges();
}

void ParameterServer::set_no_decay_ranges(const std::vector<std::pair<std::size_t, std::size_t>>& ranges) {
  no_decay_ranges_ = ranges;
  merge_ranges();
}

void ParameterServer::merge_ranges() {
  ranges_.clear();
  for (const auto& [begin, end] : state_ranges_) ranges_.push_back({begin, end, true});
  for (const auto& [begin, end] : no_decay_ranges_) ranges_.push_back({begin, end, false});
  std::sort(ranges_.begin(), ranges_.end(), [](const FlatRange& a, const FlatRange& b) { return a.begin < b.begin; });
  for (std::size_t k = 1; k < ranges_.size(); ++k)
    DRT_ASSERT(ranges_[k - 1].end <= ranges_[k].begin, "state and no-decay ranges overlap");
}

ParameterServer::~ParameterServer() = default;

const ShardLayout& ParameterServer::layout() const { return window_.layout(topo_.role_index()); }

float* ParameterServer::params() { return lookahead_ && started_ ? master_.data() : window_.local(layout().params(0)); }

const float* ParameterServer::published() { return window_.local(layout().params(0)); }

int ParameterServer::relaxed_stop_signal() { return relaxed_ ? static_cast<int>(relaxed_->stop_request()) : 0; }

double ParameterServer::lookahead_updates() const {
  if (!lookahead_) return 0.0;
  if (config_.lookahead.kind == Lookahead::Kind::kFixed) return config_.lookahead.k;
  // auto: what a gradient has waited so far, in updates; before the first, W - 1 (each other
  // worker's gradient applied once in between, as when all run at the same pace).
  return stats_.staleness_count > 0 ? stats_.staleness_sum / static_cast<double>(stats_.staleness_count)
                                    : static_cast<double>(topo_.num_workers() - 1);
}

void ParameterServer::resume_cut(std::vector<std::int64_t> first_pushes, std::int64_t gradients) {
  DRT_ASSERT(config_.mode.per_gradient() && first_pushes.size() == static_cast<std::size_t>(topo_.num_workers()),
             "a cut is resumed under ssp/async with every worker's start");
  first_pushes_ = std::move(first_pushes);
  gradient_base_ = gradients;
}

std::int64_t Cut::slowest() const {
  return worker_steps.empty() ? 0 : *std::min_element(worker_steps.begin(), worker_steps.end());
}

void ParameterServer::start() {
  if (relaxed_) relaxed_->start(first_pushes_);
  else protocol_->start();
  if (lookahead_) {  // the uploaded or restored parameters become the master; published as they are until updated
    std::copy(published(), published() + shard_size_, master_.data());
    started_ = true;
  }
  std::vector<int> all(static_cast<std::size_t>(layout().num_blocks()));
  for (std::size_t b = 0; b < all.size(); ++b) all[b] = static_cast<int>(b);
  if (config_.wire == Wire::kBf16)  // the uploaded or restored parameters, as workers will pull them
    kernels::ref::float_to_bf16(params(), window_.local_bf16(layout().wire_params(0)), shard_size_);
  if (relaxed_) relaxed_->publish_all(1);
  else protocol_->publish(all, 1);
}

std::int64_t ParameterServer::serve(const Hooks& hooks) {
  if (relaxed_) return serve_relaxed(hooks);
  const StepHook& after_step = hooks.after_step;
  const int blocks = layout().num_blocks();
  const int workers = topo_.num_workers();
  const bool clip = clipping();
  std::vector<bool> applied;
  std::vector<int> ready, all(static_cast<std::size_t>(blocks));
  for (int b = 0; b < blocks; ++b) all[static_cast<std::size_t>(b)] = b;
  std::vector<double> square_norms(clip ? all.size() : 0);  // --grad-clip: each block's share
  const double inverse_workers = 1.0 / static_cast<double>(workers);
  for (;;) {
    const std::int64_t pushes = stats_.steps + 1;
    applied.assign(static_cast<std::size_t>(blocks), false);
    optimizer_->begin_step(global_step(), updates());
    for (int remaining = blocks; remaining > 0;) {
      ready.clear();
      const double t0 = now_seconds();
      if (!protocol_->await_blocks(pushes, applied, ready)) return stats_.steps;
      const double t1 = now_seconds();
      float scale = 1.0f / static_cast<float>(workers);
      if (clip) {
        // --grad-clip: each block's share of the norm as it comes in; no block is applied before
        // the norm of the whole step is known (docs/OPTIMIZERS.md, "Optimizers").
        for (int b : ready) {
          square_norms[static_cast<std::size_t>(b)] =
              gradient_square_norm(b, all_workers_) * inverse_workers * inverse_workers;
          applied[static_cast<std::size_t>(b)] = true;
        }
        remaining -= static_cast<int>(ready.size());
        if (remaining > 0) {
          const double t2 = now_seconds();
          stats_.wait_s += t1 - t0;
          stats_.apply_s += t2 - t1;
          if (span_sink_) {
            span_sink_("ps wait", t0, t1, global_step());
            span_sink_("ps apply", t1, t2, global_step());
          }
          continue;
        }
        double mine = 0.0;  // in block order: the same double whatever order the blocks came in
        for (double x : square_norms) mine += x;
        scale = clipped_scale(clip_coefficient(mine), all_workers_.size());
        ready = all;
        remaining = blocks;
      }
      for (int b : ready) {
        apply_block(b, scale);
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

const float* ParameterServer::summed_gradient(std::size_t begin, std::size_t b, std::size_t n,
                                              const std::vector<int>& workers) {
  const ShardLayout& geometry = layout();
  if (config_.wire == Wire::kBf16) {  // the slots hold bf16 bits
    sum_in_order(
        slot_sum_.data(), n, workers, [&](int w) { return window_.local_bf16(geometry.grad(w, begin)) + b; },
        kernels::bf16_bits_to_float);
    return slot_sum_.data();
  }
  if (config_.per_worker_slots() && workers.size() > 1) {
    sum_in_order(
        slot_sum_.data(), n, workers, [&](int w) { return window_.local(geometry.grad(w, begin)) + b; },
        [](float x) { return x; });
    return slot_sum_.data();
  }
  // The sum (accumulate; ordered: worker 0's Put, the others' adds), or the one worker's slot.
  return window_.local(geometry.grad(config_.per_worker_slots() ? workers.front() : 0, begin)) + b;
}

double ParameterServer::gradient_square_norm(int block, const std::vector<int>& workers) {
  const ShardLayout& geometry = layout();
  const std::size_t begin = geometry.block_begin(block), size = geometry.block_size(block);
  double sum = 0.0;
  comm::ProgressPacer pacer(kProgressEveryBytes);
  for (std::size_t b = 0; b < size; b += kApplyBlock) {
    const std::size_t n = std::min(kApplyBlock, size - b);
    const float* grad = summed_gradient(begin, b, n, workers);
    for_each_part(
        begin + b, n,
        [&](std::size_t lo, std::size_t hi, bool) {
          for (std::size_t i = lo; i < hi; ++i) sum += static_cast<double>(grad[i]) * static_cast<double>(grad[i]);
        },
        [](std::size_t, std::size_t) {});  // state updates are no gradient
    pacer.advance(n * sizeof(float));
  }
  return sum;
}

double ParameterServer::clip_coefficient(double square_norm) {
  // This PS's step, where the others can read it: a PS that gives up waiting below names those
  // whose share never came.
  const std::int64_t step = stats_.steps + 1;
  const auto write = [this](MPI_Aint word, const std::vector<std::int64_t>& values) {
    if (relaxed_) relaxed_->write_words(word, values);
    else protocol_->write_words(word, values);
  };
  write(layout().clip_word(ShardLayout::kNormStepWord), {step});
  std::vector<double> shares(static_cast<std::size_t>(topo_.num_ps()));
  MPI_Request request = MPI_REQUEST_NULL;
  DRT_MPI_CHECK(
      MPI_Iallgather(&square_norm, 1, MPI_DOUBLE, shares.data(), 1, MPI_DOUBLE, topo_.role_comm().get(), &request));
  comm::PollWaiter waiter(config_.hang_timeout_s, config_.max_nap_us);
  for (int done = 0;;) {
    DRT_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) break;
    if (waiter.pause()) continue;
    std::vector<std::string> late;
    for (int p = 0; p < topo_.num_ps(); ++p) {
      std::int64_t theirs = 0;
      const MPI_Aint word = window_.layout(p).clip_word(ShardLayout::kNormStepWord);
      if (relaxed_) relaxed_->read_words(p, word, 1, &theirs);
      else protocol_->read_words(p, word, 1, &theirs);
      if (theirs < step) late.push_back(topo_.ps_name(p));
    }
    throw HangError(str(rank_tag(), ": ", topo_.my_name(), " waited ", static_cast<int>(waiter.waited_seconds()),
                        " s for the shares of the gradient norm of step ", global_step(), " from ",
                        late.empty() ? std::string("the other PS") : join(late, ", "),
                        " (--grad-clip: the PS share the norm before applying a step); ",
                        late.size() == 1 ? "it is" : "they are",
                        " dead, stopped or stuck (raise --hang-timeout if only slow)"));
  }
  double total = 0.0;  // in PS order: every PS sums the same doubles in the same order
  for (double share : shares) total += share;
  const double norm = std::sqrt(total);
  // torch.nn.utils.clip_grad_norm_: clip_coef = max_norm / (total_norm + 1e-6), clamped to 1.
  const double coefficient = std::min(1.0, optimizer_->config().grad_clip / (norm + 1e-6));
  stats_.grad_norm_sum += norm;
  stats_.grad_norm_last = norm;
  ++stats_.grad_norm_steps;
  if (coefficient < 1.0) ++stats_.clipped_steps;
  if (topo_.role_index() == 0) {  // the chief reads them at its progress lines
    std::int64_t norm_bits = 0;
    std::memcpy(&norm_bits, &stats_.grad_norm_sum, sizeof norm_bits);
    write(layout().clip_word(0), {norm_bits, stats_.grad_norm_steps, stats_.clipped_steps});
  }
  return coefficient;
}

float ParameterServer::clipped_scale(double coefficient, std::size_t count) {
  if (coefficient < 1.0) return static_cast<float>(coefficient / static_cast<double>(count));
  return 1.0f / static_cast<float>(count);
}

void ParameterServer::apply_block(int block, float grad_scale) {
  const ShardLayout& geometry = layout();
  const float state_scale = 1.0f / static_cast<float>(topo_.num_workers());
  // Only the accumulate push needs a zeroed sum; ordered starts each step with worker 0's Put.
  const bool zero_sum = config_.grad_push() == GradPush::kAccumulate;
  const std::size_t begin = geometry.block_begin(block), size = geometry.block_size(block);
  float* params = window_.local(geometry.params(begin));
  // bf16 wire: the published copy holds bf16 bits.
  std::uint16_t* published = config_.wire == Wire::kBf16 ? window_.local_bf16(geometry.wire_params(begin)) : nullptr;
  const std::size_t progress_before = comm::progress_calls();
  comm::ProgressPacer pacer(kProgressEveryBytes);
  for (std::size_t b = 0; b < size; b += kApplyBlock) {
    const std::size_t n = std::min(kApplyBlock, size - b);
    const float* grad = summed_gradient(begin, b, n, all_workers_);
    update(begin + b, n, params + b, grad, grad_scale, state_scale);
    if (published) kernels::ref::float_to_bf16(params + b, published + b, n);
    if (zero_sum) std::memset(window_.local(geometry.grad(0, begin)) + b, 0, n * sizeof(float));
    pacer.advance(n * sizeof(float));
  }
  stats_.apply_progress_calls += comm::progress_calls() - progress_before;
}

// serve_relaxed()'s state across polls: what each block has published and applied, the pushes
// taken from each worker, and the gradients chosen for the block at hand.
struct ParameterServer::RelaxedLoop {
  int blocks = 0, workers = 0;
  std::size_t B = 0;
  bool backup = false;
  bool clip = false;          // backup under --grad-clip
  std::size_t needed = 0;     // gradients a block needs before it is applied
  bool stop_decided = false;  // backup: PS 0 set the step the workers stop before
  std::vector<std::int64_t> words;
  std::vector<std::int64_t> version;   // published, per block
  std::vector<std::int64_t> applied;   // ssp/async: gradients applied to each block
  std::vector<std::int64_t> consumed;  // last push taken, [w][b]
  std::int64_t lead = 0;               // gradients the faster workers were ahead of the run's first step
  std::vector<bool> done;              // backup: block applied for the step being collected
  std::vector<int> chosen;
  std::vector<optim::StepPoint> points;  // ssp/async: the updates of the chosen gradients
  // backup under --grad-clip: each block's chosen gradients and share of the norm, this step.
  std::vector<std::vector<int>> step_chosen;
  std::vector<double> square_norms;

  std::int64_t& consumed_of(int w, int b) {
    return consumed[static_cast<std::size_t>(w) * B + static_cast<std::size_t>(b)];
  }
  std::int64_t consumed_of(int w, int b) const {
    return consumed[static_cast<std::size_t>(w) * B + static_cast<std::size_t>(b)];
  }
  bool step_done() const {
    return std::all_of(done.begin(), done.end(), [](bool d) { return d; });
  }
};

ParameterServer::RelaxedLoop ParameterServer::start_relaxed() {
  RelaxedLoop loop;
  loop.blocks = layout().num_blocks();
  loop.workers = topo_.num_workers();
  loop.B = static_cast<std::size_t>(loop.blocks);
  loop.backup = config_.mode.kind == SyncKind::kBackup;
  loop.needed = static_cast<std::size_t>(loop.workers - (loop.backup ? config_.mode.bound : loop.workers - 1));
  loop.version.assign(loop.B, 1);
  loop.applied.assign(loop.B, 0);
  loop.consumed.assign(static_cast<std::size_t>(loop.workers) * loop.B, 0);
  // ssp/async: the gradients before this run (a sync checkpoint's updates count W each), and
  // the pushes each worker made before this run's first step (a cut: workers resume apart).
  if (gradient_base_ < 0) gradient_base_ = first_update_ * loop.workers;
  for (std::size_t w = 0; w < first_pushes_.size(); ++w) {
    loop.lead += first_pushes_[w];
    for (std::size_t b = 0; b < loop.B; ++b) loop.consumed[w * loop.B + b] = first_pushes_[w];
  }
  loop.done.assign(loop.B, false);
  loop.clip = loop.backup && clipping();
  loop.step_chosen.resize(loop.clip ? loop.B : 0);
  loop.square_norms.resize(loop.clip ? loop.B : 0);
  if (loop.backup) optimizer_->begin_step(global_step(), updates());
  else optimizer_->set_step_fraction(1.0 / loop.workers);  // W gradients applied make one step
  return loop;
}

void ParameterServer::decide_stop(RelaxedLoop& loop) {
  if (config_.mode.per_gradient() || topo_.role_index() != 0 || loop.stop_decided || loop.words[1] == 0) return;
  // backup: a stop was requested: every worker stops before the step after the furthest any
  // has pushed. None has passed it: a worker that had not seen the request is at most there,
  // and one that has seen it waits at its next step boundary until this word is set. The
  // pushed words are read one by one (each atomically, MPI-3.1 11.7.1), not as one snapshot;
  // that is enough: each only grows, so each value read is at most the worker's count when
  // the read ends, and the argument above holds worker by worker.
  std::int64_t furthest = 0;
  for (int w = 0; w < loop.workers; ++w)
    for (int b = 0; b < loop.blocks; ++b) furthest = std::max(furthest, relaxed_->pushed(loop.words, w, b));
  relaxed_->set_stop_at(furthest + 1);
  loop.stop_decided = true;
}

bool ParameterServer::choose_gradients(RelaxedLoop& loop, int b) const {
  loop.chosen.clear();
  for (int w = 0; w < loop.workers; ++w) {
    const std::int64_t pushed = relaxed_->pushed(loop.words, w, b);
    // backup: the gradients of the step being collected (a late one is of an older step);
    // ssp/async: any push not consumed yet (a worker has at most one: it waits for taken).
    if (loop.backup ? pushed == stats_.steps + 1 : pushed > loop.consumed_of(w, b)) loop.chosen.push_back(w);
  }
  const auto bi = static_cast<std::size_t>(b);
  return !(loop.backup && loop.done[bi]) && loop.chosen.size() >= loop.needed;
}

void ParameterServer::choose_for_clipped_step(RelaxedLoop& loop, int b) {
  // --grad-clip: the block's gradients are chosen now (later ones are dropped, as without
  // clipping), and its share of the norm taken; every block of the step is applied once
  // all are chosen, on every PS (the norm is the whole step's).
  const auto bi = static_cast<std::size_t>(b);
  relaxed_->acquire_pushes();
  const double inverse = 1.0 / static_cast<double>(loop.chosen.size());
  loop.square_norms[bi] = gradient_square_norm(b, loop.chosen) * inverse * inverse;
  loop.step_chosen[bi] = loop.chosen;
  count_dropped(loop);
  loop.done[bi] = true;
  if (loop.step_done()) apply_step_clipped(loop.step_chosen, loop.square_norms, loop.version);
}

void ParameterServer::count_dropped(const RelaxedLoop& loop) {
  stats_.dropped_block_gradients += loop.workers - static_cast<int>(loop.chosen.size());
  stats_.dropped_steps = static_cast<double>(stats_.dropped_block_gradients) / loop.blocks;
}

void ParameterServer::apply_chosen(RelaxedLoop& loop, int b) {
  const auto bi = static_cast<std::size_t>(b);
  // With the look-ahead, ssp and async apply to the private master copy, which no worker
  // reads: only the publication writes what workers Get, so only it holds the block's lock,
  // and it runs once however many gradients were applied.
  const bool outside_lock = !loop.backup && lookahead_;
  if (outside_lock) relaxed_->acquire_pushes();
  else relaxed_->lock(b);
  if (loop.backup) {
    const float scale = 1.0f / static_cast<float>(loop.chosen.size());
    apply_slots(b, loop.chosen, scale, scale);
    loop.version[bi] = stats_.steps + 2;
    count_dropped(loop);
    loop.done[bi] = true;
  } else {
    plan_gradient_updates(loop, b);
    // Each gradient its own update, in worker order, in one pass over the block.
    apply_each(b, loop.chosen, loop.points, 1.0f / static_cast<float>(loop.workers));
  }
  if (outside_lock) relaxed_->lock(b);
  publish_block(b);
  relaxed_->publish_and_unlock(b, loop.version[bi]);
  if (!loop.backup)
    for (int w : loop.chosen) {
      const std::int64_t pushed = relaxed_->pushed(loop.words, w, b);
      loop.consumed_of(w, b) = pushed;
      relaxed_->take(w, b, pushed);
    }
}

void ParameterServer::plan_gradient_updates(RelaxedLoop& loop, int b) {
  const auto bi = static_cast<std::size_t>(b);
  loop.points.clear();
  for (int w : loop.chosen) {
    const std::int64_t stale = loop.version[bi] - relaxed_->base(loop.words, w, b);
    stats_.staleness_max = std::max(stats_.staleness_max, stale);
    stats_.staleness_sum += static_cast<double>(stale);
    ++stats_.staleness_count;
    // The schedule follows steps (W gradients); Adam's bias correction counts what its
    // averages have seen, each gradient (a checkpoint's updates count W each).
    loop.points.push_back(
        {first_step_ + (loop.lead + loop.applied[bi]) / loop.workers, gradient_base_ + loop.applied[bi]});
    // One push, except on an empty block: a worker announces those without waiting for
    // the PS to take its previous push, so several may be pending (none has elements).
    const std::int64_t pushes = relaxed_->pushed(loop.words, w, b) - loop.consumed_of(w, b);
    loop.applied[bi] += pushes;
    loop.version[bi] += pushes;
    if (b == 0) stats_.gradients_applied += pushes;
  }
}

void ParameterServer::count_steps(RelaxedLoop& loop, const Hooks& hooks) {
  // Steps complete: backup, every block of the step applied; ssp/async, W gradients applied to
  // every block (so the checkpoint hook sees whole rounds, and W = 1 counts like sync).
  if (loop.backup && loop.step_done()) {
    ++stats_.steps;
    if (hooks.after_step) hooks.after_step(global_step());
    std::fill(loop.done.begin(), loop.done.end(), false);
    optimizer_->begin_step(global_step(), updates());
  } else if (!loop.backup) {
    applied_min_ = *std::min_element(loop.applied.begin(), loop.applied.end());
    const std::int64_t rounds = (loop.lead + applied_min_) / loop.workers;
    while (stats_.steps < rounds) {
      ++stats_.steps;
      if (hooks.after_step) hooks.after_step(global_step());
      if (topo_.role_index() == 0 && hooks.checkpoint_due && hooks.checkpoint_due(global_step()))
        checkpoint_wanted_ = true;
    }
    advance_cuts(loop.words, loop.consumed, hooks);
  }
}

std::vector<int> ParameterServer::missing_workers(const RelaxedLoop& loop) const {
  std::vector<int> missing;
  for (int w = 0; w < loop.workers; ++w) {
    const std::int64_t pushed = relaxed_->pushed(loop.words, w, 0);
    if (loop.backup ? pushed < stats_.steps + 1 : pushed <= loop.consumed_of(w, 0)) missing.push_back(w);
  }
  return missing;
}

std::int64_t ParameterServer::serve_relaxed(const Hooks& hooks) {
  RelaxedLoop loop = start_relaxed();
  auto waiter = std::make_unique<comm::PollWaiter>(config_.hang_timeout_s, config_.max_nap_us);
  bool stop_posted = false;
  const bool slow_serve = test_fault(str("slow-serve:", topo_.world_rank()));
  for (;;) {
    const double t0 = now_seconds();
    if (!stop_posted && stop_signal_received() != 0) {  // a stop signal reached this PS
      relaxed_->request_stop(stop_signal_received());
      stop_posted = true;
    }
    relaxed_->read(loop.words);
    const double t1 = now_seconds();
    decide_stop(loop);
    bool progressed = false;
    for (int b = 0; b < loop.blocks; ++b) {
      if (!choose_gradients(loop, b)) continue;
      if (loop.clip) choose_for_clipped_step(loop, b);
      else apply_chosen(loop, b);
      progressed = true;
    }
    const double t2 = now_seconds();
    if (progressed) {
      stats_.wait_s += t1 - t0;
      stats_.apply_s += t2 - t1;
      if (span_sink_) span_sink_("ps apply", t1, t2, global_step());
    } else {
      stats_.wait_s += t2 - t0;
    }
    count_steps(loop, hooks);
    if (progressed) {
      comm::Liveness::note_progress();
      waiter = std::make_unique<comm::PollWaiter>(config_.hang_timeout_s, config_.max_nap_us);
      continue;
    }
    // Every worker left: a worker's last push was consumed before it pulled (ssp/async), and a
    // late one of backup is dropped.
    if (loop.words[0] == loop.workers) return stats_.steps;
    if (slow_serve) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // test-only: a PS behind
    if (!waiter->pause())
      throw relaxed_->hang(missing_workers(loop), waiter->waited_seconds(),
                           loop.backup ? str("the gradients of step ", global_step()) : std::string("any gradient"));
  }
}

void ParameterServer::advance_cuts(const std::vector<std::int64_t>& words, const std::vector<std::int64_t>& consumed,
                                   const Hooks& hooks) {
  const bool lead = topo_.role_index() == 0;
  // No cut in flight: PS 0 may ask for one, unless a stop was requested (the workers are
  // leaving, each at its next step boundary; the final checkpoint records where).
  if (lead && cut_requested_ == cut_handled_ && checkpoint_wanted_ && words[1] == 0) {
    relaxed_->request_cut(++cut_requested_);
    checkpoint_wanted_ = false;
  }
  const RelaxedServer::CutWords& c = relaxed_->cuts(words, cut_handled_);
  if (c.request <= cut_handled_) return;
  const int workers = topo_.num_workers();
  const auto B = static_cast<std::size_t>(layout().num_blocks());
  bool all_left = true;
  for (int w = 0; w < workers; ++w) {
    const auto wi = static_cast<std::size_t>(w);
    if (c.ack[wi] < c.request) return;  // worker w is still in its step
    all_left = all_left && c.ack[wi] == RelaxedServer::kLeft;
    const std::int64_t pushes = c.pos[wi] - first_step_;
    for (std::size_t b = 0; b < B; ++b)
      if (consumed[wi * B + b] < pushes) return;  // its last pushes are not all applied here yet
  }
  cut_handled_ = c.request;
  // A cut every worker answered by leaving is where the run ends: the final checkpoint saves it.
  // Every PS decides alike: a worker that stopped at the cut waits for its release, which needs
  // every PS, so the answers cannot change before every PS has seen them.
  if (all_left) return;
  const Cut cut{c.request, gradients_applied(), c.pos, 0};
  if (hooks.at_cut) hooks.at_cut(cut);
  comm::patient_barrier(topo_.role_comm(), "every PS to save the state at the cut");
  if (lead) relaxed_->release_cut(c.request);
}

Cut ParameterServer::final_cut() {
  DRT_ASSERT(relaxed_ && config_.mode.per_gradient(), "cuts are --sync-mode ssp/async's");
  std::vector<std::int64_t> words;
  relaxed_->read(words);
  const RelaxedServer::CutWords& c = relaxed_->cuts(words, std::numeric_limits<std::int64_t>::min());
  return Cut{c.request, gradients_applied(), c.pos, static_cast<int>(relaxed_->stop_request())};
}

void ParameterServer::apply_slots(int block, const std::vector<int>& workers, float grad_scale, float state_scale) {
  const ShardLayout& geometry = layout();
  const std::size_t begin = geometry.block_begin(block), size = geometry.block_size(block);
  float* params = lookahead_ ? master_.data() + begin : window_.local(geometry.params(begin));
  const std::size_t progress_before = comm::progress_calls();
  comm::ProgressPacer pacer(kProgressEveryBytes);
  for (std::size_t b = 0; b < size; b += kApplyBlock) {
    const std::size_t n = std::min(kApplyBlock, size - b);
    const float* grad = summed_gradient(begin, b, n, workers);
    update(begin + b, n, params + b, grad, grad_scale, state_scale);
    pacer.advance(n * sizeof(float));
  }
  stats_.apply_progress_calls += comm::progress_calls() - progress_before;
}

void ParameterServer::apply_step_clipped(const std::vector<std::vector<int>>& chosen,
                                         const std::vector<double>& square_norms, std::vector<std::int64_t>& version) {
  double mine = 0.0;  // in block order
  for (double x : square_norms) mine += x;
  const double coefficient = clip_coefficient(mine);
  for (std::size_t bi = 0; bi < chosen.size(); ++bi) {
    const int b = static_cast<int>(bi);
    relaxed_->lock(b);
    apply_slots(b, chosen[bi], clipped_scale(coefficient, chosen[bi].size()),
                1.0f / static_cast<float>(chosen[bi].size()));
    version[bi] = stats_.steps + 2;
    publish_block(b);
    relaxed_->publish_and_unlock(b, version[bi]);
  }
}

void ParameterServer::apply_each(int block, const std::vector<int>& workers,
                                 const std::vector<optim::StepPoint>& points, float scale) {
  const ShardLayout& geometry = layout();
  const bool bf16 = config_.wire == Wire::kBf16;
  const std::size_t begin = geometry.block_begin(block), size = geometry.block_size(block);
  float* params = lookahead_ ? master_.data() + begin : window_.local(geometry.params(begin));
  optimizer_->begin_run(points);
  std::vector<const float*> grads(workers.size());
  const std::size_t progress_before = comm::progress_calls();
  comm::ProgressPacer pacer(kProgressEveryBytes);
  for (std::size_t b = 0; b < size; b += kApplyBlock) {
    const std::size_t n = std::min(kApplyBlock, size - b);
    for (std::size_t j = 0; j < workers.size(); ++j) {
      const int w = workers[j];
      if (!bf16) {
        grads[j] = window_.local(geometry.grad(w, begin)) + b;
        continue;
      }
      float* wide = widened_.data() + j * kApplyBlock;
      kernels::ref::bf16_to_float(window_.local_bf16(geometry.grad(w, begin)) + b, wide, n);
      grads[j] = wide;
    }
    update_run(begin + b, n, params + b, grads.data(), grads.size(), scale);
    pacer.advance(n * sizeof(float));
  }
  stats_.apply_progress_calls += comm::progress_calls() - progress_before;
}

void ParameterServer::publish_block(int block) {
  const ShardLayout& geometry = layout();
  const std::size_t begin = geometry.block_begin(block), size = geometry.block_size(block);
  float* window_params = window_.local(geometry.params(begin));
  std::uint16_t* published = config_.wire == Wire::kBf16 ? window_.local_bf16(geometry.wire_params(begin)) : nullptr;
  comm::ProgressPacer pacer(kProgressEveryBytes);
  for (std::size_t b = 0; b < size; b += kApplyBlock) {
    const std::size_t n = std::min(kApplyBlock, size - b);
    if (lookahead_) publish_lookahead(begin + b, n, window_params + b);
    if (published) kernels::ref::float_to_bf16(window_params + b, published + b, n);
    pacer.advance(n * sizeof(float));
  }
}

template <typename Optimize, typename State>
void ParameterServer::for_each_part(std::size_t offset, std::size_t n, const Optimize& optimize,
                                    const State& state) const {
  std::size_t done = 0;  // elements [0, done) handled, relative to offset
  if (!ranges_.empty()) {
    // The spans holding shard elements [offset, offset + n); in each, [a, b) relative to offset
    // are the global elements [g, g + b - a).
    auto s = std::partition_point(spans_.begin(), spans_.end(),
                                  [&](const ShardSpan& x) { return x.local + x.size() <= offset; });
    for (; s != spans_.end() && s->local < offset + n; ++s) {
      const std::size_t a = std::max(s->local, offset) - offset,
                        b = std::min(s->local + s->size(), offset + n) - offset;
      const std::size_t g = s->begin + (offset + a - s->local);
      for (const FlatRange& r : ranges_) {
        if (r.end <= g) continue;
        if (r.begin >= g + (b - a)) break;
        const std::size_t lo = a + (std::max(r.begin, g) - g), hi = a + (std::min(r.end, g + (b - a)) - g);
        if (lo > done) optimize(done, lo, true);
        if (r.state) state(lo, hi);
        else optimize(lo, hi, false);
        done = hi;
      }
    }
  }
  if (done < n) optimize(done, n, true);
}

void ParameterServer::update(std::size_t offset, std::size_t n, float* params, const float* grad, float grad_scale,
                             float state_scale) {
  for_each_part(
      offset, n,
      [&](std::size_t lo, std::size_t hi, bool decay) {
        optimizer_->set_decay(decay);
        optimizer_->update(offset + lo, hi - lo, params + lo, grad + lo, grad_scale);
        optimizer_->set_decay(true);
      },
      [&](std::size_t lo, std::size_t hi) {  // the mean of the workers' state updates
        for (std::size_t i = lo; i < hi; ++i) params[i] += grad[i] * state_scale;
      });
}

void ParameterServer::update_run(std::size_t offset, std::size_t n, float* params, const float* const* grads,
                                 std::size_t count, float scale) {
  run_part_.resize(count);
  for_each_part(
      offset, n,
      [&](std::size_t lo, std::size_t hi, bool decay) {
        for (std::size_t j = 0; j < count; ++j) run_part_[j] = grads[j] + lo;
        optimizer_->set_decay(decay);
        optimizer_->update_run(offset + lo, hi - lo, params + lo, run_part_.data(), scale);
        optimizer_->set_decay(true);
      },
      [&](std::size_t lo, std::size_t hi) {  // each worker's state update in turn
        for (std::size_t j = 0; j < count; ++j)
          for (std::size_t i = lo; i < hi; ++i) params[i] += grads[j][i] * scale;
      });
}

void ParameterServer::publish_lookahead(std::size_t offset, std::size_t n, float* published) {
  const float ahead = static_cast<float>(optimizer_->current_lr() * lookahead_updates());
  const float* master = master_.data() + offset;
  const float* momentum = optimizer_->slot(0).data() + offset;
  // State elements (ranges_) keep a zero momentum (the optimizer never runs on them), so
  // they are published as they are.
  kernels::ref::subtract_scaled(master, ahead, momentum, published, n);
}

std::size_t ParameterServer::memory_bytes() const {
  return ps_memory_bytes(shard_size_, topo_.num_workers(), config_, optimizer_->config());
}

}  // namespace drt::ps
