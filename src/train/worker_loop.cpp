// The worker's side of a run: the training loop over the PS exchange, progress reporting and
// evaluation. Every worker runs the same number of steps and reaches the same reporting points,
// so the reductions over the worker communicator line up without extra coordination.
#include <signal.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <thread>
#include <vector>

#include "drtrain/comm/liveness.hpp"
#include "drtrain/comm/mpi_check.hpp"
#include "drtrain/comm/poll.hpp"
#include "drtrain/comm/watchdog.hpp"
#include "drtrain/core/clock.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/stop_signals.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/core/test_faults.hpp"
#include "drtrain/data/batch_loader.hpp"
#include "drtrain/ps/worker_exchange.hpp"
#include "drtrain/train/towers.hpp"
#include "checkpointer.hpp"
#include "exchange_pipeline.hpp"
#include "job.hpp"
#include "reporter.hpp"
#include "stop_vote.hpp"

namespace drt::train {
namespace {

// Seconds per phase of a step, summed over the steps of a reporting interval. push, wait and
// pull are the exchange's own times; `exposed` is how long the training loop waited for the
// exchange: all of it in the sequential step, only what compute did not hide with --overlap.
struct Phases {
  double data = 0, compute = 0, combine = 0, push = 0, wait = 0, pull = 0, exposed = 0;
  static constexpr int kCount = 7;
  double* values() { return &data; }
};

// Loss, correct predictions and what they are counted over -- samples, or for a language model
// tokens (the loss is per token) -- over an interval (or an evaluation).
struct Tally {
  double loss = 0, correct = 0, samples = 0;
  double* values() { return &loss; }
};

std::string clock_text(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  return buf;
}

// Reads data mid-run. A bad file met now (a corrupt chunk, a label out of range) is this
// worker's alone: a ConfigError would be taken as every rank's and end this rank quietly while
// the others wait, so it becomes a fatal error, which prints the message with the rank and ends
// the whole job (MPI_Abort).
template <typename Fn>
auto data_or_fatal(Fn&& read) {
  try {
    return read();
  } catch (const ConfigError& e) {
    throw Error(str("the training data: ", e.what()));
  }
}

class WorkerLoop {
 public:
  WorkerLoop(const Job& job, WorkerData& data, Reporter& out, const ResumePoint& resume, StopVote& vote)
      : job_(job),
        resume_(resume),
        vote_(vote),
        topo_(job.topo),
        out_(out),
        towers_(make_towers(job.spec, job.devices, job.config.towers,
                            job.config.batch_size / (topo_.num_workers() * job.config.towers))),
        exchange_(topo_, job.plan, job.config.exchange),
        data_(data),
        relaxed_(job.config.exchange.mode.relaxed()),
        straggler_(job.config.parse_straggler()) {}

  void copy_parameters(std::vector<float>& out) {
    const float* p = towers_->parameter_staging();
    out.assign(p, p + job_.plan.total());
  }

  RankReport run() {
    start_parameters();
    start_overlap();
    data::LoaderConfig lc;
    lc.global_batch = job_.config.batch_size;
    lc.workers = topo_.num_workers();
    lc.worker = topo_.role_index();
    lc.towers = job_.config.towers;
    lc.seed = job_.config.seed;
    // This worker's first step: the run's, or (ssp/async resumed from a cut) its own.
    const std::int64_t first = resume_.first_step_of(topo_.role_index());
    lc.first_epoch = static_cast<int>(resume_.worker_steps.empty() ? resume_.epoch : first / job_.steps_per_epoch);
    lc.first_step =
        static_cast<int>(resume_.worker_steps.empty() ? resume_.step_in_epoch : first % job_.steps_per_epoch);
    lc.total_steps = std::max<std::int64_t>(0, job_.total_steps - first);
    lc.augment = data_.augment;
    lc.normalize = data_.normalize;
    data::BatchLoader loader(*data_.train, lc);
    const double wall0 = now_seconds(), cpu0 = process_cpu_seconds();
    interval_start_ = run_start_ = wall0;
    // One loop for every --sync-mode; what differs is said in two places: at_boundary() (how a
    // stop reaches this worker: the votes under sync, PS 0's words and cuts otherwise) and
    // next_step() (step + 1, except that a late backup worker skips to the PS's step). The
    // relaxed modes run no collectives mid-run (report_interval and evaluate: the chief alone).
    bool evaluated_last = false;
    std::int64_t step = first;
    int stopped_by = 0;
    const std::int64_t per_epoch = job_.steps_per_epoch;
    const auto crosses = [](std::int64_t from, std::int64_t to, std::int64_t every) {
      return to / every > from / every;
    };
    while (step < job_.total_steps) {
      if ((stopped_by = at_boundary(step)) != 0) break;
      const data::WorkerBatch batch = next_batch(loader, step);
      train_step(batch, step);
      for (const auto& part : batch.towers) samples_computed_ += part.count;
      if (!relaxed_ && !pipeline_) vote_.cast(step);  // with --overlap, the exchange thread casts once it has pulled
      const std::int64_t next = next_step(step, loader);
      const bool epoch_end = crosses(step, next, per_epoch);
      if (crosses(step, next, job_.config.log_every) || epoch_end || next == job_.total_steps)
        report_interval(next - 1, batch);
      const std::int64_t every = job_.config.eval_every;
      evaluated_last = (epoch_end || (every > 0 && crosses(step, next, every))) && job_.config.eval;
      if (evaluated_last)  // the epoch that ended, or the one the step is in
        evaluate(next - 1, static_cast<int>(epoch_end ? next / per_epoch - 1 : (next - 1) / per_epoch), epoch_end);
      step = next;
    }
    return finish_run(step, stopped_by, evaluated_last, wall0, cpu0);
  }

