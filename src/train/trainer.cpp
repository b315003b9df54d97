// run_training: setup common to every rank, the PS side of the run, and the final report.
#include "drtrain/train/trainer.hpp"

#include <sched.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "drtrain/backend/backend.hpp"
#include "drtrain/comm/agreement.hpp"
#include "drtrain/comm/liveness.hpp"
#include "drtrain/comm/mpi_check.hpp"
#include "drtrain/comm/poll.hpp"
#include "drtrain/comm/rma_component.hpp"
#include "drtrain/comm/watchdog.hpp"
#include "drtrain/config.hpp"
#include "drtrain/core/clock.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/stop_signals.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/core/test_faults.hpp"
#include "drtrain/data/epoch_plan.hpp"
#include "drtrain/data/hdf5_source.hpp"
#include "drtrain/data/memory_source.hpp"
#include "drtrain/data/token_format.hpp"
#include "drtrain/data/token_source.hpp"
#include "drtrain/io/checkpoint_store.hpp"
#include "drtrain/ps/server.hpp"
#include "checkpointer.hpp"
#include "job.hpp"
#include "memory_estimate.hpp"
#include "reporter.hpp"
#include "stop_vote.hpp"

namespace drt::train {
namespace {

int cores_available() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// BLAS threads per worker: --threads, or the node's cores shared by the node's workers. PS
// ranks are not counted: they sleep while workers compute (measured: see bench/RESULTS.md).
int choose_blas_threads(const TrainConfig& c, const comm::Topology& topo) {
  int workers_here = topo.is_worker() ? 1 : 0;
  DRT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &workers_here, 1, MPI_INT, MPI_SUM, topo.node_comm().get()));
  if (c.threads > 0) return c.threads;
  return std::max(1, cores_available() / std::max(1, workers_here));
}

// A data file without /test cannot be evaluated on: say how to evaluate (or not) before training.
void require_test_split(const TrainConfig& c) {
  if (c.test_file.empty() && !data::has_split(c.data_file, "test"))
    throw ConfigError(str(c.data_file,
                          " has no /test split to evaluate on: pass --test-file FILE (a data file whose "
                          "/test holds the same kind of samples; drtrain-data convert writes one), or --eval false "
                          "to train without evaluation"));
}

// The data set's splits for --dataset hdf5: /train of --data-file, /test of --test-file or
// --data-file (not opened without evaluation). Both must describe the same images and classes,
// or (a token data set) the same vocabulary, cut into windows of --context tokens.
void open_hdf5_splits(const TrainConfig& c, WorkerData& d) {
  if (data::data_kind(c.data_file) == data::DataKind::kTokens) {
    if (c.context <= 0)
      throw ConfigError(str(c.data_file, " holds a token stream: pass --context T, the tokens per sample (the "
                                         "model's context, e.g. 256)"));
    if (c.eval) require_test_split(c);
    data::TokenSources s = data::open_token_sources(c.data_file, c.test_file, c.context, c.eval);
    d.train = std::move(s.train);
    d.test = std::move(s.test);
    return;
  }
  if (c.context > 0)
    throw ConfigError(str("--context ", c.context, " is for token data sets, and ", c.data_file,
                          " holds images: leave --context out"));
  d.train = data::open_hdf5_source(c.data_file, "train");
  if (!c.eval) return;
  require_test_split(c);
  d.test = data::open_hdf5_source(c.test_file.empty() ? c.data_file : c.test_file, "test");
  const data::SourceInfo &tr = d.train->info(), &te = d.test->info();
  if (tr.channels != te.channels || tr.height != te.height || tr.width != te.width || tr.classes != te.classes)
    throw ConfigError(str(te.name, " holds ", te.channels, "x", te.height, "x", te.width, " images of ", te.classes,
                          " classes, but ", tr.name, " ", tr.channels, "x", tr.height, "x", tr.width, " images of ",
                          tr.classes, " classes; train and test must match"));
}

}  // namespace

