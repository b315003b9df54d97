// ModelSpec: a ModelGraph (model_graph.hpp) made concrete for one data set: the input shape
// (C x H x W) and the number of classes fix every layer's shapes, which are checked here, and
// the flat tensor layout. Presets (models/*.model, docs/MODEL_FORMAT.md):
//   mlp              784-512-256-10 with ReLU between layers; tensors fc1..fc3
//   mlp:784-1024-10  any fully connected ReLU network, sizes separated by '-'
//   cnn              conv1 5x5 1->32 pad 2, ReLU, maxpool 2; conv2 5x5 32->64 pad 2, ReLU,
//                    maxpool 2; flatten; fc1 3136->512, ReLU; fc2 512->10
//   resnet20         ResNet-20 (He et al. 2016, CIFAR variant) with batch norm
// Tensor order in the flat buffer: nodes in file order, each node's tensors in their order
// (weight, bias, then state such as running_mean, running_var), named like torch's state_dict
// ("conv1.weight", "layer1.0.bn1.running_mean", ...). Shapes are torch's: Linear [out, in],
// Conv2d [out, in / groups, kh, kw].
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "drtrain/core/param_layout.hpp"
#include "drtrain/nn/layer.hpp"
#include "drtrain/nn/model_graph.hpp"

namespace drt::nn {

// One sample of Fashion-MNIST: the shape ModelSpec::parse assumes unless told otherwise.
constexpr TensorShape kFashionMnistInput{1, 1, 28, 28};

class ModelSpec {
 public:
  // Checks that the graph fits `input` (per sample; n is ignored) and that its output has
  // `classes` values per sample (a sequence: per position); throws ConfigError naming the node
  // ("file:line: ...").
  ModelSpec(ModelGraph graph, TensorShape input, int classes);
  // ModelGraph::load(model) for this input and class count.
  static ModelSpec parse(const std::string& model, TensorShape input = kFashionMnistInput, int classes = 10);

  const std::string& name() const { return graph_.name(); }
  const ModelGraph& graph() const { return graph_; }
  TensorShape input() const { return input_; }  // one sample
  int classes() const { return classes_; }
  float label_smoothing() const { return static_cast<float>(graph_.label_smoothing()); }
  const ParamLayout& layout() const { return layout_; }
  std::string describe() const;  // layers and tensor counts
  // A language model's training FLOPs per token (forward and backward), as nanoGPT and PaLM
  // estimate them: 6 x the parameters a token's matrix products use (all but the position
  // embedding; a tied head's table counts once, through the embedding) + 12 x T x D for each
  // attention node of width D over T positions. 0 for a model whose output is not a sequence.
  double training_flops_per_token() const;

  // The graph's wiring: for node i, its inputs (node indices; -1 is the data) and its output's
  // per-sample shape. The last node is the logits.
  struct Wiring {
    std::vector<int> inputs;
    TensorShape output;
    int tied = -1;  // tie=: the node whose first tensor (an embedding's table) is this node's weight
  };
  const std::vector<Wiring>& wiring() const { return wiring_; }

  // Fresh layers for one tower (unbound), one per node.
  std::vector<std::unique_ptr<Layer>> make_layers() const;
  // Initial values into `host` (layout().total() floats): He-normal weights (N(0, init_std^2)
  // where a node gives init_std, and embeddings), zero biases, batch and layer norm scales and
  // running variances one. Depends only on `seed` (mt19937_64 and a
  // hand-written Box-Muller, identical on every machine).
  void init_params(std::uint64_t seed, float* host) const;

 private:
  ModelGraph graph_;
  TensorShape input_;
  int classes_;
  std::vector<Wiring> wiring_;
  ParamLayout layout_;
};

}  // namespace drt::nn