 private:
  // Before step `step`, nothing of this worker's in flight: the stop signal that ends its run
  // here, else 0. sync: the vote on step - kLag (stop_vote.hpp); the relaxed modes: PS 0's words.
  int at_boundary(std::int64_t step) { return relaxed_ ? relaxed_boundary(step) : stop_verdict(step); }

  // The step after `step`: step + 1, except under backup, where a worker whose gradients came
  // late moves on to the step the PS are at (WorkerExchange::catch_up), skipping its batches of
  // the steps in between.
  std::int64_t next_step(std::int64_t step, data::BatchLoader& loader) {
    if (!relaxed_) return step + 1;
    const std::int64_t next = std::min(job_.total_steps, resume_.step + exchange_.catch_up());
    for (std::int64_t skip = step + 1; skip < next; ++skip) data_or_fatal([&] { return loader.next(); });
    skipped_steps_ += next - step - 1;
    return next;
  }

  // The batch of step `step`, with the time spent waiting for it.
  data::WorkerBatch next_batch(data::BatchLoader& loader, std::int64_t step) {
    const double before = now_seconds();
    data::WorkerBatch batch = data_or_fatal([&] { return loader.next(); });
    const double waited = loader.take_wait_seconds();
    phases_.data += waited;
    data_wait_s_ += waited;
    job_.timeline->span("data wait", before, now_seconds(), step);
    return batch;
  }

  // The relaxed modes at the boundary before step `step` (nothing of this worker's in flight):
  // a stop signal this worker received raises PS 0's request, then the mode's own rule says
  // whether the worker stops here. Returns the stop signal that ends its run here, else 0. One
  // read of PS 0's words a step (docs/CHECKPOINTS.md, "Stopping on a signal"; docs/RELAXED_MODES.md, "Cuts").
  int relaxed_boundary(std::int64_t step) {
    const int received = stop_signal_received();
    if (received != 0 && received != stop_posted_) {
      exchange_.request_stop(received);
      stop_posted_ = received;
    }
    return job_.config.exchange.mode.per_gradient() ? at_cut(step) : backup_stop(step);
  }

  // backup: once a stop is requested, PS 0 sets the step of this run every worker stops before
  // (one after the furthest push), which this worker waits for; it trains up to that step.
  int backup_stop(std::int64_t step) {
    if (stop_before_ < 0) {
      ps::RelaxedWords words = exchange_.relaxed_words();
      if (words.stop_request == 0) return 0;
      comm::PollWaiter waiter(job_.config.exchange.hang_timeout_s, job_.config.exchange.max_nap_us);
      while (words.stop_at == 0) {
        if (!waiter.pause())
          throw HangError(str(rank_tag(), ": ", topo_.my_name(), " waited ", static_cast<int>(waiter.waited_seconds()),
                              " s for ", topo_.ps_name(0), " to set the step to stop at after ",
                              signal_name(static_cast<int>(words.stop_request)),
                              "; that PS is dead, stopped or stuck (raise --hang-timeout if it is only slow)"));
        words = exchange_.relaxed_words();
      }
      stop_before_ = resume_.step + words.stop_at;
      stop_signal_ = static_cast<int>(words.stop_request);
    }
    return step >= stop_before_ ? stop_signal_ : 0;
  }

