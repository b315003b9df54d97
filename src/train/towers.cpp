// Towers on any backend: each tower has its own device (a CPU backend, or a CUDA backend on its
// own GPU), parameters, gradients, activations and input buffers; a TowerGroup combines their
// gradients and spreads the pulled parameters (loops on the CPU, NCCL on GPUs).
//
// On GPUs every tower's work is queued on its own stream before any host wait, so the towers
// compute concurrently while one host thread drives them. With --overlap's hooks the host waits
// before a bucket's first forward until its parameters are pulled (the GPU runs the layers queued
// before it meanwhile).
#include "drtrain/train/towers.hpp"

#include <algorithm>
#include <vector>

#include "drtrain/backend/cuda_backend.hpp"
#include "drtrain/backend/tower_group.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/nn/network.hpp"

namespace drt::train {
namespace {

std::unique_ptr<backend::Backend> make_device(const DevicePlan& plan, int tower) {
  if (plan.kind == backend::DeviceKind::kCpu) return backend::make_cpu_backend(backend::CpuConv::kAuto, plan.cpu_gemm);
  backend::CudaOptions o;
  o.device = plan.gpus.at(static_cast<std::size_t>(tower));
  o.allow_tf32 = plan.allow_tf32;
  o.deterministic = plan.deterministic;
  return backend::make_cuda_backend(o);
}

struct Tower {
  Tower(const nn::ModelSpec& spec, std::unique_ptr<backend::Backend> dev, int max_batch)
      : targets(static_cast<std::size_t>(spec.wiring().back().output.positions())),
        device(std::move(dev)),
        params(device->allocate_floats(spec.layout().total())),
        grads(device->allocate_floats(spec.layout().total())),
        network(spec, *device, max_batch) {
    network.bind(params.floats(), grads.floats());
    if (device->kind() != backend::DeviceKind::kCpu) {  // host batches are copied in
      images = device->allocate_floats(spec.input().per_sample() * static_cast<std::size_t>(max_batch));
      labels = device->allocate(sizeof(std::int32_t) * static_cast<std::size_t>(max_batch) * targets);
    }
  }
  // Device pointers to n host images and labels: the host memory itself on the CPU, else a copy
  // queued on the tower's stream. The host memory must live until the tower's loss is taken
  // (compute() and evaluate() take it before they return).
  std::pair<const float*, const std::int32_t*> upload(const float* x, const std::int32_t* y, int n,
                                                      std::size_t image_floats) {
    DRT_ASSERT(n >= 0 && n <= network.max_batch(), "a tower's batch part exceeds the batch it was built for");
    if (device->kind() == backend::DeviceKind::kCpu) return {x, y};
    device->copy_from_host(images.floats(), x, static_cast<std::size_t>(n) * image_floats * sizeof(float));
    device->copy_from_host(labels.ints(), y, static_cast<std::size_t>(n) * targets * sizeof(std::int32_t));
    return {images.floats(), labels.ints()};
  }

  std::size_t targets;  // labels per sample: 1, or T (per-token targets of a language model)
  std::unique_ptr<backend::Backend> device;
  backend::DeviceBuffer params, grads, images, labels;
  nn::Network network;
};

class DeviceTowers final : public Towers {
 public:
  using Range = std::pair<std::size_t, std::size_t>;

  DeviceTowers(const nn::ModelSpec& spec, const DevicePlan& plan, int towers, int max_batch)
      : image_(spec.input().per_sample()), max_batch_(max_batch), plan_(plan) {
    if (towers < 1) throw ConfigError(str("--towers must be at least 1 (got ", towers, ")"));
    std::vector<backend::TowerSlot> slots;
    for (int t = 0; t < towers; ++t) {
      towers_.push_back(std::make_unique<Tower>(spec, make_device(plan, t), max_batch));
      slots.push_back({towers_.back()->device.get(), towers_.back()->params.floats(), towers_.back()->grads.floats()});
    }
    group_ = backend::make_tower_group(slots, spec.layout().total());
  }

  int count() const override { return static_cast<int>(towers_.size()); }
  std::string describe() const override {
    return str(count(), " tower(s) on ", plan_.describe(), ", up to ", max_batch_, " samples each; ",
               group_->describe());
  }

