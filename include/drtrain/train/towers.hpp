// Towers: the T model replicas ("towers") of one worker. Each trains on its part of the worker's
// batch; each tower's gradient is already scaled so that summing over the towers of all workers
// and dividing by W (the PS) gives the mean over the global batch, so combining is a sum. After
// the pull every tower gets the new parameters.
//
// This interface is what a worker's training loop sees. CPU towers run one after the other
// (they share the process's BLAS threads); GPU towers run one per GPU, concurrently, and combine
// with NCCL (backend/tower_group.hpp), also layer by layer with --overlap. Host buffers returned here are what the
// exchange pushes from and pulls into.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "drtrain/backend/backend.hpp"
#include "drtrain/data/batch_loader.hpp"
#include "drtrain/nn/model_spec.hpp"
#include "drtrain/nn/network.hpp"
#include "drtrain/train/device_plan.hpp"

namespace drt::train {

class Towers {
 public:
  virtual ~Towers() = default;
  virtual int count() const = 0;
  virtual std::string describe() const = 0;

  // Forward/backward of tower t on batch.towers[t]; tower gradients = grad_scale * d(sum of its
  // losses)/d(params), and the state tensors' part 1/T of the tower's state update (so that the
  // sum over the towers is their mean). `pass` gives the seed and the global step (its
  // first_sample and state_scale are set per tower). Returns the loss and correct counts summed
  // over the towers.
  virtual backend::LossSums compute(const data::WorkerBatch& batch, float grad_scale, const nn::Pass& pass) = 0;
  // Sums the towers' gradients; returns host memory holding the worker's gradient (valid until
  // the next compute()).
  virtual const float* combine_gradients() = 0;
  // Host memory the exchange pulls the new parameters into.
  virtual float* parameter_staging() = 0;
  // Gives every tower the parameters now in parameter_staging().
  virtual void load_parameters() = 0;
  // Seconds the last compute() spent in forward and in backward, summed over the towers.
  struct ComputeSplit {
    double forward_s = 0.0, backward_s = 0.0;
  };
  virtual ComputeSplit last_compute_split() const = 0;
  // Overlap with the exchange (--overlap). Installs hooks over the worker's host buffers, called
  // per unit: `units` are ranges of whole layers tiling the parameters in ascending order (the
  // exchange's buckets); empty functions remove the hooks.
  //   before_forward(b, e): a unit, before any tower's forward reads its parameters (on GPUs:
  //     before it is queued); when it returns they must be in parameter_staging(), and the towers
  //     take the unit from there, so load_parameters() is not needed.
  //   grads_ready(b, e): the towers' backward over the unit [b, e) has run (CPU) or is queued
  //     (GPU), units last first; the sum over the towers is on its way to hooked_gradients() (on
  //     the CPU already there), and await_gradients(b, e) blocks until it has landed.
  //     combine_gradients() must not be called.
  virtual void set_layer_hooks(const nn::LayerHooks& hooks,
                               const std::vector<std::pair<std::size_t, std::size_t>>& units) = 0;
  // With hooks: the host buffer holding the worker's gradient (what combine_gradients() would
  // return, without combining).
  virtual const float* hooked_gradients() = 0;
  // With hooks: blocks until the gradient over [b, e) reported by grads_ready is in
  // hooked_gradients(). Any thread may call it.
  virtual void await_gradients(std::size_t begin, std::size_t end) = 0;
  // Each layer's parameter range, forward order (empty ranges for layers without parameters).
  virtual const std::vector<std::pair<std::size_t, std::size_t>>& param_ranges() const = 0;
  // Forward-only loss over n host images (tower 0, in batches).
  virtual backend::LossSums evaluate(const float* images, const std::int32_t* labels, int n) = 0;
};

// T towers on the plan's devices for batches of up to max_batch_per_tower samples.
std::unique_ptr<Towers> make_towers(const nn::ModelSpec& spec, const DevicePlan& plan, int towers,
                                    int max_batch_per_tower);

}  // namespace drt::train