  // ssp/async. A stop request (this worker's signal, or PS 0's word: one read a step) makes the
  // worker leave here, at its next step boundary, wherever the others are (finish_run records
  // its step: the end of the run is a cut). A checkpoint cut PS 0 asked for makes it say where it
  // is and wait until every PS has saved the state, then go on. Under ssp a worker goes one step
  // further instead when another may be waiting in its push for this worker's next gradient (it
  // has pushed S steps beyond this one), or the two would wait for each other.
  int at_cut(std::int64_t step) {
    for (;;) {
      const ps::RelaxedWords words = exchange_.relaxed_words();
      if (stop_posted_ != 0) return stop_posted_;
      if (words.stop_request != 0) return static_cast<int>(words.stop_request);
      if (words.cut_request <= cut_acked_ || !exchange_.can_pause_at_cut()) return 0;
      exchange_.ack_cut(words.cut_request, step);
      cut_acked_ = words.cut_request;
      const double t0 = now_seconds();
      comm::PollWaiter waiter(job_.config.exchange.hang_timeout_s, job_.config.exchange.max_nap_us);
      while (exchange_.relaxed_words().cut_release < cut_acked_)
        if (!waiter.pause())
          throw HangError(str(rank_tag(), ": ", topo_.my_name(), " waited ", static_cast<int>(waiter.waited_seconds()),
                              " s at cut ", cut_acked_, " (a checkpoint) for ", topo_.ps_name(0),
                              " to let the workers go on; a PS or a worker is dead, stopped or stuck (raise "
                              "--hang-timeout if it is only slow)"));
      job_.timeline->span("wait at a cut", t0, now_seconds(), step);
    }
  }

  RankReport finish_run(std::int64_t step, int stopped_by, bool evaluated_last, double wall0, double cpu0) {
    if (pipeline_) {
      drain();
      towers_->set_layer_hooks({}, {});
      pipeline_.reset();  // joins the exchange thread
      // The towers took each bucket's parameters at their next forward; without the hooks the
      // final evaluation below (and copy_parameters) must be given the last step's now (GPU
      // towers evaluated with parameters one update old without this).
      towers_->load_parameters();
    }
    if (stopped_by) {
      out_.line(str(
          "stopping after step ", step, " of ", job_.total_steps, ": ", signal_name(stopped_by), " reached a rank; ",
          job_.config.checkpoint_dir.empty() ? std::string("no --checkpoint-dir, so nothing is saved")
                                             : "the PS save a checkpoint; run again with --resume to continue",
          " (exit status ", kStoppedExitStatus, ")"));
    } else if (!evaluated_last && job_.config.eval) {
      evaluate(job_.total_steps - 1, -1);
    }
    // ssp/async: where this worker stopped, for the cut the run ends at (the final checkpoint).
    if (job_.config.exchange.mode.per_gradient()) exchange_.leave_at(step);
    exchange_.finish();
    vote_.finish();
    RankReport r;
    r.steps = step;
    r.stop_signal = stopped_by;
    r.wall_s = now_seconds() - wall0;
    r.cpu_s = process_cpu_seconds() - cpu0;
    r.busy_s = busy_s_;
    r.data_wait_s = data_wait_s_;
    r.test_accuracy = last_eval_.samples > 0 ? last_eval_.correct / last_eval_.samples : 0.0;
    r.test_loss = last_eval_.samples > 0 ? last_eval_.loss / last_eval_.samples : 0.0;
    r.test_samples = last_eval_.samples;
    r.samples_per_s = r.wall_s > 0 ? static_cast<double>(samples_trained_) / r.wall_s : 0.0;
    r.skipped_steps = skipped_steps_;
    r.max_lead = exchange_.max_lead();
    r.samples_computed = samples_computed_;
    return r;
  }

  // This worker's contiguous part of the test set: [begin, end).
  // Relaxed modes: the chief, all of it.
  std::pair<int, int> test_part() const {
    const int w = relaxed_ ? 0 : topo_.role_index(), workers = relaxed_ ? 1 : topo_.num_workers();
    const std::int64_t count = data_.test && (!relaxed_ || topo_.is_chief()) ? data_.test->info().count : 0;
    return {static_cast<int>(count * w / workers), static_cast<int>(count * (w + 1) / workers)};
  }

  // The chief initialises the parameters from --seed and uploads them (unless the PS loaded a
  // checkpoint); everyone pulls them.
  void start_parameters() {
    float* staging = towers_->parameter_staging();
    const bool upload = topo_.is_chief() && resume_.file.empty();
    if (upload) job_.spec.init_params(job_.config.seed, staging);
    exchange_.start_pushes_at(resume_.first_step_of(topo_.role_index()) - resume_.step);
    exchange_.start(upload ? staging : nullptr);
    exchange_.pull_all(staging);
    towers_->load_parameters();
  }