  backend::LossSums compute(const data::WorkerBatch& batch, float grad_scale, const nn::Pass& pass) override {
    DRT_ASSERT(static_cast<int>(batch.towers.size()) == count(), "batch parts != towers");
    loaded_end_ = 0;
    for (int t = 0; t < count(); ++t) {  // queue every tower's step first ...
      const data::TowerBatch& part = batch.towers[static_cast<std::size_t>(t)];
      const auto [x, y] = tower(t).upload(part.images.data(), part.labels.data(), part.count, image_);
      nn::Pass mine = pass;
      mine.first_sample = part.first;
      mine.state_scale = 1.0f / static_cast<float>(count());
      tower(t).network.enqueue_train(x, y, part.count, grad_scale, mine);
    }
    backend::LossSums total;  // ... then wait for each
    split_ = {};
    for (int t = 0; t < count(); ++t) {
      const backend::LossSums sums = tower(t).network.take_loss_sums();
      split_.forward_s += tower(t).network.last_forward_s();
      split_.backward_s += tower(t).network.last_backward_s();
      total.loss += sums.loss;
      total.correct += sums.correct;
    }
    return total;
  }

  ComputeSplit last_compute_split() const override { return split_; }

  // Work goes per unit (the exchange's buckets: whole layers), not per layer: a unit's parameters
  // go to every tower at the first forward in the step that needs any of them (tower 0's, unless
  // it has no samples), and its gradient is summed over the towers and reported once its lowest
  // layer's backward has run or been queued on the last tower (layers report last first, so the
  // unit's other layers have). One wait, copy and event per unit keeps models of many small
  // layers from paying per layer.
  void set_layer_hooks(const nn::LayerHooks& hooks, const std::vector<Range>& units) override {
    units_ = units;
    DRT_ASSERT(units_.empty() || (units_.front().first == 0 && units_.back().second == param_ranges().back().second),
               "hook units must tile the parameters");
    for (int t = 0; t < count(); ++t) {
      nn::LayerHooks mine;
      if (hooks.before_forward) {
        mine.before_forward = [this, needed = hooks.before_forward](std::size_t b, std::size_t e) {
          if (e <= loaded_end_) return;  // forward walks the layers in ascending order
          const Range& u = unit_of(b);
          needed(u.first, u.second);
          group_->load_parameters(u.first, u.second);
          loaded_end_ = u.second;
        };
      }
      if (hooks.grads_ready && t == count() - 1) {
        mine.grads_ready = [this, ready = hooks.grads_ready](std::size_t b, std::size_t) {
          const Range& u = unit_of(b);
          if (b != u.first) return;  // the unit's lower layers are still to come
          group_->sum_gradients_to_host(u.first, u.second);
          ready(u.first, u.second);
        };
      }
      tower(t).network.set_hooks(std::move(mine));
    }
  }

  const float* hooked_gradients() override { return group_->gradients_host(); }
  void await_gradients(std::size_t begin, std::size_t end) override { group_->await_gradients(begin, end); }

  const std::vector<std::pair<std::size_t, std::size_t>>& param_ranges() const override {
    return towers_[0]->network.param_ranges();
  }
  const float* combine_gradients() override { return group_->sum_gradients(); }
  float* parameter_staging() override { return group_->parameter_staging(); }
  void load_parameters() override { group_->load_parameters(); }

  backend::LossSums evaluate(const float* images, const std::int32_t* labels, int n) override {
    Tower& t0 = tower(0);
    for (int i = 0; i < n; i += max_batch_) {
      const int m = std::min(max_batch_, n - i);
      const auto [x, y] = t0.upload(images + static_cast<std::size_t>(i) * image_,
                                    labels + static_cast<std::size_t>(i) * t0.targets, m, image_);
      t0.network.enqueue_evaluate(x, y, m);
    }
    return t0.network.take_loss_sums();
  }

 private:
  Tower& tower(int t) { return *towers_[static_cast<std::size_t>(t)]; }
  std::size_t image_;  // floats per input sample
  int max_batch_;
  DevicePlan plan_;
  std::vector<std::unique_ptr<Tower>> towers_;
  std::unique_ptr<backend::TowerGroup> group_;
  // The unit holding element `at` (units_ ascending, tiling the parameters).
  const Range& unit_of(std::size_t at) const {
    const auto it =
        std::upper_bound(units_.begin(), units_.end(), at, [](std::size_t x, const Range& u) { return x < u.first; });
    DRT_ASSERT(it != units_.begin(), "an element outside the hook units");
    return *(it - 1);
  }

  ComputeSplit split_;
  std::vector<Range> units_;    // with layer hooks
  std::size_t loaded_end_ = 0;  // with layer hooks: parameters [0, loaded_end_) are in every tower this step
};

}  // namespace

std::unique_ptr<Towers> make_towers(const nn::ModelSpec& spec, const DevicePlan& plan, int towers,
                                    int max_batch_per_tower) {
  return std::make_unique<DeviceTowers>(spec, plan, towers, max_batch_per_tower);
}

}  // namespace drt::train