WorkerData open_worker_data(const TrainConfig& c) {
  WorkerData d;
  if (c.dataset == "synthetic") {
    const std::array<int, 3> dims = c.synthetic_dims();
    d.train = data::make_memory_source(data::make_synthetic(c.synthetic_train, dims[0], dims[1], dims[2], 10, c.seed));
    d.test =
        data::make_memory_source(data::make_synthetic(c.synthetic_test, dims[0], dims[1], dims[2], 10, c.seed + 1));
  } else if (c.dataset == "hdf5") {
    open_hdf5_splits(c, d);
  } else {
    d.train = data::make_memory_source(data::load_fashion_mnist(c.data_dir, true));
    d.test = data::make_memory_source(data::load_fashion_mnist(c.data_dir, false));
  }
  const data::SourceInfo& info = d.train->info();
  if (info.count > std::numeric_limits<int>::max())
    throw ConfigError(str(info.name, " holds ", info.count, " samples; drtrain trains on at most ",
                          std::numeric_limits<int>::max(), " per data set"));
  // --test-samples: the first N test images (a quick evaluation of a long or a test run).
  if (d.test) d.test = data::make_prefix_source(std::move(d.test), c.test_samples);
  d.augment = data::parse_augmentation(c.augment);
  d.normalize = data::parse_normalization(c.normalize, info.channels, d.train->mean(), d.train->stddev(), info.name);
  return d;
}

nn::TensorShape sample_shape(int channels, int height, int width, bool tokens) {
  // A token data set's samples are T token ids (as floats): a sequence of T positions of one
  // value each (GPT_DESIGN: c = T, w = 1), and the model's output per-token logits.
  return tokens ? nn::TensorShape::seq(1, width, 1) : nn::TensorShape{1, channels, height, width};
}

namespace {

// The training data's identity (io::ResumeMatch): kind and sample shape, classes or vocabulary,
// training samples, and a hash of the first 64 KiB of the file they come from (the seed of a
// synthetic set): cheap, and it changes with the file whatever its name.
std::string data_identity(const TrainConfig& c, const data::SourceInfo& info) {
  std::string source = str("synthetic seed ", c.seed);
  const std::string file = c.dataset == "hdf5"            ? c.data_file
                           : c.dataset == "fashion-mnist" ? c.data_dir + "/train-images-idx3-ubyte.gz"
                                                          : std::string();
  if (!file.empty()) {
    std::ifstream in(file, std::ios::binary);
    std::string head(std::size_t{64} << 10, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<std::size_t>(std::max<std::streamsize>(0, in.gcount())));
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(comm::fingerprint(head)));
    source = str("file header ", hex);
  }
  const std::string shape = info.tokens ? str("token windows of ", info.width)
                                        : str("images ", info.channels, "x", info.height, "x", info.width);
  return str(shape, "; ", info.classes, info.tokens ? " token ids" : " classes", "; ", info.count, " train samples; ",
             source);
}

// Workers open the data; a failure on any rank becomes the same ConfigError everywhere.
WorkerData load_data(const TrainConfig& c, const comm::Topology& topo) {
  WorkerData d;
  std::optional<std::string> error;
  try {
    if (topo.is_worker()) d = open_worker_data(c);
  } catch (const ConfigError& e) {
    error = e.what();
  }
  comm::raise_if_any(topo.world(), error);
  return d;
}

Job make_job(const TrainConfig& c, const comm::Topology& topo, const WorkerData& d) {
  // The data set's sizes and sample shape, from the chief (PS ranks load no data, but the
  // model's layout depends on the shape).
  int facts[7] = {0, 0, 1, 1, 1, 1, 0};  // train count, test count, C, H, W, classes, tokens
  if (d.train) {
    const data::SourceInfo& info = d.train->info();
    facts[0] = static_cast<int>(info.count), facts[2] = info.channels, facts[3] = info.height;
    facts[4] = info.width, facts[5] = info.classes, facts[6] = info.tokens ? 1 : 0;
  }
  if (d.test) facts[1] = static_cast<int>(d.test->info().count);
  const int chief = topo.worker_world_ranks().front();
  DRT_MPI_CHECK(MPI_Bcast(facts, 7, MPI_INT, chief, topo.world().get()));
  const nn::TensorShape input = sample_shape(facts[2], facts[3], facts[4], facts[6] != 0);
  // Every rank reads the model (a model file may differ between nodes: a stale copy) and checks
  // it against the data's shape; any rank's error, or a difference, is one ConfigError everywhere.
  std::optional<nn::ModelGraph> graph;
  std::optional<std::string> error;
  try {
    graph = c.load_model();
  } catch (const ConfigError& e) {
    error = e.what();
  }
  comm::raise_if_any(topo.world(), error);
  comm::require_same(topo.world(), comm::fingerprint(graph->to_text()),
                     str("the model (--model ", c.model, " reads differently on some ranks)"));
  Job job{c, topo, nn::ModelSpec(*graph, input, facts[5]), ps::ShardPlan::balanced(0, 1), c.optimizer};
  job.plan = c.exchange.shard_plan_for(job.spec.layout().total(), topo.num_ps(), topo.num_nodes());
  job.train_count = facts[0];
  job.test_count = facts[1];
  job.data_identity =
      comm::broadcast_text(topo.world(), chief, d.train ? data_identity(c, d.train->info()) : std::string());
  // Validates the batch against workers x towers on every rank (ConfigError alike everywhere).
  const data::EpochPlan plan(job.train_count, c.batch_size, topo.num_workers(), c.towers, c.seed, 0);
  job.steps_per_epoch = plan.steps();
  job.total_steps = static_cast<std::int64_t>(job.steps_per_epoch) * c.epochs;
  if (c.max_steps > 0) job.total_steps = std::min(job.total_steps, c.max_steps);
  if (job.optimizer.schedule.total_steps == 0) job.optimizer.schedule.total_steps = job.total_steps;
  job.optimizer.validate();
  c.exchange.validate_for(topo.num_workers());
  if (c.parse_straggler().worker >= topo.num_workers())
    throw ConfigError(str("--straggler ", c.straggler, ": there are only ", topo.num_workers(), " workers (0..",
                          topo.num_workers() - 1, ")"));
  job.blas_threads = choose_blas_threads(c, topo);
  job.devices = plan_devices(c, topo);
  return job;
}

