// ParamLayout: the flat parameter space. Every tensor of a model lives at a fixed offset in one
// contiguous float32 buffer, in the order the tensors were added (a model adds them layer by
// layer, weight before bias); gradients use the same layout. Most tensors are trainable
// parameters; "state" tensors (batch norm's running statistics) are not: their part of a
// gradient carries the workers' updates of the state, which the PS averages instead of handing
// to the optimizer (docs/TRAINING.md, "Batch norm in a PS system"). Each trainable tensor also says whether
// weight decay applies to it (docs/OPTIMIZERS.md, "Optimizers": the decay rule).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace drt {

// A contiguous range [begin, end) of the flat parameter space, stored at `local` in some buffer
// (a PS's shard holds one or more of them back to back: ps/shard_plan.hpp).
struct ShardSpan {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::size_t local = 0;
  std::size_t size() const { return end - begin; }
};

// Which trainable tensors weight decay applies to (--decay-rule): kMatrices, those the layer kind
// marks (the weights of linear and conv layers: no biases, norms, embeddings); kAll, every one.
// A model file node's decay=true|false overrides either rule for that node's tensors.
enum class DecayRule { kMatrices, kAll };
DecayRule parse_decay_rule(const std::string& text);  // ConfigError naming --decay-rule
std::string to_string(DecayRule rule);

// A tensor's weight decay: by the rule (matrix: the layer kind's mark), or forced on or off.
enum class Decay { kByRule, kOn, kOff };

struct TensorSpec {
  std::string name;                 // unique, e.g. "fc1.weight"
  std::vector<std::int64_t> shape;  // row-major
  std::size_t offset = 0;           // first element in the flat buffer
  std::size_t numel = 0;
  bool state = false;            // not trainable (see above)
  bool matrix = false;           // decays under DecayRule::kMatrices (a linear or conv weight)
  Decay decay = Decay::kByRule;  // the model file's decay= (kByRule: not given)

  std::string shape_string() const;  // "512x784"
  // Whether weight decay applies to this tensor under `rule` (never to a state tensor).
  bool decays(DecayRule rule) const;
};

class ParamLayout {
 public:
  // Appends a tensor at the end of the flat space. Throws on a duplicate name or a bad shape.
  // `matrix` and `decay`: TensorSpec's (ignored for state tensors).
  const TensorSpec& add(const std::string& name, const std::vector<std::int64_t>& shape, bool state = false,
                        bool matrix = false, Decay decay = Decay::kByRule);

  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  std::size_t total() const { return total_; }  // elements
  std::size_t bytes() const { return total_ * sizeof(float); }
  const TensorSpec* find(const std::string& name) const;
  // The state tensors' ranges [begin, end) in the flat space, in order, adjacent ones merged.
  const std::vector<std::pair<std::size_t, std::size_t>>& state_ranges() const { return state_ranges_; }
  std::size_t state_elements() const;
  // The trainable tensors weight decay does not apply to under `rule` (TensorSpec::decays), as
  // ranges [begin, end) of the flat space in order, adjacent ones merged; state ranges are not
  // among them (the PS never runs the optimizer there). Empty when every trainable tensor decays.
  std::vector<std::pair<std::size_t, std::size_t>> no_decay_ranges(DecayRule rule) const;
  // Elements and tensors that decay under `rule`.
  std::size_t decaying_elements(DecayRule rule) const;
  std::size_t decaying_tensors(DecayRule rule) const;

  // Names, shapes and offsets as text; identical layouts give identical text.
  std::string to_text() const;

 private:
  std::vector<TensorSpec> tensors_;
  std::size_t total_ = 0;
  std::vector<std::pair<std::size_t, std::size_t>> state_ranges_;
};

}  // namespace drt
