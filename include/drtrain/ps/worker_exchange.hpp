// WorkerExchange: the worker side of the synchronous exchange. A step is
//   push(grad bucket)...   every element of the flat gradient exactly once, in any buckets;
//                          each block (shard_window.hpp) is announced to its PS when complete
//   finish_push()          checks the whole gradient went out, announces what is left
//   pull(params range)...  waits for each block's new version, then MPI_Get
// A push completes any pull still pending.
// push() and pull() only issue RMA operations and return handles: the caller may compute
// meanwhile (e.g. push layer k while backward runs on layer k-1) and wait() when it needs the
// buffer. Thread-compatible, not thread-safe: call from the thread that owns MPI.
// Callers always see float32; under --wire bf16 the exchange rounds the gradient into its own
// bf16 buffer at push() (so the caller's buffer is free again when push() returns) and widens
// the pulled bf16 parameters into the caller's buffer when the pull completes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "drtrain/comm/topology.hpp"
#include "drtrain/ps/exchange_config.hpp"
#include "drtrain/ps/shard_plan.hpp"
#include "drtrain/ps/shard_window.hpp"

namespace drt::ps {

class WorkerProtocol;
struct Chunk;
class WorkerExchange;

// The relaxed modes' words of PS 0 a worker reads at each step boundary (docs/CHECKPOINTS.md,
// "Stopping on a signal", and docs/RELAXED_MODES.md, "Cuts"): the largest stop signal any rank requested (0: none); the
// step of this run every worker stops before (backup; 0: not decided yet); the newest cut PS 0
// asked for (ssp/async, for a checkpoint; 0: none), and the newest cut after which workers may
// go on.
struct RelaxedWords {
  std::int64_t stop_request = 0, stop_at = 0, cut_request = 0, cut_release = 0;
};

// --grad-clip: PS 0's totals over the run so far (docs/OPTIMIZERS.md, "Optimizers").
struct GradNormTotals {
  double norm_sum = 0.0;     // the global norms of the steps' mean gradients before clipping, summed
  std::int64_t steps = 0;    // the steps they were taken for
  std::int64_t clipped = 0;  // steps whose gradient was scaled down (norm above --grad-clip)
};

// Seconds spent, summed since the last take_times().
struct ExchangeTimes {
  double push_s = 0.0;  // issuing and completing pushes, signalling the PS
  double wait_s = 0.0;  // waiting for the PS to publish (all workers' pushes + the apply)
  double pull_s = 0.0;  // issuing and completing Gets
};

class PushHandle {
 public:
  // Returns once the pushed bucket's buffer may be modified (MPI local completion).
  // Under --rma-sync fence, MPI completes operations only at the closing fence, in
  // finish_push(): wait() returns at once and the buffer must stay untouched until then.
  void wait();

 private:
  friend class WorkerExchange;
  WorkerExchange* owner_ = nullptr;
  std::vector<int> targets_;  // PS indices the bucket went to
};

class PullHandle {
 public:
  // Returns once the pulled ranges are in the destination buffer. Under --rma-sync fence this
  // closes the step's pull epoch: issue every pull of a step before waiting on any.
  void wait();

 private:
  friend class WorkerExchange;
  WorkerExchange* owner_ = nullptr;
};

class WorkerExchange {
 public:
  // Collective over MPI_COMM_WORLD together with ParameterServer's constructor on the PS.
  WorkerExchange(const comm::Topology& topo, const ShardPlan& plan, const ExchangeConfig& config);
  ~WorkerExchange();
  WorkerExchange(const WorkerExchange&) = delete;
  WorkerExchange& operator=(const WorkerExchange&) = delete;

  // Collective with ParameterServer::start(). The chief uploads `initial_params` (the whole flat
  // space) unless it is null (the PS filled its shards itself); other workers' argument is
  // ignored. Afterwards pull() returns the initial parameters.
  void start(const float* initial_params);

  PushHandle push(const float* grad, std::size_t offset, std::size_t count);
  void finish_push();
  PullHandle pull(float* params, std::size_t offset, std::size_t count);

  // Whether a pull of [offset, offset + count) after the push just finished would find every
  // block published (one read of the version words of each PS involved; no waiting).
  bool published(std::size_t offset, std::size_t count);
  // Before the first push() of a step: every push() of this step also Gets the blocks of the
  // new parameters that the PS have already published (those every worker pushed earlier and
  // the PS applied), into `params` (the whole flat space), so that they travel back while the
  // rest of the gradient still goes out; the step's pull() calls then Get only what is left,
  // and complete both. Under --rma-sync fence nothing moves early. The caller must not read a
  // block's parameters after pushing its gradient until the pull completes (the training loop
  // pushes a layer's gradient after its backward, the last use of its parameters in the step).
  void pull_during_push(float* params);
  // Pull everything and wait.
  void pull_all(float* params);
  // A whole step: push the whole gradient, finish, pull the whole model and wait. The same
  // result as push/finish_push/pull, but the protocol may overlap them (--rma-sync passive Gets
  // the first published blocks while the last ones are still being pushed), which the separate
  // calls cannot. ExchangeTimes counts the overlapped transfer as push_s.
  void step(const float* grad, float* params);

