// ModelSpec: a network chosen by name (--model), its layers, and its flat parameter layout.
//   mlp              784-512-256-10 with ReLU between layers; tensors fc1..fc3
//   mlp:784-1024-10  any fully connected ReLU network, sizes separated by '-' (first = 784)
//   cnn              conv1 5x5 1->32 pad 2, ReLU, maxpool 2; conv2 5x5 32->64 pad 2, ReLU,
//                    maxpool 2; flatten; fc1 3136->512, ReLU; fc2 512->10
// Parameter order in the flat buffer: layers in forward order, each layer's weight then bias,
// named like torch's state_dict ("conv1.weight", "conv1.bias", "fc1.weight", ...). Shapes are
// torch's: Linear [out, in], Conv2d [out, in, kh, kw].
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "drtrain/core/param_layout.hpp"
#include "drtrain/nn/layer.hpp"

namespace drt::nn {

class ModelSpec {
 public:
  // Throws ConfigError naming the choices for an unknown or malformed name.
  static ModelSpec parse(const std::string& text);

  const std::string& name() const { return name_; }
  TensorShape input() const { return {1, 1, 28, 28}; }  // one sample: Fashion-MNIST images
  int classes() const { return classes_; }
  const ParamLayout& layout() const { return layout_; }
  std::string describe() const;  // layers and parameter count

  // Fresh layers for one tower (unbound).
  std::vector<std::unique_ptr<Layer>> make_layers() const;
  // He-normal weights, zero biases, into `host` (layout().total() floats). Depends only on
  // `seed` (mt19937_64 and a hand-written Box-Muller, identical on every machine).
  void init_params(std::uint64_t seed, float* host) const;

 private:
  struct LayerDesc {
    std::string name;  // parameter prefix ("fc1"), or empty for layers without parameters
    std::string kind;  // linear, relu, conv, maxpool, flatten
    std::vector<int> args;
  };
  ModelSpec() = default;
  void finish();  // builds the layout from the layer list

  std::string name_;
  int classes_ = 10;
  std::vector<LayerDesc> layers_;
  ParamLayout layout_;
};

}  // namespace drt::nn
