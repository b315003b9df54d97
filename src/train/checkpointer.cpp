#include "checkpointer.hpp"

#include <signal.h>

#include <cstdlib>
#include <functional>
#include <cstring>
#include <optional>

#include "drtrain/comm/agreement.hpp"
#include "drtrain/comm/mpi_check.hpp"
#include "drtrain/comm/watchdog.hpp"
#include "drtrain/config.hpp"
#include "drtrain/core/clock.hpp"
#include "drtrain/core/log.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/core/test_faults.hpp"
#include "drtrain/io/checkpoint_store.hpp"

namespace drt::train {
namespace {

std::vector<std::string> slot_names(const Job& job) {
  auto probe = optim::make_optimizer(job.optimizer, 0);
  return probe->slot_names();
}

// Reads `file` into the resume point's buffers (PS, collective over the PS communicator).
io::CheckpointMeta read_into(const Job& job, const std::string& file, ResumePoint& r) {
  const double t0 = now_seconds();
  const ps::ShardRange range = job.plan.shard(job.topo.role_index());
  r.params = AlignedBuffer<float>(range.size());
  r.slots.clear();
  io::ShardView view{range.begin, range.end, r.params.data(), {}};
  for (std::size_t k = 0; k < slot_names(job).size(); ++k) {
    r.slots.emplace_back(range.size());
    view.slots.push_back(r.slots.back().data());
  }
  const io::CheckpointMeta meta =
      io::read_checkpoint(job.topo.role_comm(), file, job.config.model, job.spec.layout(), slot_names(job), view);
  if (job.topo.role_index() == 0) {
    const double dt = now_seconds() - t0;
    const double bytes = 4.0 * static_cast<double>(job.plan.total()) * (1 + view.slots.size());
    log_info("read ", file, ": ", human_bytes(bytes), " in ", dt, " s (", human_bytes(bytes / dt), "/s, checksum verified)");
  }
  return meta;
}

// PS: the checkpoint to resume from, read; nullopt for a fresh start. Same outcome on every PS.
std::optional<io::CheckpointMeta> choose_and_read(const Job& job, ResumePoint& r) {
  const TrainConfig& c = job.config;
  const bool lead = job.topo.role_index() == 0;
  if (c.resume != "latest") {
    try {
      const io::CheckpointMeta m = read_into(job, c.resume, r);
      r.file = c.resume;
      return m;
    } catch (const io::CheckpointError& e) {
      throw ConfigError(str("--resume ", c.resume, ": ", e.what(), "; pass another checkpoint (drtrain-ckpt "
                            "verify FILE checks one) or start without --resume"));
    }
  }
  for (const std::string& file : io::list_checkpoints(c.checkpoint_dir)) {
    try {
      const io::CheckpointMeta m = read_into(job, file, r);
      r.file = file;
      return m;
    } catch (const io::CheckpointError& e) {
      if (lead) log_warning("skipping checkpoint ", file, ": ", e.what());
    }
  }
  if (lead) log_info("--resume: no valid checkpoint in ", c.checkpoint_dir, "; starting from scratch");
  return std::nullopt;
}

}  // namespace

ResumePoint prepare_resume(const Job& job) {
  ResumePoint r;
  if (job.config.resume.empty()) return r;
  const comm::Topology& topo = job.topo;
  std::optional<std::string> error;
  // start[0] = step, [1] = checkpoint's global batch, [2] = epoch, [3] = step in epoch
  std::int64_t start[4] = {0, 0, 0, 0};
  if (topo.is_ps()) {
    try {
      if (const auto m = choose_and_read(job, r)) start[0] = m->step, start[1] = m->global_batch, start[2] = m->epoch,
                                                  start[3] = m->step_in_epoch;
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
  DRT_MPI_CHECK(MPI_Bcast(start, 4, MPI_INT64_T, ps0, topo.world().get()));
  DRT_MPI_CHECK(MPI_Bcast(name.data(), static_cast<int>(name.size()), MPI_CHAR, ps0, topo.world().get()));
  r.file = name.data();
  if (r.file.empty()) return r;
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
                          "; resume with a --batch-size that divides ", samples_in_epoch, " (for example ",
                          start[1], "), or from a checkpoint written at an epoch boundary"));
  r.updates = start[0];
  r.epoch = static_cast<int>(start[2]);
  r.step_in_epoch = static_cast<int>(samples_in_epoch / batch);
  r.step = static_cast<std::int64_t>(r.epoch) * job.steps_per_epoch + r.step_in_epoch;
  if (topo.is_chief() && start[1] != batch)
    log_info("the checkpoint's batch was ", start[1], ": the step counter and the learning-rate schedule continue "
             "from the position in the data (step ", r.step, " at batch ", batch, "), Adam's bias correction from the ",
             r.updates, " updates applied");
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
      resumed_from_(resume.file),
      first_step_(resume.step),
      first_update_(resume.updates),
      last_time_(now_seconds()) {}

std::int64_t Checkpointer::updates_at(std::int64_t step) const { return first_update_ + (step - first_step_); }

void Checkpointer::after_step(std::int64_t step) {
  const TrainConfig& c = job_.config;
  if (c.checkpoint_dir.empty()) return;
  bool due = c.checkpoint_every > 0 && updates_at(step) % c.checkpoint_every == 0;
  if (c.checkpoint_secs > 0) {
    // PS 0's clock decides, so that every PS saves at the same step.
    int by_time = job_.topo.role_index() == 0 && now_seconds() - last_time_ >= c.checkpoint_secs;
    DRT_MPI_CHECK(MPI_Bcast(&by_time, 1, MPI_INT, 0, job_.topo.role_comm().get()));
    due = due || by_time;
  }
  if (due) save(step);
}

void Checkpointer::finish(std::int64_t step) {
  if (job_.config.checkpoint_dir.empty() || step == last_saved_) return;
  if (io::checkpoint_path(job_.config.checkpoint_dir, updates_at(step)) == resumed_from_) return;  // nothing new
  save(step);
}

io::CheckpointMeta Checkpointer::meta(std::int64_t step) const {
  const TrainConfig& c = job_.config;
  io::CheckpointMeta m;
  m.drtrain_version = DRT_VERSION_STRING;
  m.step = updates_at(step);  // updates applied in all runs; the data position is below
  m.epoch = step / job_.steps_per_epoch;
  m.step_in_epoch = step % job_.steps_per_epoch;
  m.samples_seen = m.epoch * job_.train_count + std::min<std::int64_t>(m.step_in_epoch * c.batch_size, job_.train_count);
  m.global_batch = c.batch_size;
  m.model = c.model;
  m.optimizer = optim::to_string(job_.optimizer.kind);
  m.optimizer_config = job_.optimizer.describe();
  m.num_ps = job_.topo.num_ps();
  m.num_workers = job_.topo.num_workers();
  m.towers = c.towers;
  m.shard_boundaries.assign(job_.plan.boundaries().begin(), job_.plan.boundaries().end());
  m.seed = c.seed;
  m.config = c.to_ini();
  return m;
}

void Checkpointer::save(std::int64_t step) {
  comm::Watchdog::beat("checkpoint");
  const double t0 = now_seconds();
  const std::string& dir = job_.config.checkpoint_dir;
  const std::int64_t updates = updates_at(step);
  const std::string temp = io::temporary_path(dir, updates), final_path = io::checkpoint_path(dir, updates);
  const ps::ShardRange range = server_.range();
  io::ShardView view{range.begin, range.end, server_.params(), {}};
  for (std::size_t k = 0; k < server_.optimizer().slot_names().size(); ++k)
    view.slots.push_back(server_.optimizer().slot(k).data());
  const bool lead = job_.topo.role_index() == 0;
  std::function<void()> fault;
  // Test-only (core/test_faults.hpp): die after the data, before the metadata.
  if (lead && test_fault(str("checkpoint-write:", updates))) fault = [] { raise(SIGKILL); };
  io::write_checkpoint(job_.topo.role_comm(), temp, meta(step), job_.spec.layout(),
                       server_.optimizer().slot_names(), view, fault);
  // Every PS closed the file (write_checkpoint returns after the collective close).
  if (lead) {
    io::publish_checkpoint(temp, final_path);
    const auto removed = io::apply_retention(dir, job_.config.keep);
    const double dt = now_seconds() - t0;
    const double bytes = 4.0 * static_cast<double>(job_.plan.total()) * (1 + view.slots.size());
    log_info("checkpoint ", final_path, ": ", human_bytes(bytes), " in ", dt, " s (", human_bytes(bytes / dt),
             "/s)", removed.empty() ? std::string() : str(", removed ", removed.size(), " old file(s)"));
  }
  DRT_MPI_CHECK(MPI_Barrier(job_.topo.role_comm().get()));  // the file is published before anyone goes on
  last_saved_ = step;
  last_time_ = now_seconds();
  seconds_ += last_time_ - t0;
  job_.timeline->span("checkpoint", t0, last_time_, step);
}

}  // namespace drt::train
