#include "checkpointer.hpp"

#include <signal.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>

#include "drtrain/comm/agreement.hpp"
#include "drtrain/comm/mpi_check.hpp"
#include "drtrain/comm/poll.hpp"
#include "drtrain/comm/progress.hpp"
#include "drtrain/comm/watchdog.hpp"
#include "drtrain/config.hpp"
#include "drtrain/core/clock.hpp"
#include "drtrain/core/log.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/core/test_faults.hpp"
#include "drtrain/io/checkpoint_store.hpp"
#include "drtrain/io/checkpoint_writer.hpp"

namespace drt::train {
namespace {

std::vector<std::string> slot_names(const Job& job) {
  auto probe = optim::make_optimizer(job.optimizer, 0);
  return probe->slot_names();
}

// Bytes of the whole state in a checkpoint: the parameters and every optimizer slot.
double state_bytes(const Job& job) {
  return 4.0 * static_cast<double>(job.plan.total()) * static_cast<double>(1 + slot_names(job).size());
}

// Reads `file` into the resume point's buffers (PS, collective over the PS communicator).
io::CheckpointMeta read_into(const Job& job, const std::string& file, ResumePoint& r) {
  const double t0 = now_seconds();
  const std::size_t size = job.plan.shard_size(job.topo.role_index());
  r.params = AlignedBuffer<float>(size);
  r.slots.clear();
  io::ShardView view{job.plan.spans(job.topo.role_index()), r.params.data(), {}};
  for (std::size_t k = 0; k < slot_names(job).size(); ++k) {
    r.slots.emplace_back(size);
    view.slots.push_back(r.slots.back().data());
  }
  io::CheckpointMeta meta = io::read_checkpoint(
      job.topo.role_comm(), file, io::ResumeMatch{job.config.model, job.spec.graph().to_text(), job.data_identity},
      job.spec.layout(), slot_names(job), view);
  if (job.topo.role_index() == 0) {
    const double dt = now_seconds() - t0;
    const double bytes = state_bytes(job);
    log_info("read ", file, ": ", human_bytes(bytes), " in ", dt, " s (", human_bytes(bytes / dt),
             "/s, checksum verified)");
  }
  return meta;
}

// What PS 0 found in --checkpoint-dir at start-up (docs/CHECKPOINT_FORMAT.md, "Runs").
struct DirectoryState {
  std::vector<io::StoredCheckpoint> files;  // newest first, with the run that wrote each
  std::optional<io::LatestRecord> latest;
  std::vector<std::string> skipped;  // passed over by --resume as damaged
};

DirectoryState look_at(const std::string& dir) {
  DirectoryState d;
  d.files = io::scan_checkpoints(dir);
  std::string problem;
  d.latest = io::read_latest(dir, &problem);
  if (!problem.empty()) log_warning(problem, "; --resume chooses among every checkpoint there, newest first");
  return d;
}

// The line of runs a checkpoint continues: its lineage, or just its run (an empty line for a file
// of drtrain before run ids).
io::Lineage line_of(const io::CheckpointMeta& m) {
  const std::optional<io::Lineage> line = io::Lineage::parse(m.lineage);
  if (line && !line->empty() && line->run_id() == m.run_id) return *line;
  return m.run_id.empty() ? io::Lineage() : io::Lineage::fresh(m.run_id);
}

// PS: the checkpoint to resume from, read; nullopt for a fresh start. Same outcome on every PS.
// Plain --resume tries the checkpoints of the line of the run that wrote last (LATEST), newest
// first, or every checkpoint in a directory without LATEST; PS 0 orders them for every PS.
std::optional<io::CheckpointMeta> choose_and_read(const Job& job, ResumePoint& r, DirectoryState& dir) {
  const TrainConfig& c = job.config;
  const bool lead = job.topo.role_index() == 0;
  if (c.resume != "latest") {
    try {
      const io::CheckpointMeta m = read_into(job, c.resume, r);
      r.file = c.resume;
      return m;
    } catch (const io::CheckpointError& e) {
      throw ConfigError(str("--resume ", c.resume, ": ", e.what(),
                            "; pass another checkpoint (drtrain-ckpt "
                            "verify FILE checks one) or start without --resume"));
    }
  }
  std::string order;
  if (lead) order = join(io::resume_candidates(dir.files, dir.latest), "\n");
  order = comm::broadcast_text(job.topo.role_comm(), 0, order);
  for (const std::string& file : order.empty() ? std::vector<std::string>() : split_exact(order, "\n")) {
    try {
      const io::CheckpointMeta m = read_into(job, file, r);
      r.file = file;
      return m;
    } catch (const io::CheckpointError& e) {
      if (lead) log_warning("skipping checkpoint ", file, ": ", e.what());
      dir.skipped.push_back(file);
    }
  }
  if (lead)
    log_info(
        "--resume: no valid checkpoint in ", c.checkpoint_dir,
        dir.latest ? str(" of the line of run ", dir.latest->run_id, ", which wrote last (LATEST)") : std::string(),
        "; starting from scratch");
  return std::nullopt;
}

// PS 0 names this run and checks that it may write --checkpoint-dir (io::check_directory_use);
// every rank learns the run's identity, or the same ConfigError.
void establish_identity(const Job& job, ResumePoint& r, const DirectoryState& dir,
                        const std::optional<io::CheckpointMeta>& parent) {
  const TrainConfig& c = job.config;
  const comm::Topology& topo = job.topo;
  std::optional<std::string> error;
  std::string packed;
  if (topo.is_ps() && topo.role_index() == 0) {
    try {
      const std::string run_id = io::new_run_id();
      const io::Lineage line = parent ? line_of(*parent).child(parent->step, run_id) : io::Lineage::fresh(run_id);
      std::string note = str("run ", run_id, ": from scratch");
      if (parent) {
        std::error_code ec;
        const std::string where = std::filesystem::path(r.file).parent_path().string();
        const bool elsewhere = !c.checkpoint_dir.empty() &&
                               !std::filesystem::equivalent(where.empty() ? "." : where, c.checkpoint_dir, ec);
        const std::string of = parent->run_id.empty() ? std::string("a checkpoint without a run id (an older drtrain)")
                                                      : str("run ", parent->run_id, "'s checkpoint");
        note = elsewhere ? str("run ", run_id, ": forks ", of, " after ", parent->step,
                               " updates, from another directory: its own line of checkpoints goes to ",
                               c.checkpoint_dir, ", where other runs' files are left alone")
                         : str("run ", run_id, ": continues ", of, " after ", parent->step, " updates");
      }
      if (!c.checkpoint_dir.empty()) {
        io::RunStart start;
        start.resume = !c.resume.empty();
        start.parent = r.file;
        if (parent) {
          start.parent_run_id = parent->run_id;
          start.parent_step = parent->step;
          // Nothing left to train: the final save writes the parent's step (unless it is this file).
          start.saves_parent_step =
              r.step >= job.total_steps && r.file != io::checkpoint_path(c.checkpoint_dir, parent->step);
        }
        start.skipped = dir.skipped;
        start.latest = dir.latest;
        io::check_directory_use(c.checkpoint_dir, dir.files, line, start);
      }
      packed = join({run_id, parent ? parent->run_id : std::string(), line.text(), note}, "\n");
    } catch (const ConfigError& e) {
      error = e.what();
    } catch (const std::exception& e) {
      error = str("--checkpoint-dir ", c.checkpoint_dir, ": ", e.what());
    }
  }
  comm::raise_if_any(topo.world(), error);
  const std::vector<std::string> fields =
      split_exact(comm::broadcast_text(topo.world(), topo.ps_world_ranks().front(), packed), "\n");
  r.run_id = fields.at(0);
  r.parent_run_id = fields.at(1);
  r.lineage = fields.at(2);
  r.identity_note = fields.at(3);
}

}  // namespace

namespace {

std::string join_numbers(const std::vector<std::int64_t>& values, const std::string& sep) {
  std::vector<std::string> parts;
  parts.reserve(values.size());
  for (std::int64_t v : values) parts.push_back(std::to_string(v));
  return join(parts, sep);
}

// A cut (ssp/async: each worker at a step of its own; docs/CHECKPOINT_FORMAT.md "Resuming"):
// with the same number of workers, the same batch and --sync-mode ssp/async every worker
// continues at its own step; otherwise every worker starts at the slowest one's (the data
// cursor), and the steps the others had trained beyond it are trained again (said so).
void resume_cut(const Job& job, const std::vector<std::int64_t>& start, ResumePoint& r) {
  const std::int64_t gradients = start[5], file_workers = start[4];
  if (gradients < 0) return;  // not a cut
  const int workers = job.topo.num_workers();
  const bool same =
      job.config.exchange.mode.per_gradient() && file_workers == workers && start[1] == job.config.batch_size;
  if (same) {
    r.worker_steps.assign(start.begin() + 6, start.end());
    r.gradients = gradients;
    if (job.topo.is_chief())
      log_info("the checkpoint is a cut of --sync-mode ", ps::to_string(job.config.exchange.mode),
               ": each worker continues at its own step (", join_numbers(r.worker_steps, ", "), ")");
    return;
  }
  if (!job.topo.is_chief()) return;
  log_warning("the checkpoint is a cut of ", file_workers, " workers of --sync-mode ssp/async at batch ", start[1],
              " (each at its own step; the slowest at ", r.step, "); this run has ", workers, " workers, batch ",
              job.config.batch_size, " and --sync-mode ", ps::to_string(job.config.exchange.mode),
              ", so every worker starts at the slowest one's step and the steps the others had trained beyond "
              "it are trained again; resume with the same workers, batch and an ssp/async mode to continue "
              "each worker where it stopped");
}

}  // namespace

ResumePoint prepare_resume(const Job& job) {
  ResumePoint r;
  const comm::Topology& topo = job.topo;
  const TrainConfig& c = job.config;
  std::optional<std::string> error;
  DirectoryState dir;                        // PS 0
  std::optional<io::CheckpointMeta> parent;  // PS
  // start[0] = step, [1] = checkpoint's global batch, [2] = epoch, [3] = step in epoch, [4] =
  // the checkpoint's workers, [5] = its gradients (-1: not a cut); then its worker_steps
  std::vector<std::int64_t> start(6 + static_cast<std::size_t>(topo.num_workers()), 0);
  start[5] = -1;
  if (topo.is_ps()) {
    try {
      if (topo.role_index() == 0 && !c.checkpoint_dir.empty()) dir = look_at(c.checkpoint_dir);
      if (!c.resume.empty()) parent = choose_and_read(job, r, dir);
      if (parent) {
        start[0] = parent->step, start[1] = parent->global_batch, start[2] = parent->epoch;
        start[3] = parent->step_in_epoch, start[4] = parent->num_workers, start[5] = parent->gradients;
        if (parent->worker_steps.size() == static_cast<std::size_t>(topo.num_workers()))
          std::copy(parent->worker_steps.begin(), parent->worker_steps.end(), start.begin() + 6);
      }
    } catch (const ConfigError& e) {
      error = e.what();
    } catch (const std::exception& e) {
      error = str("--resume: ", e.what());
    }
  }
  comm::raise_if_any(topo.world(), error);
  std::vector<char> name(4096, '\0');
  if (topo.is_ps() && topo.role_index() == 0) std::strncpy(name.data(), r.file.c_str(), name.size() - 1);
  const int ps0 = topo.ps_world_ranks().front();
  std::int64_t* const starts = start.data();  // named, so that the MPI type check sees int64_t
  DRT_MPI_CHECK(MPI_Bcast(starts, static_cast<int>(start.size()), MPI_INT64_T, ps0, topo.world().get()));
  DRT_MPI_CHECK(MPI_Bcast(name.data(), static_cast<int>(name.size()), MPI_CHAR, ps0, topo.world().get()));
  r.file = name.data();
  if (r.file.empty()) {
    establish_identity(job, r, dir, parent);
    return r;
  }
  // The position in the data, in samples, is what carries over: the same epoch and the same
  // sample position in it, counted in this run's batches. The optimizer's update count carries
  // over as it is (Adam's bias correction); the step counter, the learning-rate schedule and the
  // remaining steps follow the position (docs/CHECKPOINT_FORMAT.md, "Resuming").
  const std::int64_t samples_in_epoch = start[3] * start[1];
  const int batch = job.config.batch_size;
  if (samples_in_epoch % batch != 0)
    throw ConfigError(str("--resume ", r.file, ": the checkpoint was written ", samples_in_epoch,
                          " samples into epoch ", start[2] + 1, " (step ", start[3], " at batch ", start[1],
                          "), which is not a whole number of batches of --batch-size ", batch,
                          "; resume with a --batch-size that divides ", samples_in_epoch, " (for example ", start[1],
                          "), or from a checkpoint written at an epoch boundary"));
  r.updates = start[0];
  r.epoch = static_cast<int>(start[2]);
  r.step_in_epoch = static_cast<int>(samples_in_epoch / batch);
  r.step = static_cast<std::int64_t>(r.epoch) * job.steps_per_epoch + r.step_in_epoch;
  resume_cut(job, start, r);
  if (topo.is_chief() && start[1] != batch)
    log_info("the checkpoint's batch was ", start[1],
             ": the step counter and the learning-rate schedule continue "
             "from the position in the data (step ",
             r.step, " at batch ", batch, "), Adam's bias correction from the ", r.updates, " updates applied");
  establish_identity(job, r, dir, parent);
  return r;
}

void load_into(ResumePoint& resume, ps::ParameterServer& server) {
  if (resume.file.empty()) return;
  std::copy(resume.params.begin(), resume.params.end(), server.params());
  for (std::size_t k = 0; k < resume.slots.size(); ++k)
    std::copy(resume.slots[k].begin(), resume.slots[k].end(), server.optimizer().slot(k).data());
  resume.params = AlignedBuffer<float>();
  resume.slots.clear();
}

Checkpointer::Checkpointer(const Job& job, ps::ParameterServer& server, const ResumePoint& resume)
    : job_(job),
      server_(server),
      done_comm_(job.topo.role_comm().split(0, job.topo.role_index())),
      resumed_from_(resume.file),
      resumed_{resume.step, resume.file.empty() ? -1 : resume.updates, resume.worker_steps, resume.gradients},
      run_id_(resume.run_id),
      parent_run_id_(resume.parent_run_id),
      line_(io::Lineage::parse(resume.lineage).value_or(io::Lineage::fresh(resume.run_id))),
      first_step_(resume.step),
      first_update_(resume.updates),
      last_time_(now_seconds()) {}

Checkpointer::~Checkpointer() {
  // Only on a failure (finish() leaves nothing in flight): the job is about to abort; the writer
  // thread is joined by writer_'s destructor, the reduction is left to MPI_Abort.
  releasing_.store(true);
  if (in_flight_ && in_flight_->reducing) comm::unwatch_request(&in_flight_->request);
}

std::int64_t Checkpointer::updates_at(std::int64_t step) const { return first_update_ + (step - first_step_); }

Checkpointer::SavePoint Checkpointer::at_step(std::int64_t step) const { return {step, updates_at(step), {}, -1}; }

Checkpointer::SavePoint Checkpointer::at_cut(const ps::Cut& cut) const {
  // Named after the optimizer updates the gradients make (W of them one update), like the
  // checkpoints of the other modes.
  return {cut.slowest(), cut.gradients / job_.topo.num_workers(), cut.worker_steps, cut.gradients};
}

bool Checkpointer::policy_due(std::int64_t step, bool by_time) const {
  const TrainConfig& c = job_.config;
  return (c.checkpoint_every > 0 && updates_at(step) % c.checkpoint_every == 0) || by_time;
}

bool Checkpointer::due(std::int64_t step) {
  const TrainConfig& c = job_.config;
  if (c.checkpoint_dir.empty()) return false;
  advance();  // PS 0's own background save moves on meanwhile
  const bool by_time = c.checkpoint_secs > 0 && now_seconds() - last_time_ >= c.checkpoint_secs;
  if (by_time) last_time_ = now_seconds();  // once per period, even if the cut comes a little later
  return policy_due(step, by_time);
}

void Checkpointer::save_start() {
  const TrainConfig& c = job_.config;
  if (c.checkpoint_dir.empty() || !c.checkpoint_start || !resumed_from_.empty()) return;
  SavePoint point = at_step(first_step_);
  if (c.exchange.mode.per_gradient()) {  // ssp/async checkpoints are cuts: every worker before its first step
    point.worker_steps.assign(static_cast<std::size_t>(job_.topo.num_workers()), first_step_);
    point.gradients = 0;
  }
  save_now(point);
}

void Checkpointer::save_cut(const ps::Cut& cut) {
  if (job_.config.checkpoint_dir.empty()) return;
  advance();
  save(at_cut(cut));
}

void Checkpointer::save(const SavePoint& point) {
  if (job_.config.checkpoint_async && !settle_in_flight(point)) return;
  if (job_.config.checkpoint_async) start_async(point);
  else save_now(point);
}

io::ShardView Checkpointer::live_view() const {
  io::ShardView view{server_.spans(), server_.params(), {}};
  for (std::size_t k = 0; k < server_.optimizer().slot_names().size(); ++k)
    view.slots.push_back(server_.optimizer().slot(k).data());
  return view;
}

void Checkpointer::after_step(std::int64_t step) {
  const TrainConfig& c = job_.config;
  if (c.checkpoint_dir.empty()) return;
  reached_step_.store(step);
  advance();
  const bool lead = job_.topo.role_index() == 0;
  int by_time = 0;
  if (c.checkpoint_secs > 0) {
    // PS 0's clock decides, so that every PS saves at the same step.
    by_time = lead && now_seconds() - last_time_ >= c.checkpoint_secs;
    comm::patient_bcast(job_.topo.role_comm(), &by_time, 1, MPI_INT, 0, "PS 0's clock for --checkpoint-secs");
  }
  if (policy_due(step, by_time != 0)) save(at_step(step));
}

bool Checkpointer::settle_in_flight(const SavePoint& point) {
  // Every PS comes here at every due save, whether or not it still has a save in flight: one PS
  // may have seen the previous save's completion reduction finish while another has not yet,
  // and deciding by in_flight_ made them enter different collectives (PS 0 this broadcast, PS 1
  // the next file's creation: MPI_ERR_TRUNCATE, or a stall). A previous background save still
  // going makes training wait for it, at most half the hang timeout (the workers wait for this
  // PS meanwhile), each PS until its own part is written and PS 0 until every part is (it has
  // then seen the completion). PS 0 decides whether this save goes ahead, so that every PS does
  // the same.
  const bool lead = job_.topo.role_index() == 0;
  const double t0 = now_seconds();
  const std::int64_t previous = in_flight_ ? in_flight_->updates : -1;
  comm::PollWaiter waiter(0.5 * job_.config.exchange.hang_timeout_s, job_.config.exchange.max_nap_us);
  while (!advance() && (lead || !in_flight_->reducing))
    if (!waiter.pause()) break;
  int go = lead && !in_flight_;
  comm::patient_bcast(job_.topo.role_comm(), &go, 1, MPI_INT, 0, "PS 0's decision on the next checkpoint");
  const double waited = now_seconds() - t0;
  if (!go) {
    last_skipped_ = point.updates;
    if (lead && skipped_++ == 0)
      log_warning("skipped the checkpoint after ", point.updates, " updates: the one after ", previous,
                  " is still being written after ", waited,
                  " s (half of --hang-timeout): checkpoints are due faster "
                  "than the file system writes them (raise --checkpoint-every or --checkpoint-secs)");
    return false;
  }
  if (lead && previous >= 0 && !warned_wait_ && waited > 0.05) {
    warned_wait_ = true;
    log_warning("the checkpoint after ", point.updates, " updates waited ", waited, " s for the one after ", previous,
                " to be written in the background: checkpoints are due about as fast as the file system "
                "writes them, and training pauses meanwhile (raise --checkpoint-every or --checkpoint-secs)");
  }
  return true;
}

void Checkpointer::finish(std::int64_t step, const ps::Cut* end) {
  if (job_.config.checkpoint_dir.empty()) return;
  releasing_.store(true);
  wait_in_flight();
  const SavePoint point = end ? at_cut(*end) : at_step(step);
  if (point.updates == last_skipped_ && skipped_ > 0) --skipped_;  // written below after all
  if (skipped_ > 0)
    log_info(skipped_, " checkpoint(s) skipped in all because the previous one was still being written");
  if (point.same_state(last_saved_)) return;
  // Nothing new since the checkpoint this run resumed from (a run resumed at its end).
  if (io::checkpoint_path(job_.config.checkpoint_dir, point.updates) == resumed_from_ &&
      (!end || point.same_state(resumed_)))
    return;
  save_now(point);
}

io::CheckpointMeta Checkpointer::meta(const SavePoint& point) const {
  const TrainConfig& c = job_.config;
  const std::int64_t step = point.step;
  io::CheckpointMeta m;
  m.drtrain_version = DRT_VERSION_STRING;
  m.step = point.updates;  // updates applied in all runs; the data position is below
  m.worker_steps.assign(point.worker_steps.begin(), point.worker_steps.end());
  m.gradients = point.gradients;
  m.epoch = step / job_.steps_per_epoch;
  m.step_in_epoch = step % job_.steps_per_epoch;
  m.samples_seen =
      m.epoch * job_.train_count + std::min<std::int64_t>(m.step_in_epoch * c.batch_size, job_.train_count);
  m.global_batch = c.batch_size;
  m.model = c.model;
  // HDF5 keeps attributes in the object header (64 KiB in all): a very large model is not stored.
  if (const std::string text = job_.spec.graph().to_text(); text.size() <= 32768) m.model_definition = text;
  m.data_identity = job_.data_identity;
  m.optimizer = optim::to_string(job_.optimizer.kind);
  m.optimizer_config = job_.optimizer.describe();
  m.num_ps = job_.topo.num_ps();
  m.num_workers = job_.topo.num_workers();
  m.towers = c.towers;
  m.shard_boundaries.assign(job_.plan.boundaries().begin(), job_.plan.boundaries().end());
  m.seed = c.seed;
  m.config = c.to_ini();
  m.run_id = run_id_;
  m.parent_run_id = parent_run_id_;
  m.parent_step = resumed_from_.empty() ? -1 : first_update_;
  m.lineage = line_.text();
  return m;
}

void Checkpointer::publish(const std::string& temp, const std::string& final_path, double bytes,
                           const std::string& how) {
  // LATEST names the file before it is renamed into place; retention removes only this run's
  // line's files (docs/CHECKPOINT_FORMAT.md, "Runs"), and temporary files while the lock is held.
  const std::string name = std::filesystem::path(final_path).filename().string();
  io::publish_checkpoint(temp, final_path, {name, run_id_, io::step_of(name), line_.text(), ""}, line_);
  const auto removed = io::apply_retention(job_.config.checkpoint_dir, job_.config.keep, line_,
                                           job_.checkpoint_lock && job_.checkpoint_lock->held());
  log_info("checkpoint ", final_path, ": ", human_bytes(bytes), " ", how,
           removed.empty() ? std::string() : str(", removed ", removed.size(), " old file(s)"));
}

void Checkpointer::save_now(const SavePoint& point) {
  comm::Watchdog::beat("checkpoint");
  const double t0 = now_seconds();
  const std::string& dir = job_.config.checkpoint_dir;
  const std::int64_t step = point.step, updates = point.updates;
  const std::string temp = io::temporary_path(dir, updates), final_path = io::checkpoint_path(dir, updates);
  const bool lead = job_.topo.role_index() == 0;
  std::function<void()> fault;
  // Test-only (core/test_faults.hpp): die after the data, before the metadata.
  if (lead && test_fault(str("checkpoint-write:", updates))) fault = [] { raise(SIGKILL); };
  io::write_checkpoint(job_.topo.role_comm(), temp, meta(point), job_.spec.layout(), server_.optimizer().slot_names(),
                       live_view(), fault);
  // Every PS's part is on disk and PS 0 has closed the file.
  if (lead) {
    const double dt = now_seconds() - t0, bytes = state_bytes(job_);
    publish(temp, final_path, bytes, str("in ", dt, " s (", human_bytes(bytes / dt), "/s)"));
  }
  // The file is published before anyone goes on.
  comm::patient_barrier(job_.topo.role_comm(), "PS 0 to publish the checkpoint");
  last_saved_ = point;
  last_time_ = now_seconds();
  blocked_s_ += last_time_ - t0;
  job_.timeline->span("checkpoint", t0, last_time_, step);
}

void Checkpointer::start_async(const SavePoint& point) {
  const std::int64_t step = point.step;
  const double t0 = now_seconds();
  // PS 0 has seen the previous save complete (after_step), so every part of it is written and
  // this PS's reduction is complete or about to be.
  wait_in_flight();
  comm::Watchdog::beat("checkpoint");
  const std::string& dir = job_.config.checkpoint_dir;
  auto f = std::make_unique<InFlight>();
  f->step = step;
  f->updates = point.updates;
  f->temp = io::temporary_path(dir, f->updates);
  f->final_path = io::checkpoint_path(dir, f->updates);
  f->started = t0;
  io::CheckpointParts parts = io::create_checkpoint(job_.topo.role_comm(), f->temp, meta(point), job_.spec.layout(),
                                                    server_.optimizer().slot_names(), server_.spans());
  // Test-only (core/test_faults.hpp): a slow file system; a full one on the last PS.
  SnapshotWriter::Faults faults;
  // checkpoint-slow: the write lasts until training is 350 steps further, so that the saves due
  // at the next 3 multiples of 100 find it still going (each waits half of --hang-timeout, then is
  // skipped), however fast the steps go.
  if (test_fault(str("checkpoint-slow:", f->updates)))
    faults.hold = [this, until = step + 350] { return !releasing_.load() && reached_step_.load() < until; };
  faults.fail = job_.topo.role_index() + 1 == job_.topo.num_ps() && test_fault(str("checkpoint-full:", f->updates));
  writer_.start(std::move(parts), live_view(),
                faults);  // the snapshot: the serve loop may change the shard from here on
  last_saved_ = point;
  last_time_ = now_seconds();
  f->paused_s = last_time_ - t0;
  in_flight_ = std::move(f);
  blocked_s_ += last_time_ - t0;
  job_.timeline->span("checkpoint snapshot", t0, last_time_, step);
}

bool Checkpointer::advance() {
  if (!in_flight_) return true;
  InFlight& f = *in_flight_;
  if (!f.reducing) {
    if (!writer_.finished()) return false;
    try {
      f.sums[0] = writer_.take();
    } catch (const std::exception& e) {
      f.sums[1] = 1;
      f.error = e.what();
    }
    // Every PS posts one reduction per save, in save order, on a communicator of their own.
    DRT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, f.sums, 2, MPI_UINT64_T, MPI_SUM, done_comm_.get(), &f.request));
    comm::watch_request(&f.request);  // MPICH: moved by every poll (comm/progress.hpp)
    f.reducing = true;
  }
  int done = 0;
  DRT_MPI_CHECK(MPI_Test(&f.request, &done, MPI_STATUS_IGNORE));
  if (!done) return false;
  comm::unwatch_request(&f.request);
  complete_in_flight();
  in_flight_.reset();
  return true;
}

