// Tower groups (tower_group.hpp): the CPU one (loops over host memory; tower 0's buffers double
// as the exchange's host buffers) and the choice between it and the NCCL one.
#include "drtrain/backend/tower_group.hpp"

#include "drtrain/config.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#if DRT_HAVE_CUDA
#include "cuda/nccl_tower_group.hpp"
#endif

namespace drt::backend {
namespace {

class HostTowerGroup final : public TowerGroup {
 public:
  HostTowerGroup(std::vector<TowerSlot> towers, std::size_t n) : towers_(std::move(towers)), n_(n) {}

  const float* sum_gradients() override {
    sum_gradients_to_host(0, n_);
    return gradients_host();
  }
  float* parameter_staging() override { return towers_[0].params; }
  void sum_gradients_to_host(std::size_t begin, std::size_t end) override {
    float* sum = towers_[0].grads + begin;
    for (std::size_t t = 1; t < towers_.size(); ++t)
      towers_[0].device->axpby(1.0f, towers_[t].grads + begin, 1.0f, sum, end - begin);
  }
  void await_gradients(std::size_t /*begin*/, std::size_t /*end*/) override {}  // done when queued
  const float* gradients_host() override { return towers_[0].grads; }
  void load_parameters(std::size_t begin, std::size_t end) override {
    for (std::size_t t = 1; t < towers_.size(); ++t)
      towers_[t].device->copy(towers_[t].params + begin, towers_[0].params + begin, (end - begin) * sizeof(float));
  }
  std::size_t size() const override { return n_; }
  std::string describe() const override { return "host memory (tower 0's buffers are the exchange's)"; }

 private:
  std::vector<TowerSlot> towers_;
  std::size_t n_;
};

}  // namespace

std::unique_ptr<TowerGroup> make_tower_group(const std::vector<TowerSlot>& towers, std::size_t n) {
  DRT_ASSERT(!towers.empty(), "a tower group needs at least one tower");
  const DeviceKind kind = towers[0].device->kind();
  for (const TowerSlot& t : towers) DRT_ASSERT(t.device->kind() == kind, "towers of one worker on mixed devices");
  if (kind == DeviceKind::kCpu) return std::make_unique<HostTowerGroup>(towers, n);
#if DRT_HAVE_CUDA
  return make_nccl_tower_group(towers, n);
#else
  throw Error("a CUDA tower group in a build without CUDA");
#endif
}

}  // namespace drt::backend