  // Leave the exchange (all workers together, after the same number of steps); the PS
  // servers return from serve(). No push or pull afterwards.
  void finish();

  std::int64_t steps_pushed() const { return pushes_; }
  // --sync-mode backup, after a pull: when the parameters pulled are of a newer step than this
  // worker's next one (its gradients came late and the PS went on without them), moves on to
  // that step, i.e. skips the steps in between. Returns steps_pushed() (the run's next step).
  // Other modes: steps_pushed().
  std::int64_t catch_up();
  // --sync-mode ssp: the most steps this worker was ahead of the slowest worker when it pushed.
  std::int64_t max_lead() const;
  // --sync-mode backup/ssp/async, which cast no per-step votes (docs/CHECKPOINTS.md, "Stopping
  // on a signal"): raises PS 0's stop request to `signal`; and PS 0's stop and cut words. One
  // control-word access to PS 0 each.
  void request_stop(int signal);
  RelaxedWords relaxed_words();
  // --grad-clip: PS 0's totals (one read of three control words; zeros without clipping). PS 0
  // writes them before it publishes a step, so after a pull under --sync-mode sync they count
  // exactly the steps pulled.
  GradNormTotals grad_norm_totals();
  // --sync-mode ssp/async at a step boundary (every push complete and announced): tells PS 0
  // that this worker stopped at cut `cut` before step `position` of this run (two flushed
  // writes: the position, then the cut). leave_at(position) says it for every later cut, before
  // finish(): the worker has left, having trained the steps before `position`.
  void ack_cut(std::int64_t cut, std::int64_t position);
  // Whether this worker may stop at a cut here: always under async; under ssp:S not while
  // another worker has pushed S steps beyond this one's (it may be waiting in its push for this
  // worker's next gradient). One read of PS 0's pushed words under ssp.
  bool can_pause_at_cut();
  void leave_at(std::int64_t position);
  // Before the first push: this worker starts `pushes` steps after the run's first step (ssp/
  // async resumed from a cut, docs/RELAXED_MODES.md, "Cuts"); its pushes are numbered from there.
  void start_pushes_at(std::int64_t pushes);
  // Chunks that pull_during_push() brought back during pushes, since the exchange was made.
  std::int64_t chunks_pulled_during_push() const { return chunks_early_; }
  std::size_t total() const { return plan_.total(); }
  ExchangeTimes take_times();

 private:
  friend class PushHandle;
  friend class PullHandle;
  // The RMA operations for [offset, offset + count): at most one chunk of --rma-chunk-kib each,
  // never across a block.
  std::vector<Chunk> chunks(std::size_t offset, std::size_t count) const;
  // The order pushes go out in: round-robin over the PS (the others' data is on the wire while
  // one flush waits), each worker starting one chunk further on (accumulates of different workers
  // land in different stripes); marks each block's last chunk.
  void order_push(std::vector<Chunk>& chunks);
  void complete_local(const std::vector<int>& targets);
  void complete_pull();
  void check_open(const char* what) const;
  bool bf16_wire() const { return config_.wire == Wire::kBf16; }
  // The buffer to push [offset, offset + count) from: `grad` itself, or its bf16 rounding.
  const void* to_wire(const float* grad, std::size_t offset, std::size_t count);
  // Adds the time since t0 to `transfer` (push_s or pull_s), less what the protocol spent waiting
  // for the PS, which goes to wait_s.
  void account(double t0, double& transfer);

  const comm::Topology& topo_;
  ShardPlan plan_;
  ExchangeConfig config_;
  std::size_t chunk_elems_;
  ShardWindow window_;
  std::unique_ptr<WorkerProtocol> protocol_;            // the --rma-sync mode's data movement and synchronisation
  std::int64_t pushes_ = 0;                             // steps whose push this worker has finished
  std::size_t pushed_elements_ = 0;                     // in the step being pushed
  std::vector<std::vector<std::size_t>> block_filled_;  // per PS, per block: elements pushed
  bool finished_ = false;
  ExchangeTimes times_;
  // --wire bf16: the rounded gradient and the pulled parameters (flat space), and the ranges
  // Gotten into params_wire_ that complete_pull() widens into the caller's buffer.
  std::vector<std::uint16_t> grad_wire_, params_wire_;
  struct Widen {
    float* to;
    std::size_t offset, count;  // in params_wire_
  };
  std::vector<Widen> to_widen_;
  // Queues the widening of `list` (chunks placed at `at` in params_wire_ and in `base`).
  void widen_later(const std::vector<Chunk>& list, float* base);
  // pull_during_push(): the caller's buffer, the chunks not Gotten yet, and the push they
  // belong to (0: none armed).
  float* early_params_ = nullptr;
  std::vector<Chunk> early_left_;
  std::int64_t early_push_ = 0;
  std::int64_t chunks_early_ = 0;
};

}  // namespace drt::ps