void Checkpointer::complete_in_flight() {
  const InFlight& f = *in_flight_;
  if (f.sums[1] > 0)
    throw Error(
        str("checkpoint ", f.final_path, ": ",
            f.error.empty() ? str(f.sums[1], " other PS could not write their part (their messages say why)") : f.error,
            "; nothing was published: make room on the file system or pass another --checkpoint-dir, then "
            "--resume continues from the newest checkpoint there"));
  if (job_.topo.role_index() != 0) return;
  // Test-only (core/test_faults.hpp): die after the data, before the metadata.
  if (test_fault(str("checkpoint-write:", f.updates))) raise(SIGKILL);
  io::complete_checkpoint(f.temp, f.sums[0]);
  const double dt = now_seconds() - f.started, bytes = state_bytes(job_);
  publish(f.temp, f.final_path, bytes,
          str("in ", dt, " s in the background (", human_bytes(bytes / dt), "/s; training paused ",
              std::lround(1e3 * f.paused_s), " ms for the snapshot of step ", f.step, ")"));
}

void Checkpointer::wait_in_flight() {
  if (!in_flight_) return;
  // While this PS's own part is being written the writer's progress counts as progress; after
  // that, the other PS have --hang-timeout to finish theirs.
  std::size_t seen = writer_.progress();
  comm::PollWaiter waiter(job_.config.exchange.hang_timeout_s, job_.config.exchange.max_nap_us);
  while (!advance()) {
    if (!in_flight_->reducing && writer_.progress() != seen) {
      seen = writer_.progress();
      waiter = comm::PollWaiter(job_.config.exchange.hang_timeout_s, job_.config.exchange.max_nap_us);
    }
    if (!waiter.pause()) {
      const std::string unreachable = in_flight_->reducing ? comm::hang_survey() : std::string();
      throw HangError(
          str(rank_tag(), ": waited ", static_cast<int>(waiter.waited_seconds()), " s for the checkpoint ",
              in_flight_->final_path,
              !in_flight_->reducing ? ": this PS's writes have not progressed; its file system is stuck"
              : unreachable.empty()
                  ? " to be written by the other PS; one of them is dead, stopped or its file system is stuck"
                  : str(" to be written by the other PS; ", unreachable),
              " (raise --hang-timeout if it is only slow)"));
    }
  }
}

}  // namespace drt::train