  // --overlap where it can work: the exchange on its own thread, driven by per-layer hooks.
  void start_overlap() {
    if (!job_.config.overlap) return;  // the default: nothing to report
    int level = MPI_THREAD_SINGLE;
    DRT_MPI_CHECK(MPI_Query_thread(&level));
    std::string why_not;
    if (relaxed_) why_not = str("--sync-mode ", ps::to_string(job_.config.exchange.mode), " is not pipelined yet");
    else if (job_.config.exchange.sync != ps::RmaSync::kPassive) why_not = "--rma-sync fence pulls in one epoch";
    else if (level < MPI_THREAD_SERIALIZED) why_not = "the MPI library does not provide MPI_THREAD_SERIALIZED";
    if (!why_not.empty()) {
      out_.line(str("overlap off (", why_not, "): push, pull and compute one after the other"));
      return;
    }
    pipeline_ = std::make_unique<ExchangePipeline>(
        exchange_, towers_->param_ranges(), job_.config.bucket_kib * 1024 / sizeof(float), towers_->hooked_gradients(),
        towers_->parameter_staging(), *job_.timeline);
    nn::LayerHooks hooks;
    hooks.before_forward = [this](std::size_t b, std::size_t e) { pipeline_->await_params(b, e); };
    hooks.grads_ready = [this](std::size_t b, std::size_t e) { pipeline_->grads_ready(b, e); };
    // GPU towers report a range when its backward is queued; the exchange thread waits for its
    // copy to the host before pushing it. (CPU towers sum a range before reporting it.)
    if (job_.devices.kind != backend::DeviceKind::kCpu)
      pipeline_->set_gradient_gate([this](std::size_t b, std::size_t e) { towers_->await_gradients(b, e); });
    // Step s is pulled: vote on it, and receive the verdict on s - 1 (complete by now: every rank
    // cast it before step s could be applied), which stop_verdict() reads without MPI.
    pipeline_->set_after_pull([this](std::int64_t step) {
      comm::Liveness::note_progress();  // this thread owns MPI during the step
      vote_.cast(step);
      if (step - 1 >= resume_.step) vote_.verdict(step - 1);
    });
    towers_->set_layer_hooks(hooks, pipeline_->buckets());
    out_.line(str("overlap on: ", pipeline_->buckets().size(), " gradient bucket(s) of whole layers, at least ",
                  human_bytes(static_cast<double>(job_.config.bucket_kib) * 1024),
                  " each, pushed during backward and pulled during the next forward"));
  }

  // Before step `step`: the verdict on step - StopVote::kLag (stop_vote.hpp), a signal or 0.
  int stop_verdict(std::int64_t step) {
    const std::int64_t voted = step - StopVote::kLag;
    if (voted < resume_.step) return 0;
    if (pipeline_) {
      if (const auto known = vote_.known_verdict(voted)) return *known;
      drain();  // not expected (see stop_vote.hpp); the exchange thread is idle after this
    }
    return vote_.verdict(voted);
  }

  // Before an MPI call of the training loop's own (reductions, evaluation, the end): the
  // exchange thread must be idle, and the parameters complete.
  void drain() {
    if (!pipeline_) return;
    const double t0 = now_seconds();
    pipeline_->drain();
    const double t1 = now_seconds();
    job_.timeline->span("exchange drain", t0, t1);
    phases_.exposed += pipeline_->take_exposed_seconds();  // the loop waited, outside any step
    // What it waited for is the last step's exchange, which the next step would otherwise have
    // waited for at its start: it counts in that step's time, or the step statistics of short
    // intervals (a report every few steps) would show steps without their exchange.
    if (!step_ms_.empty()) {
      step_ms_.back() += 1e3 * (t1 - t0);
      busy_s_ += t1 - t0;
    }
  }

  // What every step does first: the watchdog's beat, the test-only stop fault, and the scale of
  // the towers' gradients. Each tower's gradient is W / B_global * (sum of its losses)': summed
  // over towers and divided by W on the PS, that is the mean over the global batch, whatever the
  // split.
  float start_step(const data::WorkerBatch& batch, std::int64_t step) const {
    comm::Watchdog::beat("training step");
    if (test_fault(str("stop:", topo_.world_rank(), ":", step))) raise(SIGSTOP);  // tests of the hang watchdog
    if (test_fault(str("signal:", topo_.world_rank(), ":", step)))
      signal_self_and_wait(SIGTERM);  // tests of stop signals
    return static_cast<float>(topo_.num_workers()) / static_cast<float>(batch.global_count);
  }

  // What the layers know of the step besides its data: the seed and the global step (dropout).
  nn::Pass pass(std::int64_t step) const {
    nn::Pass p;
    p.seed = job_.config.seed;
    p.step = step;
    return p;
  }