// Tags the metrics records with this run's segment (its place in the line of runs: 0 from
// scratch, one more per resume) and writes the segment's first record: where it starts.
std::int64_t record_segment_start(const Job& job, const ResumePoint& resume, Reporter& out) {
  const std::optional<io::Lineage> line = io::Lineage::parse(resume.lineage);
  const std::int64_t segment = line && !line->empty() ? static_cast<std::int64_t>(line->entries().size()) - 1 : 0;
  out.set_segment(segment, resume.run_id);
  JsonLine start;
  start.add("start", true).add("step", resume.step).add("updates", resume.updates).add("total_steps", job.total_steps);
  if (!resume.file.empty()) start.add("resumed_from", resume.file).add("parent_run", resume.parent_run_id);
  out.record(start);
  return segment;
}

// --timeline of run segment N > 0 (a resumed run): FILE.segment-N.EXT next to FILE, so that each
// segment's trace stays whole (its clock starts at its own start) and none overwrites another.
std::string timeline_path(const std::string& path, std::int64_t segment) {
  if (segment == 0) return path;
  const std::size_t slash = path.rfind('/'), dot = path.rfind('.');
  const bool ext = dot != std::string::npos && (slash == std::string::npos || dot > slash + 1);
  return ext ? str(path.substr(0, dot), ".segment-", segment, path.substr(dot)) : str(path, ".segment-", segment);
}

// Refuses, on every rank, a job whose estimated memory (memory_estimate.hpp) exceeds a node's:
// each node sums the estimates of its ranks before anything large is allocated.
void check_memory(const Job& job) {
  const comm::Topology& topo = job.topo;
  int gpu_towers = topo.is_worker() && job.devices.kind == backend::DeviceKind::kCuda ? 1 : 0;
  DRT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &gpu_towers, 1, MPI_INT, MPI_MAX, topo.world().get()));
  MemoryInputs in;
  in.config = &job.config;
  in.spec = &job.spec;
  in.train_count = job.train_count;
  in.test_count = job.config.eval ? job.test_count : 0;
  in.sample_floats = job.spec.input().per_sample();
  in.targets = job.spec.input().positions();
  in.num_ps = topo.num_ps();
  in.num_workers = topo.num_workers();
  in.largest_shard = job.plan.largest_shard();
  in.towers_on_gpu = gpu_towers != 0;
  const MemoryEstimate e = estimate_memory(in);
  double here[4] = {topo.is_ps() ? e.ps_bytes() : e.worker_bytes(), topo.is_worker() ? 1.0 : 0.0,
                    topo.is_ps() ? 1.0 : 0.0, e.resident};
  DRT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, here, 4, MPI_DOUBLE, MPI_SUM, topo.node_comm().get()));
  int node_rank = 0;
  DRT_MPI_CHECK(MPI_Comm_rank(topo.node_comm().get(), &node_rank));
  std::optional<std::string> error;
  try {
    if (node_rank == 0)
      refuse_if_too_large(here[0], node_available_bytes() + here[3], e, static_cast<int>(here[1]),
                          static_cast<int>(here[2]), str("node ", host_name()));
  } catch (const ConfigError& x) {
    error = x.what();
  }
  comm::raise_if_any(topo.world(), error);
}

