// Network: one replica of a model on one device (a tower's model): the graph's layers, bound to
// the tower's flat parameter and gradient buffers, plus the activation and gradient buffers of a
// batch. Forward runs the nodes in file order; backward in reverse, adding the gradients of a
// node's output that feeds several nodes (residual connections).
//
// Language models (GPT_DESIGN.md): when the logits are a sequence [T, V], the loss is per token
// (n x T rows, labels n x T) and the gradient scale is divided by T, so that grad_scale = W /
// samples gives the mean over the tokens of the global batch; the loss sums and correct counts
// are over tokens. Tied weights (tie=): a head that uses an embedding's table is bound to the
// table's place in the flat space; the head writes the table's gradient, the embedding (above
// it, so later in backward) adds its own, and the embedding's range, the only one holding the
// table, is reported to grads_ready after both.
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
// [begin, end) of one layer's tensors. Called on the thread that runs the network, and only
// meaningful on a synchronous device (the CPU): a call means the work is done, not queued.
struct LayerHooks {
  // Before a layer's forward reads its tensors (training and evaluation).
  std::function<void(std::size_t begin, std::size_t end)> before_forward;
  // After a layer's backward has written its gradients (last layer first).
  std::function<void(std::size_t begin, std::size_t end)> grads_ready;
};

class Network {
 public:
  // Allocates activations for batches of up to max_batch samples on `device`.
  Network(const ModelSpec& spec, backend::Backend& device, int max_batch);

  // params and grads: device buffers of spec.layout().total() floats. grads may be null for a
  // network that only runs infer().
  void bind(const float* params, float* grads);
  // Installs (or, with empty functions, removes) the per-layer hooks; layers without tensors
  // are not reported.
  void set_hooks(LayerHooks hooks) { hooks_ = std::move(hooks); }
  // Each layer's tensor range [begin, end), in forward order (empty for layers without).
  const std::vector<std::pair<std::size_t, std::size_t>>& param_ranges() const { return ranges_; }

  // Forward, softmax cross-entropy and backward on n samples (device memory: x holds n inputs,
  // labels n int32, or n x T for sequence logits). The bound gradients receive grad_scale * d(sum of losses)/d(params),
  // and the state tensors' part the state update times pass.state_scale (layer.hpp); with n == 0 they are zeroed. The
  // loss and correct count go to the device's accumulator (take_loss_sums); on a GPU this returns once the work is
  // queued. pass.training is ignored.
  void enqueue_train(const float* x, const std::int32_t* labels, int n, float grad_scale, const Pass& pass = {});
  // Forward (evaluation mode) and loss only, accumulated likewise.
  void enqueue_evaluate(const float* x, const std::int32_t* labels, int n);
  // Waits for the device; the summed loss and correct count since the last call.
  backend::LossSums take_loss_sums();
  // enqueue_* followed by take_loss_sums().
  backend::LossSums train(const float* x, const std::int32_t* labels, int n, float grad_scale, const Pass& pass = {});
  backend::LossSums evaluate(const float* x, const std::int32_t* labels, int n);
  // Inference: forward in evaluation mode (no dropout; batch norm's running statistics) of n
  // samples, without a loss. Returns the logits, the last node's output: device memory of n x
  // its per-sample size (a language model: [n][T][V]), valid until the network's next call; on a
  // GPU the work is queued (copy_to_host waits for it). Used by nn/generate.hpp.
  const float* infer(const float* x, int n);

  int max_batch() const { return max_batch_; }
  // Device time of the last training step's forward (with the loss) and backward, read after
  // take_loss_sums().
  double last_forward_s();
  double last_backward_s();
  // Device memory held for activations and their gradients.
  std::size_t activation_bytes() const;

 private:
  static constexpr int kData = -1;  // the caller's input buffer
  // Backward's plan for one input slot of a node: the gradient buffer it writes, and whether it
  // adds (writes to scratch, then adds) because another consumer wrote that buffer first.
  struct GradTarget {
    int buffer = -1;  // -1: no gradient (the data)
    bool add = false;
  };
  void plan_buffers();
  void plan_activations();  // plan_buffers(): act_owner_ and act_
  void plan_gradients();    // plan_buffers(): dy_buffer_, dx_, grad_ and scratch_
  const float* activation(int node, const float* x) const;
  std::vector<TensorShape> input_shapes(std::size_t node, int n) const;
  void forward(const float* x, int n, const Pass& pass);
  int loss_rows(int n) const;
  float loss_scale(float grad_scale) const;

  const ModelSpec& spec_;
  backend::Backend& device_;
  int max_batch_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<int> consumers_;               // per node: how many input slots read its output
  std::vector<int> act_owner_;               // per node: the node whose buffer holds its output, or kData
  std::vector<backend::DeviceBuffer> act_;   // per node: its own buffer (empty when shared)
  std::vector<backend::DeviceBuffer> grad_;  // gradient buffers, each of the largest activation
  std::vector<int> dy_buffer_;               // per node: the buffer of d(loss)/d(output)
  std::vector<std::vector<GradTarget>> dx_;  // per node and input slot
  backend::DeviceBuffer scratch_;            // for added gradients
  std::size_t largest_ = 0;                  // floats of the largest activation at max_batch
  float* grads_ = nullptr;
  std::vector<std::pair<std::size_t, std::size_t>> ranges_;  // per layer, flat-space elements
  LayerHooks hooks_;
};

}  // namespace drt::nn