  void train_step(const data::WorkerBatch& batch, std::int64_t step) {
    if (pipeline_) return overlapped_step(batch, step);
    const float scale = start_step(batch, step);
    const double t0 = now_seconds();
    const backend::LossSums sums = towers_->compute(batch, scale, pass(step));
    check_loss(sums, batch, step);
    straggle(now_seconds() - t0);
    const double t1 = now_seconds();
    const float* grad = towers_->combine_gradients();
    const double t2 = now_seconds();
    // One call: the exchange overlaps the pull of the first published blocks with the push of
    // the last ones (WorkerExchange::step).
    exchange_.step(grad, towers_->parameter_staging());
    comm::Liveness::note_progress();
    const double pulled = now_seconds();
    towers_->load_parameters();
    const double t3 = now_seconds();
    const ps::ExchangeTimes x = exchange_.take_times();
    if (job_.timeline->enabled()) {
      // Forward and backward as measured (summed over the towers). In the exchange, pushes, waits
      // for blocks and Gets interleave: shown as the push (with the Gets that overlap it), one
      // wait, then what is left of the pull.
      const Towers::ComputeSplit split = towers_->last_compute_split();
      Timeline& tl = *job_.timeline;
      tl.span("forward", t0, t0 + split.forward_s, step);
      tl.span("backward", t0 + split.forward_s, t0 + split.forward_s + split.backward_s, step);
      tl.span("tower combine", t1, t2, step);
      const double pushed = std::min(pulled, t2 + x.push_s), waited = std::min(pulled, pushed + x.wait_s);
      tl.span("push", t2, pushed, step);
      tl.span("ps wait", pushed, waited, step);
      tl.span("pull", waited, pulled, step);
      if (towers_->count() > 1) tl.span("load towers", pulled, t3, step);
    }
    phases_.compute += t1 - t0;
    phases_.combine += (t2 - t1) + std::max(0.0, (t3 - t2) - x.push_s - x.wait_s - x.pull_s);
    phases_.push += x.push_s;
    phases_.wait += x.wait_s;
    phases_.pull += x.pull_s;
    phases_.exposed += t3 - t2;
    finish_step(batch, sums, t3 - t0);
  }

  // --overlap: forward waits per layer for its parameters (pulled by the exchange thread),
  // backward hands each finished bucket to the exchange thread; the step ends with backward.
  void overlapped_step(const data::WorkerBatch& batch, std::int64_t step) {
    const float scale = start_step(batch, step);
    const double t0 = now_seconds();
    pipeline_->begin_step(step);  // may wait for the previous step's push (its own span)
    const double started = now_seconds();
    const backend::LossSums sums = towers_->compute(batch, scale, pass(step));
    check_loss(sums, batch, step);
    straggle(now_seconds() - t0);  // with the exchange waits of forward: an experiment knob
    pipeline_->backward_done();
    const double t1 = now_seconds();
    const double exposed = pipeline_->take_exposed_seconds();
    const ps::ExchangeTimes x = pipeline_->take_times();
    if (job_.timeline->enabled()) {
      const Towers::ComputeSplit split = towers_->last_compute_split();
      // Forward includes its waits for parameters (spans of their own inside it).
      job_.timeline->span("forward", started, started + split.forward_s, step);
      job_.timeline->span("backward", started + split.forward_s, started + split.forward_s + split.backward_s, step);
    }
    phases_.compute += t1 - t0 - exposed;
    phases_.push += x.push_s;
    phases_.wait += x.wait_s;
    phases_.pull += x.pull_s;
    phases_.exposed += exposed;
    finish_step(batch, sums, t1 - t0);
  }

  // --straggler W:F on worker W: sleeps (F - 1) x the step's compute time (an experiment knob);
  // the test fault slow-steps:<world rank> sleeps 0.2 s instead.
  void straggle(double compute_s) const {
    if (slow_steps_) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (straggler_.worker != topo_.role_index() || straggler_.factor <= 1.0) return;
    std::this_thread::sleep_for(std::chrono::duration<double>((straggler_.factor - 1.0) * std::max(0.0, compute_s)));
  }

  void check_loss(const backend::LossSums& sums, const data::WorkerBatch& batch, std::int64_t step) const {
    if (!std::isfinite(sums.loss))
      throw Error(str(rank_tag(), ": ", topo_.my_name(), ": the training loss is ", sums.loss, " at step ", step,
                      " (epoch ", batch.epoch + 1, "); the learning rate is probably too high: lower --lr (now ",
                      job_.optimizer.lr, "), add --warmup-steps, or try --optimizer adam"));
  }

  // What every step records once its time is known.
  void finish_step(const data::WorkerBatch& batch, const backend::LossSums& sums, double seconds) {
    busy_s_ += seconds;
    step_ms_.push_back(1e3 * seconds);
    int my_samples = 0;
    for (const auto& part : batch.towers) my_samples += part.count;
    tally_.loss += sums.loss;
    tally_.correct += static_cast<double>(sums.correct);
    tally_.samples += static_cast<double>(my_samples) * targets_;  // tokens for a language model
    samples_trained_ += batch.global_count;                        // counted alike on every worker: the job's samples
    ++interval_steps_;
  }

