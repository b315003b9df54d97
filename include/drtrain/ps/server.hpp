// ParameterServer: the PS side of the synchronous exchange. Owns this PS's shard of the flat
// parameter space (in the exchange windows), the optimizer state for it, and the serve loop:
// for each block of the shard (shard_window.hpp), wait until every worker has pushed it for
// step t, apply the optimizer once with the mean gradient (sum / W, or the worker slots summed
// in worker order in deterministic mode), zero the sum, publish the block's new version.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "drtrain/comm/topology.hpp"
#include "drtrain/core/aligned_buffer.hpp"
#include "drtrain/optim/optimizer.hpp"
#include "drtrain/ps/exchange_config.hpp"
#include "drtrain/ps/shard_plan.hpp"
#include "drtrain/ps/shard_window.hpp"

namespace drt::ps {

class ServerProtocol;
class RelaxedServer;

struct ServerStats {
  std::int64_t steps = 0;
  double wait_s = 0.0;                   // waiting for pushes (includes the workers' compute time)
  double apply_s = 0.0;                  // optimizer, slot sums and zeroing
  double publish_s = 0.0;                // publishing versions (fence: includes the workers' pulls)
  std::size_t apply_progress_calls = 0;  // MPI progress turns taken inside applies (comm/progress.hpp)
  // The relaxed modes (--sync-mode backup/ssp/async):
  std::int64_t dropped_block_gradients = 0;  // backup: (worker, block) gradients dropped as late
  double dropped_steps = 0.0;                // backup: the same in steps' worth (the count / blocks: exact when whole)
  std::int64_t gradients_applied = 0;        // ssp/async: worker gradients applied to block 0
  std::int64_t staleness_max = 0;            // ssp/async: updates of a block between a worker's pull and
  double staleness_sum = 0.0;                //   the apply of the gradient it computed from it
  std::int64_t staleness_count = 0;
  // --grad-clip (sync, backup): the global norms of the steps' mean gradients before clipping
  // (the same on every PS), summed, the last one, the steps they were taken for, and those
  // clipped (norm + 1e-6 above the maximum).
  double grad_norm_sum = 0.0;
  double grad_norm_last = 0.0;
  std::int64_t grad_norm_steps = 0;
  std::int64_t clipped_steps = 0;
};

// A cut (--sync-mode ssp/async; docs/RELAXED_MODES.md, "Cuts"): every worker stopped at a step
// boundary and every push it made is applied on every PS, so the PS state holds exactly the
// gradients of the steps before worker_steps[w] of each worker w: a state the run was in, which
// a checkpoint can save and a resume continue from, each worker at its own step.
struct Cut {
  std::int64_t number = 0;                 // 1, 2, ... in this run
  std::int64_t gradients = 0;              // worker gradients applied to every element, in all runs
  std::vector<std::int64_t> worker_steps;  // per worker: the step (this run's numbering) it stopped before
  int stop_signal = 0;                     // the run ends at this cut (0: a checkpoint, training goes on)
  std::int64_t slowest() const;            // the least of worker_steps
};

class ParameterServer {
 public:
  // Collective over MPI_COMM_WORLD together with WorkerExchange's constructor on the workers.
  // `first_step` is the global step of the first update (non-zero when resuming) and
  // `first_update` the number of updates applied before it (-1: first_step; they differ after a
  // resume at another --batch-size, optim::Optimizer::begin_step).
  ParameterServer(const comm::Topology& topo, const ShardPlan& plan, const ExchangeConfig& config,
                  const optim::OptimizerConfig& optimizer, std::int64_t first_step = 0, std::int64_t first_update = -1);
  ~ParameterServer();
  ParameterServer(const ParameterServer&) = delete;
  ParameterServer& operator=(const ParameterServer&) = delete;

  // Collective with WorkerExchange::start(): receives the chief's initial parameters (unless
  // the caller filled params() itself, e.g. from a checkpoint) and publishes version 1.
  void start();

