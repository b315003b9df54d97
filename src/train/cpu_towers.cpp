// CPU towers: each tower has its own parameters, gradients and activations in host memory and
// runs on the calling thread; tower 0's buffers double as the exchange's host buffers.
#include <algorithm>
#include <vector>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/nn/network.hpp"
#include "drtrain/train/towers.hpp"

namespace drt::train {
namespace {

struct CpuTower {
  CpuTower(const nn::ModelSpec& spec, int max_batch)
      : device(backend::make_cpu_backend()),
        params(device->allocate_floats(spec.layout().total())),
        grads(device->allocate_floats(spec.layout().total())),
        network(spec, *device, max_batch) {
    network.bind(params.floats(), grads.floats());
  }
  std::unique_ptr<backend::Backend> device;
  backend::DeviceBuffer params, grads;
  nn::Network network;
};

class CpuTowers final : public Towers {
 public:
  CpuTowers(const nn::ModelSpec& spec, int towers, int max_batch)
      : size_(spec.layout().total()), image_(spec.input().per_sample()), max_batch_(max_batch) {
    if (towers < 1) throw ConfigError(str("--towers must be at least 1 (got ", towers, ")"));
    for (int t = 0; t < towers; ++t) towers_.push_back(std::make_unique<CpuTower>(spec, max_batch));
  }

  int count() const override { return static_cast<int>(towers_.size()); }
  std::string describe() const override { return str(count(), " CPU tower(s), up to ", max_batch_, " samples each"); }

  backend::LossSums compute(const data::WorkerBatch& batch, float grad_scale) override {
    DRT_ASSERT(static_cast<int>(batch.towers.size()) == count(), "batch parts != towers");
    backend::LossSums total;
    split_ = {};
    for (int t = 0; t < count(); ++t) {
      const data::TowerBatch& part = batch.towers[static_cast<std::size_t>(t)];
      const backend::LossSums sums =
          tower(t).network.train(part.images.data(), part.labels.data(), part.count, grad_scale);
      split_.forward_s += tower(t).network.last_forward_s();
      split_.backward_s += tower(t).network.last_backward_s();
      total.loss += sums.loss;
      total.correct += sums.correct;
    }
    return total;
  }

  ComputeSplit last_compute_split() const override { return split_; }

  const float* combine_gradients() override {
    float* sum = tower(0).grads.floats();
    for (int t = 1; t < count(); ++t) tower(0).device->axpby(1.0f, tower(t).grads.floats(), 1.0f, sum, size_);
    return sum;
  }

  float* parameter_staging() override { return tower(0).params.floats(); }

  void load_parameters() override {
    for (int t = 1; t < count(); ++t)
      tower(t).device->copy(tower(t).params.floats(), tower(0).params.floats(), size_ * sizeof(float));
  }

  backend::LossSums evaluate(const float* images, const std::int32_t* labels, int n) override {
    backend::LossSums total;
    for (int i = 0; i < n; i += max_batch_) {
      const int m = std::min(max_batch_, n - i);
      const backend::LossSums sums = tower(0).network.evaluate(images + static_cast<std::size_t>(i) * image_, labels + i, m);
      total.loss += sums.loss;
      total.correct += sums.correct;
    }
    return total;
  }

 private:
  CpuTower& tower(int t) { return *towers_[static_cast<std::size_t>(t)]; }
  std::size_t size_;   // parameters
  std::size_t image_;  // floats per input sample
  int max_batch_;
  std::vector<std::unique_ptr<CpuTower>> towers_;
  ComputeSplit split_;
};

}  // namespace

std::unique_ptr<Towers> make_cpu_towers(const nn::ModelSpec& spec, int towers, int max_batch_per_tower) {
  return std::make_unique<CpuTowers>(spec, towers, max_batch_per_tower);
}

}  // namespace drt::train