  void report_interval(std::int64_t step, const data::WorkerBatch& batch) {
    drain();
    const std::string what = str("the training statistics of step ", step + 1, " among the workers");
    if (!relaxed_) {
      reduce(tally_.values(), 3, MPI_SUM, what);
      reduce(phases_.values(), Phases::kCount, MPI_MAX, what);
    }
    const double now = now_seconds();
    const double seconds = std::max(1e-9, now - interval_start_);
    const double rate = tally_.samples / seconds;  // samples/s, or tokens/s for a language model
    const double eta =
        static_cast<double>(job_.total_steps - step - 1) * job_.config.batch_size * targets_ / std::max(rate, 1e-9);
    const double loss = tally_.loss / std::max(1.0, tally_.samples);
    const double accuracy = tally_.correct / std::max(1.0, tally_.samples);
    const double per_step = 1e3 / std::max(1, interval_steps_);
    const Stragglers s = relaxed_ ? Stragglers{} : stragglers(what);
    // MFU (--peak-tflops): the rate is every worker's under sync (summed above), the chief's own
    // under the relaxed modes, so the peak is that of the towers it counts.
    const double peak_flops =
        job_.config.peak_tflops * 1e12 * job_.config.towers * (relaxed_ ? 1 : topo_.num_workers());
    const bool mfu = language_model() && flops_per_token_ > 0 && peak_flops > 0;
    const std::string measures =
        language_model()
            ? str("loss ", fixed(loss, 4), "  ppl ", fixed(std::exp(loss), 2), "  token acc ", fixed(accuracy, 4), "  ",
                  static_cast<long>(rate), " tokens/s",
                  flops_per_token_ > 0
                      ? str(" (", fixed(rate * flops_per_token_ / 1e9, 1), " GFLOP/s",
                            mfu ? str(", MFU ", fixed(100.0 * rate * flops_per_token_ / peak_flops, 1), "%") : "", ")")
                      : "")
            : str("loss ", fixed(loss, 4), "  train acc ", fixed(accuracy, 4), "  ", static_cast<long>(rate),
                  " samples/s");
    out_.line(str("epoch ", batch.epoch + 1, "/", job_.config.epochs, " step ", batch.step_in_epoch + 1, "/",
                  batch.steps_in_epoch, " (", step + 1, "/", job_.total_steps, ")  ", measures, "  ETA ",
                  clock_text(eta), relaxed_ ? " (the chief's own steps)" : ""));
    if (topo_.num_workers() > 1 && !relaxed_)
      out_.line(str("  step ms over workers: median ", fixed(s.median, 2), ", p90 ", fixed(s.p90, 2), ", max ",
                    fixed(s.max, 2), "; slowest ", topo_.worker_name(s.slowest), " (median ",
                    fixed(s.slowest_median, 2), ")"));
    const GradNorms norms = report_grad_norms();
    out_.record(JsonLine()
                    .add("step", static_cast<std::int64_t>(step + 1))
                    .add("epoch", batch.epoch + 1)
                    .add("loss", loss)
                    .add("accuracy", accuracy)
                    .add("samples_per_s", rate / targets_)
                    .add_if(language_model(), "tokens_per_s", rate)
                    .add_if(language_model(), "perplexity", std::exp(loss))
                    .add_if(language_model() && flops_per_token_ > 0, "model_tflops", rate * flops_per_token_ / 1e12)
                    .add_if(mfu, "mfu", mfu ? rate * flops_per_token_ / peak_flops : 0.0)
                    .add("lr", current_lr(step))
                    .add_object("ms_per_step", JsonLine()
                                                   .add("data", phases_.data * per_step)
                                                   .add("compute", phases_.compute * per_step)
                                                   .add("tower_combine", phases_.combine * per_step)
                                                   .add("push", phases_.push * per_step)
                                                   .add("ps_wait_apply", phases_.wait * per_step)
                                                   .add("pull", phases_.pull * per_step)
                                                   .add("exposed_exchange", phases_.exposed * per_step))
                    .add_object("step_ms", JsonLine()
                                               .add("median", s.median)
                                               .add("p90", s.p90)
                                               .add("max", s.max)
                                               .add("slowest_worker", s.slowest)
                                               .add("slowest_median", s.slowest_median))
                    .add_if(norms.reported, "grad_norm", norms.mean)
                    .add_if(norms.reported, "clipped_steps", static_cast<double>(norms.clipped))
                    .add_if(norms.reported, "norm_steps", static_cast<double>(norms.steps)));
    tally_ = {};
    phases_ = {};
    step_ms_.clear();
    interval_steps_ = 0;
    interval_start_ = now;
  }

