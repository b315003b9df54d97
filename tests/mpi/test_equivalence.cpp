// The core promise: W workers x T towers at per-tower batch b compute the same training as one
// process at batch W*T*b on the same samples in the same order. drtrain (1 PS + W workers, real
// exchange, CPU towers) runs 20 steps with momentum SGD and with Adam; every worker compares its
// final parameters with a single-process float32 reference built from the library's network and
// optimizer. The last step holds a remainder smaller than the W*T parts (some parts are
// empty), so the weighting of uneven parts is checked too.
// Run as: mpiexec -n 1+W test_equivalence
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "drtrain/backend/backend.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/data/batch_loader.hpp"
#include "drtrain/data/epoch_plan.hpp"
#include "drtrain/data/memory_source.hpp"
#include "drtrain/nn/model_graph.hpp"
#include "drtrain/nn/network.hpp"
#include "drtrain/train/trainer.hpp"
#include "support/mpi_test.hpp"

namespace drt::train {
namespace {

constexpr int kPerTowerBatch = 4;
constexpr int kSteps = 20;

int workers() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size - 1;
}

TrainConfig make_config(int towers, const optim::OptimizerConfig& optimizer) {
  TrainConfig c;
  c.model = "mlp:784-32-16-10";
  c.dataset = "synthetic";
  c.batch_size = workers() * towers * kPerTowerBatch;
  // 19 full batches and a remainder of W*T - 1 samples (3 when W*T = 1): some parts of the last
  // batch get one sample, at least one gets none.
  const int parts = workers() * towers;
  c.synthetic_train = (kSteps - 1) * c.batch_size + (parts > 1 ? parts - 1 : 3);
  c.synthetic_test = 40;
  c.towers = towers;
  c.optimizer = optimizer;
  c.seed = 7;
  c.log_every = 1000;
  return c;
}

// One process, batch B: the same samples per step, gradients of the batch mean.
std::vector<float> single_process(const TrainConfig& c) {
  const nn::ModelSpec spec = nn::ModelSpec::parse(c.model);
  const std::size_t n = spec.layout().total();
  const auto train = data::make_memory_source(data::make_synthetic(c.synthetic_train, 28, 28, 10, c.seed));
  std::unique_ptr<backend::Backend> cpu = backend::make_cpu_backend();
  std::vector<float> params(n), grads(n);
  spec.init_params(c.seed, params.data());
  nn::Network net(spec, *cpu, c.batch_size);
  net.bind(params.data(), grads.data());
  optim::OptimizerConfig oc = c.optimizer;
  oc.schedule.total_steps = kSteps;
  auto optimizer = optim::make_optimizer(oc, n);
  const data::EpochPlan plan(c.synthetic_train, c.batch_size, 1, 1, c.seed, 0);
  EXPECT_EQ(plan.steps(), kSteps);
  for (int s = 0; s < plan.steps(); ++s) {
    const data::TowerBatch b = data::read_tower_batch(*train, plan.global_samples(s));
    net.train(b.images.data(), b.labels.data(), b.count, 1.0f / static_cast<float>(b.count));
    optimizer->begin_step(s);
    optimizer->update(0, n, params.data(), grads.data(), 1.0f);
  }
  return params;
}

struct Difference {
  double worst_tensor = 0.0;   // max over tensors of ||a - b|| / ||b||
  double worst_element = 0.0;  // max over elements of |a - b| / max(|b|, rms of its tensor)
  bool bitwise = false;
};

Difference compare(const nn::ModelSpec& spec, const std::vector<float>& got, const std::vector<float>& want) {
  Difference d;
  d.bitwise = got.size() == want.size() && std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0;
  for (const TensorSpec& t : spec.layout().tensors()) {
    double diff2 = 0, ref2 = 0;
    for (std::size_t i = t.offset; i < t.offset + t.numel; ++i) {
      diff2 += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
      ref2 += double(want[i]) * want[i];
    }
    const double rms = std::sqrt(ref2 / static_cast<double>(t.numel));
    d.worst_tensor = std::max(d.worst_tensor, std::sqrt(diff2 / std::max(ref2, 1e-300)));
    for (std::size_t i = t.offset; i < t.offset + t.numel; ++i)
      d.worst_element =
          std::max(d.worst_element, std::abs(double(got[i]) - want[i]) / std::max<double>(std::abs(want[i]), rms));
  }
  return d;
}

optim::OptimizerConfig momentum_sgd() {
  optim::OptimizerConfig o;
  o.lr = 0.05;
  o.momentum = 0.9;
  return o;
}

optim::OptimizerConfig adam() {
  optim::OptimizerConfig o;
  o.kind = optim::OptimizerKind::kAdam;
  o.lr = 1e-3;
  return o;
}

class Equivalence : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(Equivalence, DistributedEqualsOneProcessAtTheGlobalBatch) {
  const int towers = std::get<0>(GetParam());
  const bool use_adam = std::get<1>(GetParam());
  const TrainConfig c = make_config(towers, use_adam ? adam() : momentum_sgd());
  TrainOutputs out;
  run_training(c, &out);
  std::string detail;
  bool ok = true;
  if (!out.final_params.empty()) {  // workers
    const nn::ModelSpec spec = nn::ModelSpec::parse(c.model);
    const Difference d = compare(spec, out.final_params, single_process(c));
    detail = str("W=", workers(), " T=", towers, use_adam ? " adam" : " momentum", ": worst tensor relative error ",
                 d.worst_tensor, ", worst element ", d.worst_element, d.bitwise ? " (bitwise equal)" : "");
    std::printf("%s\n", detail.c_str());
    // Within 1e-5 relative: per tensor norm-wise, and per element relative to max(|reference|,
    // rms of its tensor), so that elements near zero are judged at their tensor's scale. Measured
    // here: at most 3e-7 per tensor and 1.5e-6 per element.
    ok = d.worst_tensor <= 1e-5 && d.worst_element <= 1e-5;
    // One worker with one tower sums in the same order as the single process: bitwise.
    if (workers() == 1 && towers == 1) ok = ok && d.bitwise;
  }
  ASSERT_TRUE(testing::all_ranks(ok, detail));
}

// --overlap (the default on CPU towers, used by the test above) against the sequential step:
// the same sums in the same order, so bitwise the same parameters, with many small buckets
// (1 KiB: each layer its own bucket, the small last one merged with the one before), with one
// bucket (4 MiB), and with the range-wise tower sums of T = 2.
TEST(Overlap, EqualsTheSequentialStepBitwise) {
  for (int towers : {1, 2}) {
    TrainConfig c = make_config(towers, momentum_sgd());
    c.exchange.deterministic = true;
    c.max_steps = kSteps - 1;  // not the epoch's end: the final evaluation comes after the loop
    TrainOutputs sequential;
    run_training(c, &sequential);
    for (std::size_t kib : {1, 4096}) {  // buckets of about a layer each, and one bucket
      c.bucket_kib = kib;
      c.overlap = true;
      TrainOutputs overlapped;
      run_training(c, &overlapped);
      c.overlap = false;
      const bool same = overlapped.final_params == sequential.final_params;
      ASSERT_TRUE(testing::all_ranks(same, str("T=", towers, ", buckets of ", kib,
                                               " KiB: --overlap true and false end with different parameters")));
      // The run does not end on an evaluation step (19 of the epoch's 20 steps): the final
      // evaluation must see the last update, after the pipeline is gone (on GPU towers it used
      // to evaluate with the parameters one update old).
      const bool same_eval =
          overlapped.test_loss == sequential.test_loss && overlapped.test_accuracy == sequential.test_accuracy;
      ASSERT_TRUE(testing::all_ranks(
          same_eval, str("T=", towers, ", buckets of ", kib, " KiB: final test loss ", overlapped.test_loss,
                         " with --overlap, ", sequential.test_loss, " without")));
    }
  }
}

// Batch norm and dropout. Batch norm normalises over each tower's samples, so the promise is
// not "one process at batch B" but one process that runs the W*T parts of every global batch as
// towers of their own: gradients summed, running statistics set to the mean of the parts'
// updates (docs/TRAINING.md, "Batch norm in a PS system"). Dropout's masks depend on the sample's position
// in the global batch, not on the part that holds it. The reference below is written from that
// rule with the library's network and optimizer, one part after the other. With
// --deterministic the PS sums the workers in worker order, and the reference adds in the same
// order with the same scale factors, so the two must agree bitwise: any difference in what is
// computed (not only how it rounds) shows. (Without it, the order of MPI_Accumulate's arrivals
// changes the rounding, which batch norm over 4 samples amplifies to ~5e-5 in 20 steps.)
std::shared_ptr<const nn::ModelGraph> batchnorm_graph() {
  return std::make_shared<nn::ModelGraph>(
      nn::ModelGraph::parse("c1 = conv2d(input) out=4 kernel=3 stride=2 bias=false\n"
                            "bn1 = batchnorm momentum=0.2\n"
                            "r1 = relu\n"
                            "c2 = conv2d out=4 kernel=3 pad=1 bias=false\n"
                            "bn2 = batchnorm\n"
                            "sum = add(bn2, r1)\n"
                            "r2 = relu\n"
                            "pool = maxpool2d kernel=3 stride=2 pad=1\n"
                            "drop = dropout p=0.25\n"
                            "fc = linear out=classes\n",
                            "equivalence.model"));
}

std::vector<float> single_process_parts(const TrainConfig& c, const nn::ModelSpec& spec) {
  const std::size_t n = spec.layout().total();
  const auto train = data::make_memory_source(data::make_synthetic(c.synthetic_train, 28, 28, 10, c.seed));
  std::unique_ptr<backend::Backend> cpu = backend::make_cpu_backend();
  std::vector<float> params(n), grads(n), worker_sum(n), sum(n);
  spec.init_params(c.seed, params.data());
  nn::Network net(spec, *cpu, kPerTowerBatch);
  net.bind(params.data(), grads.data());
  optim::OptimizerConfig oc = c.optimizer;
  oc.schedule.total_steps = kSteps;
  auto optimizer = optim::make_optimizer(oc, n);
  const int w_count = workers();
  const data::EpochPlan plan(c.synthetic_train, c.batch_size, w_count, c.towers, c.seed, 0);
  for (int s = 0; s < plan.steps(); ++s) {
    for (int w = 0; w < w_count; ++w) {
      for (int t = 0; t < c.towers; ++t) {
        const data::TowerBatch b = data::read_tower_batch(*train, plan.samples(s, w, t));
        nn::Pass pass;
        pass.seed = c.seed, pass.step = s, pass.first_sample = plan.part_begin(s, w, t);
        pass.state_scale = 1.0f / static_cast<float>(c.towers);
        net.train(b.images.data(), b.labels.data(), b.count,
                  static_cast<float>(w_count) / static_cast<float>(plan.batch_size(s)), pass);
        for (std::size_t i = 0; i < n; ++i) worker_sum[i] = t == 0 ? grads[i] : grads[i] + worker_sum[i];
      }
      for (std::size_t i = 0; i < n; ++i) sum[i] = w == 0 ? worker_sum[i] : sum[i] + worker_sum[i];
    }
    const float scale = 1.0f / static_cast<float>(w_count);
    optimizer->begin_step(s);
    for (const TensorSpec& t : spec.layout().tensors()) {
      if (t.state)
        for (std::size_t i = t.offset; i < t.offset + t.numel; ++i) params[i] += sum[i] * scale;
      else optimizer->update(t.offset, t.numel, params.data() + t.offset, sum.data() + t.offset, scale);
    }
  }
  return params;
}

TEST(BatchNormEquivalence, DistributedEqualsOneProcessRunningThePartsAsTowers) {
  for (int towers : {1, 2}) {
    TrainConfig c = make_config(towers, momentum_sgd());
    c.model = "equivalence.model";
    c.model_graph = batchnorm_graph();
    c.exchange.deterministic = true;
    TrainOutputs out;
    run_training(c, &out);
    std::string detail;
    bool ok = true;
    if (!out.final_params.empty()) {
      const nn::ModelSpec spec(*c.model_graph, nn::kFashionMnistInput, 10);
      const Difference d = compare(spec, out.final_params, single_process_parts(c, spec));
      detail = str("batch norm, W=", workers(), " T=", towers, ": worst tensor relative error ", d.worst_tensor,
                   ", worst element ", d.worst_element, d.bitwise ? " (bitwise equal)" : " (NOT bitwise equal)");
      std::printf("%s\n", detail.c_str());
      ok = d.bitwise;
      // The running statistics moved (the test would pass trivially if they were never updated).
      const TensorSpec& mean = *spec.layout().find("bn1.running_mean");
      bool moved = false;
      for (std::size_t i = mean.offset; i < mean.offset + mean.numel; ++i) moved = moved || out.final_params[i] != 0.0f;
      ok = ok && moved;
      if (!moved) detail += "; bn1.running_mean never changed";
    }
    ASSERT_TRUE(testing::all_ranks(ok, detail));
  }
}

INSTANTIATE_TEST_SUITE_P(TowersAndOptimizers, Equivalence,
                         ::testing::Combine(::testing::Values(1, 2), ::testing::Values(false, true)));

}  // namespace
}  // namespace drt::train
