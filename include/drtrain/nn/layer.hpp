// Layer: one step of a network with forward and backward passes, written against a Backend so
// that it runs on any device. A layer instance belongs to one tower; it holds pointers to its
// parameters and gradients inside the tower's flat buffers (bind) and any per-batch state it
// needs between forward and backward (e.g. max-pooling's argmax).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "drtrain/backend/backend.hpp"

namespace drt::nn {

// NCHW activation shape; fully connected activations are (n, features, 1, 1).
struct TensorShape {
  int n = 0, c = 0, h = 1, w = 1;
  std::size_t per_sample() const { return static_cast<std::size_t>(c) * h * w; }
  std::size_t size() const { return per_sample() * static_cast<std::size_t>(n); }
  std::string str() const;  // "1x28x28" (per sample)
};

// A trainable tensor of a layer. Initialisation: He (Kaiming) normal for weights,
// N(0, sqrt(2 / fan_in)), which keeps ReLU activations' variance stable; zeros for biases.
struct ParamSpec {
  std::string name;                 // "weight", "bias"
  std::vector<std::int64_t> shape;  // row-major
  std::size_t fan_in = 0;           // inputs per output (He init); 0 for biases
};

class Layer {
 public:
  virtual ~Layer() = default;
  virtual std::string describe() const = 0;  // "linear 784->512"
  virtual TensorShape output_shape(const TensorShape& in) const = 0;
  virtual std::vector<ParamSpec> params() const { return {}; }
  // True when y may be the same buffer as x (ReLU, Flatten).
  virtual bool in_place() const { return false; }
  // True when backward reads this layer's output y, so that an in-place layer after it must not
  // overwrite it (max pooling).
  virtual bool keeps_output() const { return false; }
  // Allocates per-batch state for inputs of up to `max_in.n` samples, on `device`, which must
  // outlive the layer.
  virtual void prepare(backend::Backend& /*device*/, const TensorShape& /*max_in*/) {}
  // Points the layer at its parameters and gradients (params() order, contiguous).
  void bind(const float* params, float* grads) {
    params_ = params;
    grads_ = grads;
  }
  virtual void forward(backend::Backend& device, const TensorShape& in, const float* x, float* y) = 0;
  // Writes (not adds) the parameter gradients and, when dx is not null, the input gradient.
  virtual void backward(backend::Backend& device, const TensorShape& in, const float* x, const float* y,
                        const float* dy, float* dx) = 0;

 protected:
  const float* params_ = nullptr;
  float* grads_ = nullptr;
};

std::unique_ptr<Layer> make_linear(int in, int out);
std::unique_ptr<Layer> make_relu();
std::unique_ptr<Layer> make_conv2d(int in_channels, int out_channels, int kernel, int pad);
std::unique_ptr<Layer> make_maxpool2d(int window);
std::unique_ptr<Layer> make_flatten();

}  // namespace drt::nn
