// Layer: one node of a network's graph with forward and backward passes, written against a
// Backend so that it runs on any device. A layer instance belongs to one tower; it holds pointers
// to its tensors and their gradients inside the tower's flat buffers (bind) and any per-batch
// state it needs between forward and backward (e.g. max pooling's argmax, batch norm's saved
// statistics). Most layers take one input; merge layers (add, concat) take several.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "drtrain/backend/backend.hpp"

namespace drt::nn {

// NCHW activation shape; fully connected activations are (n, features, 1, 1). A sequence
// (GPT_DESIGN.md: token windows and what a language model makes of them) holds per sample T
// positions of D features: c = T, h = 1, w = D, memory [n][T][D]; layers over a sequence act on
// the last axis (D) of each position.
struct TensorShape {
  int n = 0, c = 0, h = 1, w = 1;
  bool sequence = false;
  std::size_t per_sample() const { return static_cast<std::size_t>(c) * h * w; }
  std::size_t size() const { return per_sample() * static_cast<std::size_t>(n); }
  std::string str() const;  // "1x28x28" (per sample), "256x384 seq" (T x D)
  bool same_sample(const TensorShape& o) const { return c == o.c && h == o.h && w == o.w && sequence == o.sequence; }
  // A sequence's positions per sample (T), 1 otherwise; and the features each position has.
  int positions() const { return sequence ? c : 1; }
  int features() const { return sequence ? w : static_cast<int>(per_sample()); }
  static TensorShape seq(int n, int length, int features) { return {n, length, 1, features, true}; }
};

// How a tensor starts. He (Kaiming) normal N(0, sqrt(2 / fan_in)) keeps ReLU activations'
// variance stable; biases start at zero, batch norm's scale and running variance at one.
// kNormal: N(0, init_std^2) (GPT-2's 0.02, the model file's init_std=).
enum class Init { kHeNormal, kZeros, kOnes, kNormal };

// A tensor of a layer: trainable (a parameter) or state (updated by the forward pass in
// training, e.g. batch norm's running statistics; see ParamLayout).
struct ParamSpec {
  std::string name;                 // "weight", "bias", "running_mean"
  std::vector<std::int64_t> shape;  // row-major
  std::size_t fan_in = 0;           // inputs per output (He init)
  Init init = Init::kZeros;
  bool state = false;
  double init_std = 0.0;  // kNormal
  // Weight decay applies under --decay-rule matrices (the default): set by the layer kinds on the
  // weights of linear and conv layers; never on biases, norms, embeddings or state.
  bool matrix = false;
  std::size_t numel() const;
};

// What a forward or backward call knows about the batch besides its data.
struct Pass {
  bool training = true;           // false: evaluation (batch norm uses running statistics, no dropout)
  std::uint64_t seed = 0;         // the run's seed (dropout)
  std::int64_t step = 0;          // the global step (dropout)
  std::int64_t first_sample = 0;  // position of the tower's first sample in the global batch (dropout)
  // Training: a layer with state writes (new state - current state) * state_scale into its
  // state's gradient, so that summing over the towers of a worker gives the mean update.
  float state_scale = 1.0f;
};

class Layer {
 public:
  virtual ~Layer() = default;
  virtual std::string describe() const = 0;  // "linear 784->512"
  // Number of inputs: 1, or kAnyInputs (two or more).
  static constexpr int kAnyInputs = -1;
  virtual int arity() const { return 1; }
  // Throws ConfigError when the inputs do not fit the layer (the message names the shapes).
  virtual TensorShape output_shape(const std::vector<TensorShape>& in) const = 0;
  // Parameters first, then state tensors, in the order they sit in the flat space.
  virtual std::vector<ParamSpec> params() const { return {}; }
  // True when y may be the same buffer as the (single) input x (ReLU, dropout), and backward
  // may then write dx over dy.
  virtual bool in_place() const { return false; }
  // True when y is x, unchanged, under another shape (flatten): y always shares x's buffer.
  virtual bool is_view() const { return false; }
  // True when the gradient of every input is dy itself (add): the network may then hand dy's
  // buffer to one input as its gradient instead of a copy (backward skips a dx that is dy).
  virtual bool passes_gradient() const { return false; }
  // True when backward reads this layer's output y, so that an in-place layer after it must not
  // overwrite it (max pooling, tanh, sigmoid).
  virtual bool keeps_output() const { return false; }
  // Allocates per-batch state for inputs of up to `max_in[i].n` samples, on `device`, which must
  // outlive the layer. `index` is the layer's position in the graph (dropout's key).
  virtual void prepare(backend::Backend& /*device*/, const std::vector<TensorShape>& /*max_in*/, int /*index*/) {}
  // Points the layer at its tensors and their gradients (params() order, contiguous).
  void bind(const float* params, float* grads) {
    params_ = params;
    grads_ = grads;
  }
  // Weight tying (docs/MODEL_FORMAT.md, tie=): a linear layer that uses an embedding's table as
  // its weight is given that tensor and its gradient here, after bind. It lies below the table's
  // owner in the graph, so its backward runs first and writes the gradient; the owner, marked
  // with set_tied_owner, then adds its own part instead of writing.
  void bind_shared(const float* weight, float* grad) {
    shared_ = weight;
    shared_grad_ = grad;
  }
  void set_tied_owner(bool owner) { tied_owner_ = owner; }
  virtual void forward(backend::Backend& device, const Pass& pass, const std::vector<TensorShape>& in,
                       const std::vector<const float*>& x, float* y) = 0;
  // Writes (not adds) the parameter gradients and, for each dx[i] that is not null, the gradient
  // of input i. Only after a training-mode forward of the same batch.
  virtual void backward(backend::Backend& device, const Pass& pass, const std::vector<TensorShape>& in,
                        const std::vector<const float*>& x, const float* y, const float* dy,
                        const std::vector<float*>& dx) = 0;