  // Serves steps until every worker has called WorkerExchange::finish(); returns the number of
  // steps applied. Under the relaxed --sync-mode values a step is W gradients applied to every
  // block (ssp, async), or a step applied with at least W - B workers' gradients (backup). `after_step(steps_done)`
  // runs after each complete step (parameters stay unchanged until the next step is pushed, so the hook may read
  // params(), e.g. to save).
  using StepHook = std::function<void(std::int64_t global_step)>;
  struct Hooks {
    StepHook after_step;
    // ssp/async, asked on PS 0 after each round of W gradients: whether a checkpoint is due at
    // this step (no collective call); PS 0 then asks the workers for a cut.
    std::function<bool(std::int64_t global_step)> checkpoint_due;
    // ssp/async, on every PS at each checkpoint cut, in the same order (collective over the PS
    // is allowed): the state is at `cut`; the workers wait until every PS has returned.
    std::function<void(const Cut&)> at_cut;
  };
  std::int64_t serve(const Hooks& hooks);
  std::int64_t serve(const StepHook& after_step = {}) { return serve(Hooks{after_step, {}, {}}); }
  // ssp/async, after serve(): where the run ended -- each worker's last position (as it left)
  // and the gradients applied -- which the final checkpoint records. Reads PS 0's words.
  Cut final_cut();
  // ssp/async resumed from a cut, before start(): worker w starts first_pushes[w] steps after
  // the run's first step; `gradients` were applied before this run (to every element).
  void resume_cut(std::vector<std::int64_t> first_pushes, std::int64_t gradients);

  // Optional: receives the serve loop's phases ("ps wait", "ps apply") as they happen, e.g. for
  // a timeline. Times from now_seconds().
  using SpanSink = std::function<void(const char* name, double start_s, double end_s, std::int64_t step)>;
  void set_span_sink(SpanSink sink) { span_sink_ = std::move(sink); }

  // Ranges [begin, end) of the flat space (global offsets) that hold state, not parameters
  // (ParamLayout::state_ranges): there the mean of the pushed values is added to the values
  // (workers push their state updates), and the optimizer is not applied. Set before serve().
  void set_state_ranges(std::vector<std::pair<std::size_t, std::size_t>> ranges);
  // Ranges [begin, end) of the flat space (global offsets) of trainable tensors that weight decay
  // does not apply to (ParamLayout::no_decay_ranges under --decay-rule): the optimizer runs there
  // with weight decay 0 (sgd's and adam's L2, adamw's decoupled decay alike). Set before serve().
  void set_no_decay_ranges(const std::vector<std::pair<std::size_t, std::size_t>>& ranges);

  // The spans of the flat space this PS holds (ShardPlan::spans), back to back in its buffers.
  const std::vector<ShardSpan>& spans() const { return spans_; }
  std::size_t shard_size() const { return shard_size_; }
  // This PS's shard of the parameters, shard_size() elements: before start() the window's,
  // which the caller may fill (e.g. from a checkpoint); after it the float32 master copy the
  // optimizer updates (what checkpoints save).
  float* params();
  // What workers pull: params() itself, or the looked-ahead copy under --lookahead
  // (ExchangeConfig::Lookahead); float32 (under --wire bf16 the bf16 copy is made from it).
  const float* published();
  // The number of updates the PS looks ahead (0: it publishes the parameters themselves).
  double lookahead_updates() const;
  // --sync-mode backup/ssp/async, after serve(): the stop signal any rank requested through PS
  // 0's words (docs/CHECKPOINTS.md, "Stopping on a signal"), 0 if none. Reads PS 0's words.
  int relaxed_stop_signal();
  optim::Optimizer& optimizer() { return *optimizer_; }
  std::int64_t global_step() const { return first_step_ + stats_.steps; }
  std::int64_t updates() const { return first_update_ + stats_.steps; }  // applied in all runs
  const ServerStats& stats() const { return stats_; }
  // Bytes this PS holds for the exchange and the optimizer.
  std::size_t memory_bytes() const;

