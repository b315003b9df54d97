// Network: one replica of a model on one device (a tower's model): the layers, bound to the
// tower's flat parameter and gradient buffers, plus the activation buffers of a batch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "drtrain/backend/backend.hpp"
#include "drtrain/nn/layer.hpp"
#include "drtrain/nn/model_spec.hpp"

namespace drt::nn {

// Per-layer notifications for overlapping the exchange with compute, in flat-space elements
// [begin, end) of one layer's parameters. Called on the thread that runs the network, and only
// meaningful on a synchronous device (the CPU): a call means the work is done, not queued.
struct LayerHooks {
  // Before a layer's forward reads its parameters (training and evaluation).
  std::function<void(std::size_t begin, std::size_t end)> before_forward;
  // After a layer's backward has written its parameter gradients (last layer first).
  std::function<void(std::size_t begin, std::size_t end)> grads_ready;
};

class Network {
 public:
  // Allocates activations for batches of up to max_batch samples on `device`.
  Network(const ModelSpec& spec, backend::Backend& device, int max_batch);

  // params and grads: device buffers of spec.layout().total() floats.
  void bind(const float* params, float* grads);
  // Installs (or, with empty functions, removes) the per-layer hooks; layers without
  // parameters are not reported.
  void set_hooks(LayerHooks hooks) { hooks_ = std::move(hooks); }
  // Each layer's parameter range [begin, end), in forward order (empty for layers without).
  const std::vector<std::pair<std::size_t, std::size_t>>& param_ranges() const { return ranges_; }

  // Forward, softmax cross-entropy and backward on n samples (device memory: x holds n images,
  // labels n int32). The bound gradients receive grad_scale * d(sum of losses)/d(params); with
  // n == 0 they are zeroed. The loss and correct count go to the device's accumulator
  // (take_loss_sums); on a GPU this returns once the work is queued.
  void enqueue_train(const float* x, const std::int32_t* labels, int n, float grad_scale);
  // Forward and loss only, accumulated likewise.
  void enqueue_evaluate(const float* x, const std::int32_t* labels, int n);
  // Waits for the device; the summed loss and correct count since the last call.
  backend::LossSums take_loss_sums();
  // enqueue_* followed by take_loss_sums().
  backend::LossSums train(const float* x, const std::int32_t* labels, int n, float grad_scale);
  backend::LossSums evaluate(const float* x, const std::int32_t* labels, int n);

  int max_batch() const { return max_batch_; }
  // Device time of the last training step's forward (with the loss) and backward, read after
  // take_loss_sums().
  double last_forward_s();
  double last_backward_s();

 private:
  void forward(const float* x, int n);

  const ModelSpec& spec_;
  backend::Backend& device_;
  int max_batch_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<TensorShape> shapes_;  // per-sample shape entering layer i; back() = logits
  std::vector<backend::DeviceBuffer> storage_;
  std::vector<float*> acts_;               // acts_[i] = input of layer i; acts_.back() = logits
  backend::DeviceBuffer grad_a_, grad_b_;  // ping-pong buffers for activation gradients
  float* grads_ = nullptr;
  std::vector<std::pair<std::size_t, std::size_t>> ranges_;  // per layer, flat-space elements
  LayerHooks hooks_;
};

}  // namespace drt::nn