// What the PS side will write, checked on the ranks that write it before any window exists:
// every PS makes --checkpoint-dir (when missing) and checks that it is a writable directory, and
// PS 0 locks it for the whole job (io::DirectoryLock: a second job on the same directory is
// refused, naming the holder); world rank 0, which writes the --timeline trace, that it can open
// the file. A problem on any rank becomes the same ConfigError on every rank, so the job ends at
// once with one message instead of a PS-only error that would leave the workers waiting for the
// hang timeout. Returns PS 0's lock (null elsewhere).
std::shared_ptr<const io::DirectoryLock> check_outputs(const Job& job) {
  const TrainConfig& c = job.config;
  std::optional<std::string> error;
  std::shared_ptr<const io::DirectoryLock> lock;
  try {
    if (job.topo.is_ps() && !c.checkpoint_dir.empty()) {
      io::prepare_checkpoint_dir(c.checkpoint_dir);
      if (job.topo.role_index() == 0) lock = std::make_shared<const io::DirectoryLock>(c.checkpoint_dir);
    }
    if (job.topo.world().rank() == 0 && !c.timeline.empty()) Timeline::check_output(c.timeline);
  } catch (const ConfigError& e) {
    error = e.what();
  }
  comm::raise_if_any(job.topo.world(), error);
  return lock;
}

// The setup line of --decay-rule (what decays in this model) and --grad-clip.
std::string describe_decay_and_clipping(const Job& job) {
  const ParamLayout& layout = job.spec.layout();
  const optim::OptimizerConfig& o = job.optimizer;
  std::size_t tensors = 0;
  for (const TensorSpec& t : layout.tensors()) tensors += t.state ? 0 : 1;
  std::string out =
      str("weight decay ", o.weight_decay, " by --decay-rule ", to_string(o.decay_rule),
          o.weight_decay > 0.0 ? ": " : " (off; it would apply to ", layout.decaying_elements(o.decay_rule), " of ",
          layout.total() - layout.state_elements(), " parameters, ", layout.decaying_tensors(o.decay_rule), " of ",
          tensors, " tensors", o.weight_decay > 0.0 ? " decay" : ")");
  if (o.grad_clip > 0.0)
    out += str("; gradients clipped to global norm ", o.grad_clip,
               " (each PS applies a step once all its blocks are in and the PS have shared the norm)");
  return out;
}

void print_setup(const Job& job, Reporter& out) {
  const TrainConfig& c = job.config;
  const int w = job.topo.num_workers();
  out.line(str("drtrain ", DRT_VERSION_STRING, ": ", job.topo.describe()));
  out.line(str("model ", job.spec.describe()));
  const nn::TensorShape in = job.spec.input();
  const std::string where = c.dataset == "synthetic" ? std::string("synthetic")
                            : c.dataset == "hdf5"    ? c.data_file + (c.test_file.empty() ? "" : " + " + c.test_file)
                                                     : c.data_dir;
  const std::string tested = c.eval ? str(job.test_count, " test") : std::string("no test (--eval false)");
  if (in.sequence)
    out.line(str("data ", where, ": token windows of --context ", in.positions(), " (each with its ", in.positions(),
                 " next-token targets): ", job.train_count, " train, ", tested, "; vocabulary ", job.spec.classes(),
                 "; ", fixed(job.spec.training_flops_per_token() / 1e6, 2),
                 " MFLOP of training per token (6 x parameters + attention)"));
  else
    out.line(str("data ", where, ": ", job.train_count, " train, ", tested, " images of ", in.c, "x", in.h, "x", in.w,
                 ", ", job.spec.classes(), " classes; pixels / 255, normalize ", c.normalize, ", augment ", c.augment));
  out.line(str("batch ", c.batch_size, " = ", w, " worker(s) x ", c.towers, " tower(s) x ",
               c.batch_size / (w * c.towers), "; ", job.steps_per_epoch, " steps per epoch, ", job.total_steps,
               " steps in all; BLAS threads per worker ", job.blas_threads));
  out.line(str("device ", job.devices.describe(), " (the chief's; --device ", c.device, ")"));
  out.line(str("optimizer ", job.optimizer.describe()));
  out.line(describe_decay_and_clipping(job));
  out.line(str("exchange ", c.exchange.describe(job.topo.num_nodes())));
  if (c.exchange.mode.relaxed())
    out.line(str("sync-mode ", ps::to_string(c.exchange.mode),
                 ": the chief reports its own steps and evaluates alone; a stop signal stops ",
                 c.exchange.mode.per_gradient()
                     ? "each worker at its next step boundary (a cut: each resumes at its own step)"
                     : "every worker at the step after the furthest one (PS 0 decides it)"));
  if (c.parse_straggler().worker >= 0)
    out.line(str("straggler (an experiment): worker ", c.parse_straggler().worker, "'s steps are slowed ",
                 c.parse_straggler().factor, "x"));
  if (!comm::rma_component_note().empty()) out.line(comm::rma_component_note());
  std::string plan = job.plan.describe(job.spec.layout());
  if (!plan.empty() && plan.back() == '\n') plan.pop_back();
  out.line(plan);
  out.line(ps::describe_ps_memory(job.plan, w, c.exchange, job.optimizer));
  if (!c.checkpoint_dir.empty()) {
    const std::size_t largest = job.plan.largest_shard();
    const double snapshot = 4.0 * static_cast<double>(largest) * (1 + job.optimizer.num_slots());
    out.line(str("checkpoints to ", c.checkpoint_dir,
                 c.checkpoint_async
                     ? str(": written in the background from a snapshot of each shard (up to ", human_bytes(snapshot),
                           " more per PS; --checkpoint-async false: none, training waits for each save)")
                     : std::string(": written by the PS while training waits (--checkpoint-async false)"),
                 c.checkpoint_start ? "; a run from scratch saves its initial state first (--checkpoint-start)" : ""));
  }
}

}  // namespace

