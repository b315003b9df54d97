// Checkpoints under real mpiexec: a round trip is bitwise; a run interrupted at step k and
// resumed equals an uninterrupted one bitwise (deterministic mode); a checkpoint written by one
// layout (P, W, T) is read by others with parameters and optimizer state bitwise intact, and
// training goes on.
// Run as: mpiexec -n 3 test_checkpoint --num-ps 1   and   mpiexec -n 4 test_checkpoint --num-ps 2
#include <gtest/gtest.h>
#include <mpi.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "drtrain/comm/comm.hpp"
#include "drtrain/comm/progress.hpp"
#include "drtrain/core/param_layout.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/io/checkpoint.hpp"
#include "drtrain/io/checkpoint_store.hpp"
#include "drtrain/io/checkpoint_writer.hpp"
#include "drtrain/nn/model_spec.hpp"
#include "drtrain/train/trainer.hpp"
#include "support/mpi_test.hpp"

namespace drt::train {
namespace {

int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// A fresh directory, the same on every rank.
std::string shared_dir(const std::string& name) {
  char path[256] = {0};
  if (world_rank() == 0) {
    std::string pattern = ::testing::TempDir() + "drt_ckpt_XXXXXX";
    std::strncpy(path, mkdtemp(pattern.data()), sizeof path - 1);
  }
  MPI_Bcast(path, sizeof path, MPI_CHAR, 0, MPI_COMM_WORLD);
  return std::string(path) + "/" + name;
}

TrainConfig base(int num_ps) {
  TrainConfig c;
  c.model = "mlp:784-32-16-10";
  c.dataset = "synthetic";
  c.synthetic_train = 600;
  c.synthetic_test = 40;
  c.batch_size = 12;  // divisible by W x T of every layout below
  c.layout.num_ps = num_ps;
  c.optimizer.kind = optim::OptimizerKind::kAdam;  // two optimizer slots
  c.optimizer.lr = 1e-3;
  c.exchange.deterministic = true;
  c.seed = 3;
  c.log_every = 1000;
  c.eval = false;
  return c;
}

std::vector<float> train(const TrainConfig& c) {
  TrainOutputs out;
  run_training(c, &out);
  return out.final_params;  // empty on PS ranks
}

// Every dataset of two checkpoint files, compared bitwise; "" when equal.
std::string compare_files(const std::string& a, const std::string& b) {
  const io::CheckpointFile fa(a), fb(b);
  if (fa.datasets() != fb.datasets()) return "the files hold different datasets";
  for (const std::string& d : fa.datasets()) {
    const auto x = fa.read(d), y = fb.read(d);
    if (x.shape != y.shape || std::memcmp(x.values.data(), y.values.data(), x.values.size() * 4) != 0)
      return str(d, " differs between ", a, " and ", b);
  }
  return "";
}

int num_ps_arg() { return testing::int_argument("--num-ps", 1); }

// A PS writing its part of a checkpoint gives MPI a turn of progress after every MiB
// (comm/progress.hpp): the workers push the next step towards it meanwhile, and on RMA paths that
// need the target in MPI (osc/pt2pt, osc/ucx over TCP, MPICH) their flushes would wait for the
// whole write. Every rank acts as a PS of a 12 MiB tensor here.
TEST(Checkpoint, WriteLetsMpiProgress) {
  ParamLayout layout;
  layout.add("w", {3, 1 << 20});
  const auto n = static_cast<std::size_t>(world_size()), r = static_cast<std::size_t>(world_rank());
  const std::size_t begin = layout.total() * r / n, end = layout.total() * (r + 1) / n;
  std::vector<float> params(end - begin, 0.5f);
  io::ShardView view = io::ShardView::range(begin, end, params.data());
  io::CheckpointMeta meta;
  meta.model = "test";
  for (std::size_t k = 0; k <= n; ++k) meta.shard_boundaries.push_back(layout.total() * k / n);
  const std::size_t before = comm::progress_calls();
  io::write_checkpoint(comm::Comm::world(), shared_dir("progress.h5"), meta, layout, {}, view, {});
  const std::size_t turns = comm::progress_calls() - before, mib = (end - begin) * sizeof(float) >> 20;
  ASSERT_TRUE(testing::all_ranks(turns >= mib, str("rank ", r, ": ", turns, " progress turns while writing ", mib,
                                                   " MiB, expected at least one per MiB")));
}

TEST(Checkpoint, RoundTripIsBitwise) {
  TrainConfig c = base(num_ps_arg());
  c.max_steps = 7;
  c.checkpoint_dir = shared_dir("roundtrip");
  const std::vector<float> params = train(c);
  std::string detail;
  if (!params.empty()) {
    const io::CheckpointFile file(io::checkpoint_path(c.checkpoint_dir, 7));
    file.verify();
    std::vector<float> stored;
    for (const std::string& d : file.datasets())
      if (d.rfind("/params/", 0) == 0) {
        const auto t = file.read(d);
        stored.insert(stored.end(), t.values.begin(), t.values.end());
      }
    const auto& m = file.meta();
    if (stored.size() != params.size() || std::memcmp(stored.data(), params.data(), params.size() * 4) != 0)
      detail = "the stored parameters differ from the workers' final parameters";
    else if (m.step != 7 || m.model != c.model || m.num_ps != c.layout.num_ps ||
             m.num_workers != world_size() - m.num_ps || m.global_batch != 12 || m.seed != 3 ||
             file.slot_names() != std::vector<std::string>{"exp_avg", "exp_avg_sq"})
      detail = "the metadata does not describe the run";
  }
  ASSERT_TRUE(testing::all_ranks(detail.empty(), detail));
}

TEST(Checkpoint, ResumeEqualsUninterruptedBitwise) {
  const std::int64_t k = 6;
  TrainConfig straight = base(num_ps_arg());
  straight.max_steps = 2 * k;
  straight.checkpoint_dir = shared_dir("straight");
  const std::vector<float> a = train(straight);

  TrainConfig first = base(num_ps_arg());
  first.max_steps = k;
  first.checkpoint_dir = shared_dir("interrupted");
  train(first);
  TrainConfig second = first;
  second.max_steps = 2 * k;
  second.resume = "latest";
  const std::vector<float> b = train(second);

  std::string detail;
  if (!a.empty()) {
    if (a.size() != b.size() || std::memcmp(a.data(), b.data(), a.size() * 4) != 0)
      detail = "parameters after k + resume + k differ from 2k uninterrupted steps";
    else
      detail = compare_files(io::checkpoint_path(straight.checkpoint_dir, 2 * k),
                             io::checkpoint_path(first.checkpoint_dir, 2 * k));  // optimizer state too
  }
  ASSERT_TRUE(testing::all_ranks(detail.empty(), detail));
}

// A checkpoint written mid-epoch at one batch size, resumed at another (bigger, then smaller):
// the new run starts at the same sample position (EpochPlan keeps the sample order independent
// of the batch, tested in unit.data), trains exactly the samples left, and its checkpoints count
// the optimizer updates of both runs.
TEST(Checkpoint, ResumeAtAnotherBatchSizeTrainsTheRemainingSamples) {
  struct Case {
    int first_batch, first_steps, second_batch;
  };
  for (const Case& k : {Case{12, 10, 24}, Case{24, 10, 12}}) {
    TrainConfig first = base(num_ps_arg());
    first.batch_size = k.first_batch;
    first.epochs = 2;
    first.max_steps = k.first_steps;
    first.checkpoint_dir = shared_dir(str("batch_", k.first_batch, "_to_", k.second_batch));
    train(first);
    TrainConfig second = first;
    second.batch_size = k.second_batch;
    second.max_steps = 0;
    second.resume = "latest";
    const std::vector<float> params = train(second);
    // 600 samples, 2 epochs: the second run trains (1200 - first_batch * first_steps) samples.
    const std::int64_t seen = std::int64_t{k.first_batch} * k.first_steps;
    const std::int64_t second_steps = (1200 - seen) / k.second_batch;
    const std::int64_t updates = k.first_steps + second_steps;
    std::string detail;
    if (world_rank() == 0) {
      const auto files = io::list_checkpoints(first.checkpoint_dir);
      if (files.empty() || files.front() != io::checkpoint_path(first.checkpoint_dir, updates)) {
        detail = str("expected the last checkpoint after ", updates, " updates, found ",
                     files.empty() ? std::string("none") : files.front());
      } else {
        const io::CheckpointFile file(files.front());
        const auto& m = file.meta();
        if (m.step != updates || m.epoch != 2 || m.step_in_epoch != 0 || m.samples_seen != 1200 ||
            m.global_batch != k.second_batch)
          detail = str("metadata after the resumed run: step ", m.step, " epoch ", m.epoch, " step_in_epoch ",
                       m.step_in_epoch, " samples_seen ", m.samples_seen, " global_batch ", m.global_batch);
      }
    }
    bool finite = true;
    for (float v : params) finite = finite && std::isfinite(v);
    if (!finite) detail = "non-finite parameters after the resumed run";
    ASSERT_TRUE(testing::all_ranks(detail.empty(), detail)) << k.first_batch << " -> " << k.second_batch;
  }
}

// A position that is not a whole number of the new batches is refused on every rank, naming a fix.
TEST(Checkpoint, ResumeAtABatchThatDoesNotDivideThePositionIsRefused) {
  TrainConfig first = base(num_ps_arg());
  first.max_steps = 3;  // 36 samples into epoch 1
  first.checkpoint_dir = shared_dir("indivisible");
  train(first);
  TrainConfig second = first;
  second.batch_size = 24;
  second.max_steps = 0;
  second.resume = "latest";
  std::string message;
  try {
    train(second);
  } catch (const ConfigError& e) {
    message = e.what();
  }
  const bool ok = message.find("36 samples into epoch 1") != std::string::npos &&
                  message.find("--batch-size that divides 36") != std::string::npos;
  ASSERT_TRUE(testing::all_ranks(ok, "expected a ConfigError about the position, got: '" + message + "'"));
}

TEST(Checkpoint, ReshardsAcrossLayouts) {
  if (world_size() != 4) GTEST_SKIP() << "needs 4 ranks";  // the same verdict on every rank
  TrainConfig writer = base(2);                            // (P, W, T) = (2, 2, 1)
  writer.max_steps = 5;
  writer.checkpoint_dir = shared_dir("written");
  train(writer);
  const std::string saved = io::checkpoint_path(writer.checkpoint_dir, 5);
  struct Layout {
    int ps, towers;
    bool striped;  // --shard-plan striped, in spans of 1024 elements (4 KiB blocks): each PS reads
                   // and writes many pieces of every tensor
  };
  // (1, 3, 2), (3, 1, 1) and (3, 1, 1) striped
  for (const Layout& l : {Layout{1, 2, false}, Layout{3, 1, false}, Layout{3, 1, true}}) {
    // Load with the new layout and save again at once (no step): the files must be equal.
    TrainConfig reader = base(l.ps);
    reader.towers = l.towers;
    if (l.striped) {
      reader.exchange.plan = ps::PlanKind::kStriped;
      reader.exchange.chunk_bytes = 4096;
    }
    reader.resume = saved;
    reader.max_steps = 5;
    reader.checkpoint_dir = shared_dir(str("resharded_", l.ps, "_", l.towers, l.striped ? "_striped" : ""));
    train(reader);
    const std::string detail =
        world_rank() == 0 ? compare_files(saved, io::checkpoint_path(reader.checkpoint_dir, 5)) : "";
    ASSERT_TRUE(testing::all_ranks(detail.empty(), detail))
        << "layout P=" << l.ps << " T=" << l.towers << (l.striped ? " striped" : "");
    // And training continues from there.
    reader.max_steps = 8;
    const std::vector<float> after = train(reader);
    bool finite = true;
    for (float v : after) finite = finite && std::isfinite(v);
    const bool written = world_rank() != 0 || std::filesystem::exists(io::checkpoint_path(reader.checkpoint_dir, 8));
    ASSERT_TRUE(testing::all_ranks(finite && written, "training after resharding failed"));
  }
}

}  // namespace
}  // namespace drt::train