 private:
  const ShardLayout& layout() const;
  // Applies the optimizer to block `block` with the summed gradient times `grad_scale` (1/W, or
  // less under --grad-clip) and publishes it under --wire bf16.
  void apply_block(int block, float grad_scale);
  // The gradient summed over `workers` for shard elements [begin + b, begin + b + n) of a block
  // starting at `begin`: the sum itself, one worker's slot, or the slots summed in that order
  // into slot_sum_ (widened from bf16 under --wire bf16).
  const float* summed_gradient(std::size_t begin, std::size_t b, std::size_t n, const std::vector<int>& workers);
  // --grad-clip: the sum of squares of block `block`'s gradient summed over `workers`, in float64,
  // over the trainable elements (not state), in element order.
  double gradient_square_norm(int block, const std::vector<int>& workers);
  // --grad-clip, once every block of the step is in, given this PS's share of the squared norm of
  // the step's mean gradient: all-gathers the shares of every PS (summed in PS order, so every
  // PS gets the same double), records the norm (ServerStats; PS 0 also in its control words) and
  // returns the clip coefficient, min(1, max / (norm + 1e-6)) (torch.nn.utils.clip_grad_norm_).
  double clip_coefficient(double square_norm);
  // The optimizer's gradient scale for the mean of `count` workers' gradients clipped by
  // `coefficient`: 1/count exactly when nothing is clipped.
  static float clipped_scale(double coefficient, std::size_t count);
  bool clipping() const { return optimizer_->config().grad_clip > 0.0; }
  std::int64_t serve_relaxed(const Hooks& hooks);
  // serve_relaxed()'s pieces. RelaxedLoop (server.cpp) is the loop's state across polls.
  struct RelaxedLoop;
  // The state of a run's first poll; begins the optimizer's first step (backup) or sets its
  // step fraction 1/W (ssp/async).
  RelaxedLoop start_relaxed();
  // backup, PS 0, once a stop was requested: the step the workers stop before.
  void decide_stop(RelaxedLoop& loop);
  // The workers whose gradients block `b` takes now (loop.chosen); true if the block is to be
  // applied (enough of them, and under backup not applied yet this step).
  bool choose_gradients(RelaxedLoop& loop, int b) const;
  // backup under --grad-clip: block `b`'s chosen gradients and share of the norm kept; the whole
  // step applied once every block's are in.
  void choose_for_clipped_step(RelaxedLoop& loop, int b);
  // backup: the gradients of the step left out of block `b` (ServerStats::dropped_*).
  void count_dropped(const RelaxedLoop& loop);
  // Applies the chosen gradients to block `b`, publishes it, and (ssp/async) takes the pushes.
  void apply_chosen(RelaxedLoop& loop, int b);
  // ssp/async: each chosen push's optimizer update point (loop.points), staleness and count.
  void plan_gradient_updates(RelaxedLoop& loop, int b);
  // The steps completed since the last poll: the after-step and checkpoint hooks, and the cuts.
  void count_steps(RelaxedLoop& loop, const Hooks& hooks);
  // The workers whose gradient the PS waits for (named when it times out).
  std::vector<int> missing_workers(const RelaxedLoop& loop) const;
  // ssp/async: moves the cut protocol on (serve_relaxed, after each poll and apply).
  void advance_cuts(const std::vector<std::int64_t>& words, const std::vector<std::int64_t>& consumed,
                    const Hooks& hooks);
  std::int64_t gradients_applied() const { return gradient_base_ + applied_min_; }
  // backup:B: the optimizer on block `block` with the slots of `workers` summed in that order,
  // times `grad_scale` (state: `state_scale`; publish_block() then writes what workers read).
  void apply_slots(int block, const std::vector<int>& workers, float grad_scale, float state_scale);
  // backup:B under --grad-clip, once every block's gradients are chosen (chosen[b]) and its share
  // of the squared norm taken: each block applied with the clip coefficient under its lock and
  // published as version[b] = the step's.
  void apply_step_clipped(const std::vector<std::vector<int>>& chosen, const std::vector<double>& square_norms,
                          std::vector<std::int64_t>& version);
  // ssp/async: the pushes of `workers` applied to block `block` one after the other, that of
  // workers[j] as the optimizer's update points[j], each times `scale`, in one pass over the
  // block (Optimizer::update_run); bitwise the same as one apply_slots() per worker.
  void apply_each(int block, const std::vector<int>& workers, const std::vector<optim::StepPoint>& points, float scale);
  // Relaxed modes, under the block's lock: the published copies of block `block`, the look-ahead
  // of the master and the bf16 rounding under --wire bf16 (nothing without either).
  void publish_block(int block);
  // Splits shard elements [offset, offset + n) into the optimizer's and the state's (ranges_):
  // optimize(lo, hi, decay) or state(lo, hi) for each part, [lo, hi) relative to offset, decay
  // false on the no-decay ranges.
  template <typename Optimize, typename State>
  void for_each_part(std::size_t offset, std::size_t n, const Optimize& optimize, const State& state) const;
  // The optimizer over shard elements [offset, offset + n) with the gradient times grad_scale
  // (weight decay off on the no-decay ranges), or the state rule (the mean of the workers' state
  // updates, times state_scale) where they are state.
  void update(std::size_t offset, std::size_t n, float* params, const float* grad, float grad_scale, float state_scale);
  // The same for a run of gradients grads[0 .. count) (Optimizer::update_run), one scale.
  void update_run(std::size_t offset, std::size_t n, float* params, const float* const* grads, std::size_t count,
                  float scale);
  // Merges state_ranges_ and no_decay_ranges_ into ranges_.
  void merge_ranges();
  // --lookahead: published[i] = master[i] - lr * k * momentum[i] for shard elements
  // [offset, offset + n); `published` points at element offset of the window's copy.
  void publish_lookahead(std::size_t offset, std::size_t n, float* published);