void finish_together(const Job& job) {
  comm::Liveness::note_finished();
  try {
    comm::sleepy_barrier(job.topo.world(), job.config.exchange.hang_timeout_s, job.config.exchange.max_nap_us,
                         "every rank to finish its part of the run");
  } catch (const HangError&) {
    // Name who has not finished (their word in the liveness window), not just "a peer".
    std::vector<std::string> names;
    for (int r : comm::Liveness::unfinished()) names.push_back(job.topo.rank_name(r));
    throw HangError(str(rank_tag(), ": ", job.topo.my_name(), " finished its part of the run and waited ",
                        job.config.exchange.hang_timeout_s, " s without progress from any peer for ",
                        names.empty() ? std::string("the others") : join(names, ", "),
                        "; dead, stopped or stuck (raise --hang-timeout if only slow)"));
  }
}

namespace {

RankReport run_ps(const Job& job, ResumePoint& resume, StopVote& vote) {
  ps::ParameterServer server(job.topo, job.plan, job.config.exchange, job.optimizer, resume.step, resume.updates);
  server.set_state_ranges(job.spec.layout().state_ranges());
  server.set_no_decay_ranges(job.spec.layout().no_decay_ranges(job.optimizer.decay_rule));
  load_into(resume, server);
  // ssp/async save at cuts (docs/RELAXED_MODES.md, "Cuts"), and resume from one with each worker
  // at its own step.
  const bool cuts = job.config.exchange.mode.per_gradient();
  if (cuts && !resume.worker_steps.empty()) {
    std::vector<std::int64_t> first_pushes;
    for (std::int64_t s : resume.worker_steps) first_pushes.push_back(s - resume.step);
    server.resume_cut(std::move(first_pushes), resume.gradients);
  }
  Checkpointer checkpoints(job, server, resume);
  if (job.timeline->enabled())
    server.set_span_sink(
        [&job](const char* name, double a, double b, std::int64_t step) { job.timeline->span(name, a, b, step); });
  server.start();
  checkpoints.save_start();  // --checkpoint-start: the initial state, before any update
  const double wall0 = now_seconds(), cpu0 = process_cpu_seconds();
  ps::ParameterServer::Hooks hooks;
  hooks.after_step = [&](std::int64_t step) {
    comm::Watchdog::beat("PS step");
    comm::Liveness::note_progress();
    if (test_fault(str("stop:", job.topo.world_rank(), ":", step))) raise(SIGSTOP);  // hang watchdog tests
    if (test_fault(str("signal:", job.topo.world_rank(), ":", step - 1)))
      signal_self_and_wait(SIGTERM);                               // stop signal tests
    if (!job.config.exchange.mode.relaxed()) vote.cast(step - 1);  // `step` steps are done: the vote on the last one
    if (!cuts) checkpoints.after_step(step);
  };
  if (cuts) {
    hooks.checkpoint_due = [&](std::int64_t step) { return checkpoints.due(step); };
    hooks.at_cut = [&](const ps::Cut& cut) { checkpoints.save_cut(cut); };
  }
  server.serve(hooks);
  // Also when stopped early: what a requeued job resumes from.
  ps::Cut end;
  if (cuts) end = server.final_cut();
  checkpoints.finish(server.global_step(), cuts ? &end : nullptr);
  finish_together(job);
  RankReport r;
  r.steps = server.global_step();
  // Also when the signal came after the last vote that counted. The relaxed modes cast no
  // votes: their stop went through PS 0's words.
  const int vote_signal = vote.finish();
  const int signal = job.config.exchange.mode.relaxed() ? server.relaxed_stop_signal() : vote_signal;
  if (cuts) r.stop_signal = end.slowest() < job.total_steps ? end.stop_signal : 0;
  else r.stop_signal = r.steps < job.total_steps ? signal : 0;
  r.wall_s = now_seconds() - wall0;
  r.cpu_s = process_cpu_seconds() - cpu0;
  r.busy_s = server.stats().apply_s + server.stats().publish_s;
  r.dropped_steps = server.stats().dropped_steps;
  r.staleness_max = server.stats().staleness_max;
  r.staleness_sum = server.stats().staleness_sum;
  r.staleness_count = server.stats().staleness_count;
  r.lookahead = server.lookahead_updates();
  return r;
}

// Every rank's report to the chief, which prints how busy the PS were and the summary.
void final_report(const Job& job, const RankReport& mine, double wall_s, Reporter& out) {
  const comm::Topology& topo = job.topo;
  const int chief = topo.worker_world_ranks().front();
  RankReport me = mine;
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) == 0) me.peak_rss_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;  // KiB
  std::vector<RankReport> all(static_cast<std::size_t>(topo.world_size()));
  comm::gather(topo.world(), &me, sizeof me, all.data(), chief, job.config.exchange.hang_timeout_s,
               job.config.exchange.max_nap_us, "the final report of every rank");
  if (!out.active()) return;
  double ps_cpu_fraction = 0.0;
  for (int p = 0; p < topo.num_ps(); ++p) {
    const RankReport& r = all[static_cast<std::size_t>(topo.ps_world_ranks()[static_cast<std::size_t>(p)])];
    const double fraction = r.wall_s > 0 ? r.cpu_s / r.wall_s : 0.0;
    ps_cpu_fraction = std::max(ps_cpu_fraction, fraction);
    out.line(str(topo.ps_name(p), ": CPU ", r.cpu_s, " s of ", r.wall_s, " s wall (", 100.0 * fraction,
                 "%), applying and publishing ", r.busy_s, " s"));
  }
  const RankReport& c = all[static_cast<std::size_t>(chief)];
  double worker_rss = 0.0, ps_rss = 0.0, data_wait = 0.0;
  for (int r = 0; r < topo.world_size(); ++r) {
    const RankReport& x = all[static_cast<std::size_t>(r)];
    const bool is_ps =
        std::find(topo.ps_world_ranks().begin(), topo.ps_world_ranks().end(), r) != topo.ps_world_ranks().end();
    (is_ps ? ps_rss : worker_rss) = std::max(is_ps ? ps_rss : worker_rss, x.peak_rss_mib);
    if (!is_ps && x.wall_s > 0) data_wait = std::max(data_wait, x.data_wait_s / x.wall_s);
  }
  const ps::SyncMode mode = job.config.exchange.mode;
  // Relaxed modes: every worker's samples over the longest worker's time (the chief's own time
  // can be far shorter: a chief resumed at or past --max-steps trains nothing).
  double dropped = 0.0, staleness_sum = 0.0, samples = 0.0, worker_wall = 0.0;
  double lookahead = 0.0;
  std::int64_t staleness_max = 0, staleness_count = 0, max_lead = 0;
  std::string skipped;
  for (int p = 0; p < topo.num_ps(); ++p) {
    const RankReport& r = all[static_cast<std::size_t>(topo.ps_world_ranks()[static_cast<std::size_t>(p)])];
    dropped = std::max(dropped, r.dropped_steps);  // every PS drops its blocks of the same late pushes, or near
    staleness_max = std::max(staleness_max, r.staleness_max);
    staleness_sum += r.staleness_sum;
    staleness_count += r.staleness_count;
    lookahead = std::max(lookahead, r.lookahead);
  }
  std::string worker_steps;  // ssp/async: where each worker ended (a cut when stopped)
  for (int w = 0; w < topo.num_workers(); ++w) {
    const RankReport& r = all[static_cast<std::size_t>(topo.worker_world_ranks()[static_cast<std::size_t>(w)])];
    max_lead = std::max(max_lead, r.max_lead);
    samples += static_cast<double>(r.samples_computed);
    worker_wall = std::max(worker_wall, r.wall_s);
    skipped += str(w ? ", " : "", r.skipped_steps);
    worker_steps += str(w ? "," : "", r.steps);
  }
  if (mode.per_gradient() && mine.stop_signal)
    out.line(str("stopped by ", signal_name(mine.stop_signal), " at a cut: the workers stopped before steps ",
                 worker_steps, " of ", job.total_steps,
                 job.config.checkpoint_dir.empty()
                     ? std::string(" (no --checkpoint-dir, so nothing is saved)")
                     : std::string("; the PS saved that state, and --resume continues each worker there")));
  const double staleness_mean = staleness_count ? staleness_sum / static_cast<double>(staleness_count) : 0.0;
  if (mode.kind == ps::SyncKind::kBackup)
    out.line(str("sync-mode ", ps::to_string(mode), ": the PS dropped ", fixed(dropped, 1),
                 " steps' worth of late gradients; steps each worker skipped to catch up: ", skipped));
  if (mode.per_gradient())
    out.line(str("sync-mode ", ps::to_string(mode), ": staleness of the applied gradients (updates of a block between ",
                 "a worker's pull and the apply): mean ", fixed(staleness_mean, 2), ", max ", staleness_max,
                 mode.kind == ps::SyncKind::kSsp
                     ? str("; most steps a worker led the slowest: ", max_lead, " (bound ", mode.bound, ")")
                     : std::string(),
                 lookahead > 0.0 ? str("; workers computed from parameters looked ahead ", fixed(lookahead, 2),
                                       " updates along the momentum")
                                 : std::string("; no look-ahead"),
                 " (--lookahead ", ps::to_string(job.config.exchange.lookahead), ")"));
  out.line(str("peak resident memory: ", fixed(worker_rss, 1), " MiB per worker, ", fixed(ps_rss, 1),
               " MiB per PS (the largest); workers waited for data ", fixed(100.0 * data_wait, 2),
               "% of the time (the most)"));
  JsonLine summary;
  // What was not measured is null (JsonLine writes NaN so), not 0: a run with --eval false, or
  // one stopped before its first evaluation, has no test accuracy.
  const double unmeasured = std::numeric_limits<double>::quiet_NaN();
  const double test_accuracy = c.test_samples > 0 ? c.test_accuracy : unmeasured;
  const double test_loss = c.test_samples > 0 ? c.test_loss : unmeasured;
  const bool lm = job.spec.wiring().back().output.sequence;
  const double tokens = job.spec.wiring().back().output.positions();
  summary.add("summary", true)
      .add("model", job.config.model)
      .add("dataset", job.config.dataset)
      .add("test_accuracy", test_accuracy)
      .add("test_loss", test_loss)
      .add("samples_per_s", mode.relaxed() && worker_wall > 0 ? samples / worker_wall : c.samples_per_s)
      .add("wall_s", wall_s)
      .add("steps", c.steps)
      .add("ranks", topo.world_size())
      .add("ps", topo.num_ps())
      .add("workers", topo.num_workers())
      .add("towers", job.config.towers)
      .add("batch_size", job.config.batch_size)
      .add("ps_cpu_fraction", ps_cpu_fraction)
      .add("worker_peak_rss_mib", worker_rss)
      .add("ps_peak_rss_mib", ps_rss)
      .add("data_wait_fraction", data_wait)
      .add("sync_mode", ps::to_string(mode));
  if (lm) {
    const double samples_per_s = mode.relaxed() && worker_wall > 0 ? samples / worker_wall : c.samples_per_s;
    summary.add("context", static_cast<std::int64_t>(tokens))
        .add("tokens_per_s", samples_per_s * tokens)
        .add("model_tflops", samples_per_s * tokens * job.spec.training_flops_per_token() / 1e12)
        .add("test_perplexity", std::exp(test_loss));
    // Every worker's tokens over every tower's peak (samples_per_s is the job's, in every mode).
    const double peak = job.config.peak_tflops * 1e12 * job.config.towers * topo.num_workers();
    summary.add_if(peak > 0, "mfu",
                   peak > 0 ? samples_per_s * tokens * job.spec.training_flops_per_token() / peak : 0.0);
  }
  if (mode.kind == ps::SyncKind::kBackup) summary.add("dropped_steps", dropped).add("skipped_steps", skipped);
  if (mode.per_gradient())
    summary.add("staleness_mean", staleness_mean).add("staleness_max", staleness_max).add("lookahead", lookahead);
  if (mode.kind == ps::SyncKind::kSsp) summary.add("max_lead", max_lead);
  if (mode.per_gradient()) summary.add("worker_steps", worker_steps);
  if (mine.stop_signal) summary.add("stopped_by", signal_name(mine.stop_signal));
  out.summary(summary);
}

}  // namespace