 protected:
  const float* params_ = nullptr;
  float* grads_ = nullptr;
  const float* shared_ = nullptr;
  float* shared_grad_ = nullptr;
  bool tied_owner_ = false;
};

// A layer of one input: the vector interface reduced to single pointers.
class UnaryLayer : public Layer {
 public:
  TensorShape output_shape(const std::vector<TensorShape>& in) const final { return output_shape(in.at(0)); }
  void prepare(backend::Backend& device, const std::vector<TensorShape>& max_in, int index) final {
    prepare(device, max_in.at(0), index);
  }
  void forward(backend::Backend& device, const Pass& pass, const std::vector<TensorShape>& in,
               const std::vector<const float*>& x, float* y) final {
    forward(device, pass, in[0], x[0], y);
  }
  void backward(backend::Backend& device, const Pass& pass, const std::vector<TensorShape>& in,
                const std::vector<const float*>& x, const float* y, const float* dy,
                const std::vector<float*>& dx) final {
    backward(device, pass, in[0], x[0], y, dy, dx[0]);
  }

  virtual TensorShape output_shape(const TensorShape& in) const = 0;
  virtual void prepare(backend::Backend& /*device*/, const TensorShape& /*max_in*/, int /*index*/) {}
  virtual void forward(backend::Backend& device, const Pass& pass, const TensorShape& in, const float* x, float* y) = 0;
  virtual void backward(backend::Backend& device, const Pass& pass, const TensorShape& in, const float* x,
                        const float* y, const float* dy, float* dx) = 0;
};

// The layers (src/nn/layers/). Options as in docs/MODEL_FORMAT.md.
struct Conv2dOptions {
  int in_channels = 0, out_channels = 0, kernel = 0, stride = 1, pad = 0, groups = 1;
  bool bias = true;
};
struct PoolOptions {
  int kernel = 2, stride = 2, pad = 0;
};
enum class PoolKind { kMax, kAverage };

// A linear layer: over each sample's values, or on a sequence over each position's features
// (in = D). init_std > 0: weights N(0, init_std^2) instead of He. tied: no weight of its own;
// bind_shared gives it another node's [out, in] table (its params() then hold the bias only).
struct LinearOptions {
  int in = 0, out = 0;
  bool bias = true;
  double init_std = 0.0;
  bool tied = false;
};

std::unique_ptr<Layer> make_linear(int in, int out, bool bias = true);
std::unique_ptr<Layer> make_linear(const LinearOptions& options);
std::unique_ptr<Layer> make_relu();
std::unique_ptr<Layer> make_activation(backend::Activation f);
std::unique_ptr<Layer> make_conv2d(const Conv2dOptions& options);
std::unique_ptr<Layer> make_conv2d(int in_channels, int out_channels, int kernel, int pad);
std::unique_ptr<Layer> make_pool2d(PoolKind kind, const PoolOptions& options);
std::unique_ptr<Layer> make_maxpool2d(int window);
std::unique_ptr<Layer> make_global_avgpool();
std::unique_ptr<Layer> make_flatten();
std::unique_ptr<Layer> make_batchnorm(int channels, float eps = 1e-5f, float momentum = 0.1f);
std::unique_ptr<Layer> make_dropout(float p);
std::unique_ptr<Layer> make_add();
std::unique_ptr<Layer> make_concat();
// The language-model layers (GPT_DESIGN.md, docs/MODEL_FORMAT.md). Token embedding: a sequence
// of T token ids -> T rows of a [vocab, dim] table. Position embedding: adds rows 0..T-1 of a
// [context, dim] table to a sequence of dim features (in place). Layer norm over the last axis
// (a sequence's features, or a sample's values). Causal self-attention: [T, 3D] fused q, k, v
// -> [T, D], `heads` heads, dropout on the attention probabilities in training.
std::unique_ptr<Layer> make_embedding(int vocab, int dim, double init_std);
std::unique_ptr<Layer> make_position_embedding(int context, int dim, double init_std);
std::unique_ptr<Layer> make_layernorm(int dim, float eps = 1e-5f, bool bias = true);
std::unique_ptr<Layer> make_attention(int heads, float dropout);

}  // namespace drt::nn