  // --grad-clip, on the chief: the mean global gradient norm before clipping over the steps the PS
  // applied since the last report, and how many were clipped (PS 0's running totals; one read),
  // printed and returned for the metrics record.
  struct GradNorms {
    bool reported = false;
    double mean = 0.0;
    std::int64_t steps = 0, clipped = 0;
  };
  GradNorms report_grad_norms() {
    if (job_.optimizer.grad_clip <= 0.0 || !out_.active()) return {};
    const ps::GradNormTotals now = exchange_.grad_norm_totals();
    GradNorms n{true, 0.0, now.steps - norms_reported_.steps, now.clipped - norms_reported_.clipped};
    if (n.steps > 0) n.mean = (now.norm_sum - norms_reported_.norm_sum) / static_cast<double>(n.steps);
    norms_reported_ = now;
    out_.line(str("  gradient norm before clipping: mean ", fixed(n.mean, 4), " over ", n.steps, " steps, ", n.clipped,
                  " clipped to ", job_.optimizer.grad_clip));
    return n;
  }

  // Step times over the interval: each worker's median, p90 and max, gathered by the chief.
  struct Stragglers {
    double median = 0, p90 = 0, max = 0, slowest_median = 0;
    int slowest = 0;
  };
  Stragglers stragglers(const std::string& what) {
    std::vector<double> sorted = step_ms_;
    std::sort(sorted.begin(), sorted.end());
    auto at = [&](double q) {
      return sorted.empty() ? 0.0 : sorted[static_cast<std::size_t>(q * static_cast<double>(sorted.size() - 1))];
    };
    const double mine[3] = {at(0.5), at(0.9), sorted.empty() ? 0.0 : sorted.back()};
    std::vector<double> all(3 * static_cast<std::size_t>(topo_.num_workers()));
    const ps::ExchangeConfig& x = job_.config.exchange;
    comm::gather(topo_.role_comm(), mine, sizeof mine, all.data(), 0, x.hang_timeout_s, x.max_nap_us, what);
    Stragglers s;
    if (!topo_.is_chief()) return s;
    std::vector<double> medians;
    for (int w = 0; w < topo_.num_workers(); ++w) {
      const double* m = &all[3 * static_cast<std::size_t>(w)];
      medians.push_back(m[0]);
      s.p90 = std::max(s.p90, m[1]);
      s.max = std::max(s.max, m[2]);
      if (m[0] > s.slowest_median) s.slowest_median = m[0], s.slowest = w;
    }
    std::sort(medians.begin(), medians.end());
    s.median = medians[medians.size() / 2];
    return s;
  }

  // Worker-communicator all-reduce that times out (--hang-timeout) instead of hanging.
  void reduce(double* values, int count, MPI_Op op, const std::string& what) {
    const ps::ExchangeConfig& x = job_.config.exchange;
    comm::allreduce_in_place(topo_.role_comm(), values, count, MPI_DOUBLE, op, x.hang_timeout_s, x.max_nap_us, what);
  }

  double current_lr(std::int64_t step) const { return job_.optimizer.schedule.lr_at(job_.optimizer.lr, step); }