int run_training(const TrainConfig& config, TrainOutputs* outputs) {
  const double start = now_seconds();
  // Before anything collective: a stop signal from here on is recorded, not fatal.
  install_stop_signals(parse_stop_signals(config.stop_signals));
  const comm::Topology topo =
      comm::Topology::create(config.layout.num_ps, config.layout.placement, config.layout.expect_ranks);
  comm::require_same(topo.world(), comm::fingerprint(config.to_ini()), "the configuration");
  WorkerData data = load_data(config, topo);
  Job job = make_job(config, topo, data);
  check_memory(job);
  Timeline timeline(!config.timeline.empty(), config.timeline_max_spans);
  job.timeline = &timeline;
  std::optional<Reporter> reporter;
  std::optional<std::string> error;
  try {
    reporter.emplace(topo.is_chief(), config.metrics, !config.resume.empty());
  } catch (const Error& e) {
    error = e.what();
  }
  comm::raise_if_any(topo.world(), error);
  job.checkpoint_lock = check_outputs(job);
  ResumePoint resume = prepare_resume(job);
  backend::set_blas_threads(topo.is_worker() ? job.blas_threads : 1);
  print_setup(job, *reporter);
  if (!resume.file.empty() && resume.step >= job.total_steps)
    reporter->line(str("resuming from ", resume.file, " after ", resume.updates,
                       " updates: nothing left to train (it is ", resume.step,
                       " steps into the data; this run ends at step ", job.total_steps,
                       "; raise --epochs or --max-steps to train on)"));
  else if (!resume.file.empty())
    reporter->line(str("resuming from ", resume.file, " after ", resume.updates, " updates: step ", resume.step + 1,
                       " of ", job.total_steps, " (epoch ", resume.epoch + 1, ", ", resume.step_in_epoch,
                       " steps into it", resume.worker_steps.empty() ? "" : "; the slowest worker's: a cut", ")"));
  reporter->line(resume.identity_note);
  const std::int64_t segment = record_segment_start(job, resume, *reporter);
  // The cooperative waits give up after --hang-timeout without progress of any peer (a rank busy
  // with a long checkpoint or evaluation renews them: comm/liveness.hpp; also the checkpoint
  // writer's collectives), and a survey of the PS of a few seconds (ps/passive_base.hpp); the
  // watchdog ends a rank stuck inside an MPI call later (their messages name the culprit; its is
  // the fallback).
  std::vector<std::string> places;
  places.reserve(static_cast<std::size_t>(topo.world_size()));
  for (int r = 0; r < topo.world_size(); ++r) places.push_back(topo.rank_place(r));
  comm::Watchdog::name_ranks(std::move(places));  // "the call waits on world rank 3 on node2"
  comm::Watchdog::arm(config.exchange.hang_timeout_s * 1.2 + 5.0);
  comm::set_patience(config.exchange.hang_timeout_s, config.exchange.max_nap_us);
  comm::Liveness liveness(topo.world(), std::clamp(config.exchange.hang_timeout_s / 8.0, 0.05, 1.0));
  StopVote vote(topo.world(), config.exchange.hang_timeout_s, config.exchange.max_nap_us);
  RankReport mine = topo.is_ps()
                        ? run_ps(job, resume, vote)
                        : run_worker(job, data, *reporter, resume, vote, outputs ? &outputs->final_params : nullptr);
  // Every rank ends alike: under ssp/async a worker may have finished its steps before a stop
  // ended the others' (at a cut), and the job was still stopped (exit 75, --resume continues it).
  comm::allreduce_in_place(topo.world(), &mine.stop_signal, 1, MPI_INT, MPI_MAX, config.exchange.hang_timeout_s,
                           config.exchange.max_nap_us, "whether a stop signal ended the run");
  if (outputs) {
    outputs->test_accuracy = mine.test_accuracy;
    outputs->test_loss = mine.test_loss;
    outputs->steps = mine.steps;
    outputs->stop_signal = mine.stop_signal;
    outputs->chief = topo.is_chief();
  }
  if (timeline.enabled()) {
    const std::string trace = timeline_path(config.timeline, segment);
    const std::uint64_t dropped =
        timeline.write(topo, trace, config.exchange.hang_timeout_s, config.exchange.max_nap_us);
    reporter->line(str("timeline: ", trace, " (open in chrome://tracing or ui.perfetto.dev)",
                       segment > 0 ? str("; run segment ", segment, ", the earlier segments' traces are kept") : "",
                       dropped ? str("; ", dropped, " spans beyond --timeline-max-spans ", config.timeline_max_spans,
                                     " per rank were dropped")
                               : std::string()));
  }
  final_report(job, mine, now_seconds() - start, *reporter);
  comm::Watchdog::disarm();
  return mine.stop_signal ? kStoppedExitStatus : 0;
}

}  // namespace drt::train
