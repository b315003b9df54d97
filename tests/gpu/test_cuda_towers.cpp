// GPU towers: the NCCL tower group across every visible GPU against a host sum and copy, and a
// short training run on GPU towers (host SGD in between, as a PS would apply it) against the
// same run on CPU towers.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "drtrain/backend/cuda_backend.hpp"
#include "drtrain/backend/tower_group.hpp"
#include "drtrain/data/batch_loader.hpp"
#include "drtrain/nn/model_spec.hpp"
#include "drtrain/optim/optimizer.hpp"
#include "drtrain/train/towers.hpp"
#include "support/device_compare.hpp"

namespace drt {
namespace {

using testing_support::all_close;
using testing_support::download;
using testing_support::random_floats;
using testing_support::random_labels;
using testing_support::upload;

TEST(CudaTowers, TowerGroupSumsAndBroadcastsAcrossAllVisibleGpus) {
  const int gpus = backend::query_cuda_devices().count;
  const std::size_t n = (std::size_t{1} << 20) + 7;
  std::vector<std::unique_ptr<backend::Backend>> devices;
  std::vector<backend::DeviceBuffer> params, grads;
  std::vector<backend::TowerSlot> slots;
  std::vector<float> expected(n, 0.0f);
  for (int g = 0; g < gpus; ++g) {
    backend::CudaOptions o;
    o.device = g;
    devices.push_back(backend::make_cuda_backend(o));
    const std::vector<float> grad = random_floats(n, 100 + static_cast<std::uint64_t>(g));
    for (std::size_t i = 0; i < n; ++i) expected[i] += grad[i];
    grads.push_back(upload(*devices.back(), grad));
    params.push_back(devices.back()->allocate_floats(n));
    slots.push_back({devices.back().get(), params.back().floats(), grads.back().floats()});
  }
  auto group = backend::make_tower_group(slots, n);
  std::printf("tower group: %s\n", group->describe().c_str());
  const float* sum = group->sum_gradients();
  EXPECT_TRUE(all_close(std::vector<float>(sum, sum + n), expected, 1e-6)) << gpus << " GPU(s)";

  for (int round = 0; round < 2; ++round) {  // the staging buffer is reused
    const std::vector<float> fresh = random_floats(n, 200 + static_cast<std::uint64_t>(round));
    float* staging = group->parameter_staging();
    std::copy(fresh.begin(), fresh.end(), staging);
    group->load_parameters();
    for (int g = 0; g < gpus; ++g)
      EXPECT_EQ(download(*devices[static_cast<std::size_t>(g)], params[static_cast<std::size_t>(g)].floats(), n), fresh)
          << "tower " << g << " round " << round;
  }
}

// Steps of training with towers, the optimizer applied on the host to the combined gradient.
using Units = std::vector<std::pair<std::size_t, std::size_t>>;
enum class Hooks { kNone, kPerLayer, kOneUnit };

// Hooks::kPerLayer / kOneUnit: as --overlap drives them, through layer hooks over units of one
// layer each or of the whole model: a unit's parameters are loaded just before its first layer's
// forward, its gradient summed and copied to the host once its backward is queued, and another
// thread waits for the copies (as the exchange thread does).
std::vector<float> train_steps(const nn::ModelSpec& spec, const train::DevicePlan& plan, int towers, int steps,
                               Hooks how = Hooks::kNone) {
  const int per_tower = 16;
  auto t = train::make_towers(spec, plan, towers, per_tower);
  const bool hooked = how != Hooks::kNone;
  Units reported;
  if (hooked) {
    nn::LayerHooks hooks;
    hooks.before_forward = [](std::size_t, std::size_t) {};  // the parameters are in the staging buffer
    hooks.grads_ready = [&](std::size_t b, std::size_t e) { reported.emplace_back(b, e); };
    Units units{{0, spec.layout().total()}};
    if (how == Hooks::kPerLayer) {
      units.clear();
      for (const auto& r : t->param_ranges())
        if (r.second > r.first) units.push_back(r);
    }
    t->set_layer_hooks(hooks, units);
  }
  const std::size_t total = spec.layout().total();
  std::vector<float> params(total);
  spec.init_params(9, params.data());
  optim::OptimizerConfig oc;
  oc.lr = 0.05;
  oc.momentum = 0.9;
  oc.schedule.total_steps = steps;
  auto opt = optim::make_optimizer(oc, total);
  std::copy(params.begin(), params.end(), t->parameter_staging());
  t->load_parameters();
  for (int s = 0; s < steps; ++s) {
    data::WorkerBatch batch;
    for (int k = 0; k < towers; ++k) {
      data::TowerBatch part;
      part.count = per_tower - k;  // uneven parts
      part.images = random_floats(spec.input().per_sample() * part.count, 300 + 10 * s + k);
      part.labels = random_labels(part.count, spec.classes(), 400 + 10 * s + k);
      batch.towers.push_back(std::move(part));
    }
    reported.clear();
    t->compute(batch, 1.0f / (towers * per_tower), nn::Pass{});
    const float* grad = nullptr;
    if (hooked) {
      // Every layer reported once, last layer first, tiling [0, total).
      std::size_t end = total;
      for (const auto& [b, e] : reported) {
        EXPECT_EQ(e, end) << "step " << s;
        end = b;
      }
      EXPECT_EQ(end, 0u) << "step " << s;
      std::thread waiter([&] { t->await_gradients(0, total); });
      waiter.join();
      grad = t->hooked_gradients();
    } else {
      grad = t->combine_gradients();
    }
    opt->begin_step(s);
    opt->update(0, total, params.data(), grad, 1.0f);
    std::copy(params.begin(), params.end(), t->parameter_staging());
    if (!hooked) t->load_parameters();  // with hooks each forward takes its layers' parameters
  }
  return params;
}

TEST(CudaTowers, TrainingOnGpuTowersMatchesCpuTowers) {
  const int gpus = backend::query_cuda_devices().count;
  for (const char* model : {"mlp", "cnn"}) {
    const nn::ModelSpec spec = nn::ModelSpec::parse(model);
    const int towers = std::min(2, gpus);
    train::DevicePlan cpu;
    train::DevicePlan gpu;
    gpu.kind = backend::DeviceKind::kCuda;
    for (int g = 0; g < towers; ++g) gpu.gpus.push_back(g);
    const std::vector<float> expected = train_steps(spec, cpu, towers, 5);
    const std::vector<float> got = train_steps(spec, gpu, towers, 5);
    // Five steps of float32 training from the same start: summation orders differ (cuBLAS,
    // cuDNN, NCCL vs OpenBLAS, oneDNN), a few 1e-6 relative per step. The CNN may also decide
    // a near-tie of a ReLU or max pool differently (device_compare.hpp, mostly_close).
    const bool cnn = std::string(model) == "cnn";
    EXPECT_TRUE(cnn ? testing_support::mostly_close(got, expected, 1e-4, got.size() / 500)
                    : all_close(got, expected, 1e-4))
        << model << " on " << towers << " GPU tower(s)";
  }
}

// --overlap's path on GPUs (per-unit reduce and copy to the host, per-unit parameter loads)
// computes exactly what the whole-buffer path does: with deterministic cuDNN algorithms the same
// parameters bit for bit, on one tower and on two GPUs if there are two.
TEST(CudaTowers, LayerHooksGiveTheSameTrainingBitwise) {
  const int gpus = backend::query_cuda_devices().count;
  for (const char* model : {"mlp", "cnn", "resnet20"}) {
    const nn::ModelSpec spec = nn::ModelSpec::parse(model);
    for (int towers = 1; towers <= std::min(2, gpus); ++towers) {
      train::DevicePlan gpu;
      gpu.kind = backend::DeviceKind::kCuda;
      gpu.deterministic = true;
      for (int g = 0; g < towers; ++g) gpu.gpus.push_back(g);
      const std::vector<float> whole = train_steps(spec, gpu, towers, 4);
      for (Hooks how : {Hooks::kPerLayer, Hooks::kOneUnit}) {
        const std::vector<float> hooked = train_steps(spec, gpu, towers, 4, how);
        std::size_t differ = 0;
        for (std::size_t i = 0; i < whole.size(); ++i) differ += whole[i] != hooked[i];
        EXPECT_EQ(differ, 0u) << model << " on " << towers << " GPU tower(s), "
                              << (how == Hooks::kPerLayer ? "a unit per layer" : "one unit") << ": " << differ << " of "
                              << whole.size() << " parameters differ";
      }
    }
  }
}

TEST(CudaTowers, TowersAreDescribedWithTheirGpus) {
  train::DevicePlan gpu;
  gpu.kind = backend::DeviceKind::kCuda;
  gpu.gpus = {0};
  auto t = train::make_towers(nn::ModelSpec::parse("mlp"), gpu, 1, 8);
  EXPECT_NE(t->describe().find("GPU"), std::string::npos) << t->describe();
}

}  // namespace
}  // namespace drt