  // Test-set loss and accuracy: every worker its slice, summed over the workers. `epoch` < 0:
  // the final evaluation; otherwise after step `step` of epoch `epoch`, at its end or not.
  void evaluate(std::int64_t step, int epoch, bool epoch_end = true) {
    comm::Watchdog::beat("evaluation");
    drain();
    // With --overlap the towers take each bucket's parameters at their next forward; the test
    // set needs them now (on the CPU, tower 0's are already in place).
    if (pipeline_) towers_->load_parameters();
    const double start = now_seconds();
    // The part is read in pieces (a test set need not fit in memory), through the same source
    // and normalisation as training, without augmentation.
    const auto [begin, end] = test_part();
    Tally t{0.0, 0.0, static_cast<double>(end - begin) * targets_};
    for (int at = begin; at < end; at += kEvalPiece) {
      std::vector<int> samples(static_cast<std::size_t>(std::min(kEvalPiece, end - at)));
      std::iota(samples.begin(), samples.end(), at);
      const data::TowerBatch piece =
          data_or_fatal([&] { return data::read_tower_batch(*data_.test, samples, data_.normalize); });
      const backend::LossSums sums = towers_->evaluate(piece.images.data(), piece.labels.data(), piece.count);
      if (slow_eval_) std::this_thread::sleep_for(std::chrono::milliseconds(200));  // test-only: a long evaluation
      // An evaluation of a large test set is progress: for the watchdog, and for the peers that
      // wait for this worker meanwhile (comm/liveness.hpp; the relaxed chief evaluates alone).
      comm::Watchdog::beat("evaluation");
      comm::Liveness::note_progress();
      t.loss += sums.loss;
      t.correct += static_cast<double>(sums.correct);
    }
    if (!relaxed_)
      reduce(t.values(), 3, MPI_SUM, str("the test-set evaluation after step ", step + 1, " among the workers"));
    else if (!topo_.is_chief()) return;
    last_eval_ = t;
    eval_s_ += now_seconds() - start;
    job_.timeline->span("evaluation", start, now_seconds(), step + 1);
    if (t.samples == 0) return;
    const double accuracy = t.correct / t.samples, loss = t.loss / t.samples;
    const std::string label = epoch < 0   ? std::string("final ")
                              : epoch_end ? str("epoch ", epoch + 1, " ")
                                          : str("step ", step + 1, " ");
    if (language_model())
      out_.line(str(label, "test: loss ", fixed(loss, 4), "  ppl ", fixed(std::exp(loss), 2), "  token accuracy ",
                    fixed(accuracy, 4), " (", static_cast<long>(t.samples / targets_), " windows, ",
                    static_cast<long>(t.samples), " tokens)"));
    else
      out_.line(str(label, "test: loss ", fixed(loss, 4), "  accuracy ", fixed(accuracy, 4), " (",
                    static_cast<long>(t.samples), " images)"));
    out_.record(JsonLine()
                    .add("eval", true)
                    .add("step", static_cast<std::int64_t>(step + 1))
                    .add("epoch", epoch >= 0 ? epoch + 1 : -1)
                    .add("test_loss", loss)
                    .add_if(language_model(), "test_perplexity", std::exp(loss))
                    .add("test_accuracy", accuracy)
                    .add("elapsed_s", now_seconds() - run_start_)
                    .add("eval_s", eval_s_));
  }

  const Job& job_;
  const ResumePoint& resume_;
  StopVote& vote_;
  const comm::Topology& topo_;
  Reporter& out_;
  std::unique_ptr<Towers> towers_;
  ps::WorkerExchange exchange_;
  std::unique_ptr<ExchangePipeline> pipeline_;  // --overlap; destroyed before exchange_
  // Test samples read and evaluated at a time.
  static constexpr int kEvalPiece = 4096;
  WorkerData& data_;
  Phases phases_;
  Tally tally_, last_eval_;
  // This worker's step times in the interval: compute to parameters loaded; with --overlap, from
  // the wait for the previous step's push to the end of backward (+ a drain that follows).
  std::vector<double> step_ms_;
  int interval_steps_ = 0;
  double interval_start_ = 0.0;
  ps::GradNormTotals norms_reported_;  // --grad-clip: PS 0's totals at the last report
  double run_start_ = 0.0;             // when training started (evaluation records: elapsed_s)
  double eval_s_ = 0.0;                // seconds spent in evaluations so far (evaluation records: eval_s)
  double busy_s_ = 0.0;
  double data_wait_s_ = 0.0;  // waiting for the loader, over the whole run
  std::int64_t samples_trained_ = 0;
  const bool relaxed_;  // --sync-mode backup/ssp/async
  // Labels per sample: 1, or T for a language model (per-token loss: tallies count tokens).
  const double targets_ = job_.spec.wiring().back().output.positions();
  const double flops_per_token_ = job_.spec.training_flops_per_token();  // 0: not a language model
  bool language_model() const { return job_.spec.wiring().back().output.sequence; }
  const TrainConfig::Straggler straggler_;
  const bool slow_steps_ = test_fault(str("slow-steps:", topo_.world_rank()));
  const bool slow_eval_ = test_fault("slow-eval");
  std::int64_t skipped_steps_ = 0;     // backup: steps skipped to catch up
  std::int64_t samples_computed_ = 0;  // this worker's samples of the steps it trained
  int stop_posted_ = 0;                // relaxed: the stop signal this worker has requested from PS 0
  std::int64_t stop_before_ = -1;      // backup: the step every worker stops before (-1: no stop yet)
  int stop_signal_ = 0;                // backup: the signal that stops them
  std::int64_t cut_acked_ = 0;         // ssp/async: the newest cut this worker stopped at
};

}  // namespace

RankReport run_worker(const Job& job, WorkerData& data, Reporter& reporter, const ResumePoint& resume, StopVote& vote,
                      std::vector<float>* final_params) {
  WorkerLoop loop(job, data, reporter, resume, vote);
  const RankReport report = loop.run();
  finish_together(job);
  if (final_params) loop.copy_parameters(*final_params);
  return report;
}

}  // namespace drt::train
