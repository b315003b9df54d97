// Text generation with a language model (drtrain-ckpt sample; GPT_DESIGN.md): a network rebuilt
// from its model definition for inference, fed the last `context` tokens of a growing sequence,
// and a seeded sampler of the next token.
//
// A language model here is a graph whose data (`input`) is read only by embeddings (token ids)
// and whose logits are a sequence of `vocab` values per position. Every layer that takes a
// sequence acts on each position alone or, attention, causally (docs/MODEL_FORMAT.md), so the
// logits of position i depend on tokens 0..i only: a window shorter than the network's input is
// padded after its end, and the logits of its last real position are those of the unpadded
// window. A network is built per window length 1, 2, 4, ... up to the context (lazily, all
// bound to one copy of the parameters), so each new token costs one forward of fewer than twice
// the window's tokens, never more than `context`; no KV cache.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "drtrain/backend/backend.hpp"
#include "drtrain/core/param_layout.hpp"
#include "drtrain/nn/model_graph.hpp"
#include "drtrain/nn/model_spec.hpp"
#include "drtrain/nn/network.hpp"

namespace drt::nn {

// Picks the next token from one position's logits. Temperature 0: greedy, the largest logit (the
// lowest id among equals). Temperature t > 0: a draw from softmax(logits / t) over the top_k
// largest logits (ties broken by the lower id; 0, or top_k >= vocab: every token), computed in
// double. Each draw takes one 64-bit number of mt19937_64(seed) (fully specified by the C++
// standard) and turns it into a uniform u in [0, 1) by hand ((x >> 11) * 2^-53), never through
// std::*_distribution, whose results differ between standard libraries: a seed gives the same
// draws on every machine, and the same tokens wherever the logits are the same.
class TokenSampler {
 public:
  // ConfigError for a temperature that is negative or not finite, or a negative top_k.
  TokenSampler(double temperature, int top_k, std::uint64_t seed);
  // Error when a logit is NaN or infinite (a damaged or diverged model).
  int next(const float* logits, int vocab);

 private:
  double temperature_;
  int top_k_;
  std::mt19937_64 rng_;
  std::vector<int> order_;
  std::vector<double> weights_;
};

class LanguageModel {
 public:
  // The shape of a stored tensor by its name ("transformer.wte.weight"); empty when there is
  // none. Tensors the definition needs are read through it before any is loaded.
  using ShapeOf = std::function<std::vector<std::int64_t>(const std::string& tensor)>;

  // Checks that `graph` is a language model (ConfigError "not a language model: ..." naming the
  // node), and finds from the stored shapes the vocabulary (the head's rows: the tied embedding
  // table's, or its own weight's; else the input embedding's table) and the position tables'
  // rows. context 0: the smallest position table's rows; a larger context than a table, or 0
  // for a model without one, is a ConfigError naming the table and the fix. The network runs on
  // `device`, which must outlive this object.
  LanguageModel(const ModelGraph& graph, const ShapeOf& shape_of, int context, backend::Backend& device);

  int vocab() const { return vocab_; }
  int context() const { return context_; }
  // The rows of the (smallest) position table, 0 without one.
  int positions() const { return positions_; }
  // Every tensor the model needs (parameters and state), with its shape and place in the flat
  // buffer that set_params takes.
  const ParamLayout& layout() const { return spec_->layout(); }
  // The whole flat buffer: layout().total() floats.
  void set_params(const std::vector<float>& flat);

  // The logits (vocab() floats) of the token after `tokens` (at least one, each below vocab()),
  // from a forward of its last context() tokens in evaluation mode.
  std::vector<float> next_logits(const std::vector<int>& tokens);
  // Appends `length` tokens drawn by `sampler`, calling on_token with each once it is chosen.
  void generate(std::vector<int>& tokens, int length, TokenSampler& sampler,
                const std::function<void(int)>& on_token = {});

 private:
  struct Window {  // a network for windows of one length
    std::unique_ptr<ModelSpec> spec;
    std::unique_ptr<Network> net;
    backend::DeviceBuffer input;
  };
  Window& window(int length);

  ModelGraph graph_;  // with every position table's rows written out (context=)
  backend::Backend& device_;
  int vocab_ = 0, context_ = 0, positions_ = 0;
  std::unique_ptr<ModelSpec> spec_;  // at the full context: the layout, and the checks
  backend::DeviceBuffer params_;
  std::map<int, Window> windows_;
  std::vector<float> ids_;
};

}  // namespace drt::nn