  const comm::Topology& topo_;
  ExchangeConfig config_;
  std::vector<ShardSpan> spans_;
  std::size_t shard_size_;
  std::int64_t first_step_, first_update_;
  ShardWindow window_;
  std::unique_ptr<ServerProtocol> protocol_;  // the --rma-sync mode's synchronisation (--sync-mode sync)
  std::unique_ptr<RelaxedServer> relaxed_;    // --sync-mode backup/ssp/async
  std::unique_ptr<optim::Optimizer> optimizer_;
  AlignedBuffer<float> slot_sum_;       // deterministic mode: one block of the ordered slot sum
  AlignedBuffer<float> widened_;        // --wire bf16, ssp/async: one block of each worker's slot as float32
  std::vector<const float*> run_part_;  // update_run(): the gradients' pointers into one part
  std::vector<int> all_workers_;        // 0 .. W-1: the order sync sums the slots in
  bool lookahead_ = false;              // ExchangeConfig::lookahead_active
  bool started_ = false;                // start() has run: params() is master_ under --lookahead
  AlignedBuffer<float> master_;         // --lookahead: the parameters (the window holds the published copy)
  ServerStats stats_;
  SpanSink span_sink_;
  // ssp/async (cuts): gradients applied to every element before this run, and per worker the
  // steps it starts after the run's first step; the least gradients applied to a block this run;
  // PS 0: the newest cut asked for, and whether a checkpoint waits for one; every PS:
  // the newest cut it has handled.
  std::int64_t gradient_base_ = -1;
  std::vector<std::int64_t> first_pushes_;
  std::int64_t applied_min_ = 0;
  std::int64_t cut_requested_ = 0, cut_handled_ = 0;
  bool checkpoint_wanted_ = false;
  std::vector<std::pair<std::size_t, std::size_t>> state_ranges_, no_decay_ranges_;
  // Both kinds of ranges, in order (they never overlap: state tensors are never in the no-decay
  // ranges).
  struct FlatRange {
    std::size_t begin, end;
    bool state;
  };
  std::vector<FlatRange> ranges_;
};

// Memory a PS with `shard_size` elements needs: params + gradient region + optimizer slots,
// (2 + slots) x 4 bytes per element, or (1 + W + slots) x 4 with per-worker gradient slots;
// 4 more under --lookahead (the master copy next to the published one), 2 more under --wire bf16.
std::size_t ps_memory_bytes(std::size_t shard_size, int num_workers, const ExchangeConfig& config,
                            const optim::OptimizerConfig& optimizer);

// One line per PS: its shard's size and the memory it holds, e.g. for rank 0 to print at start.
std::string describe_ps_memory(const ShardPlan& plan, int num_workers, const ExchangeConfig& config,
                               const optim::OptimizerConfig& optimizer);

}  // namespace drt::ps
