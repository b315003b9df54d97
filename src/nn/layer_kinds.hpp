// The layer kinds a model file may use: each kind's options (with defaults), its number of
// inputs, and how a node of it becomes a Layer once its input shapes are known. One table, used
// by the parser (to check a node) and by ModelSpec (to build it); docs/MODEL_FORMAT.md lists it.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "drtrain/nn/layer.hpp"
#include "drtrain/nn/model_graph.hpp"

namespace drt::nn::kinds {

// kWord: one of OptionSpec::words; kName: a node's name (checked by ModelGraph: defined above).
enum class OptionType { kCount, kCountOrClasses, kBool, kReal, kWord, kName };

struct OptionSpec {
  std::string name;
  OptionType type;
  std::string fallback;  // the default as text; empty: required ("=kernel": same as option kernel; "-": none)
  std::vector<std::string> words = {};  // kWord's choices
};

struct KindSpec {
  std::string kind;
  int arity;  // 1, or Layer::kAnyInputs
  std::vector<OptionSpec> options;
  std::string help;  // one line for messages and docs
};

const std::vector<KindSpec>& all();
const KindSpec* find(const std::string& kind);
std::string names();  // "linear, conv2d, ..."

// The special last node: softmax cross-entropy of its input (the logits).
constexpr const char* kLoss = "softmax_cross_entropy";

// Checks a node's options (known names, values that parse); throws ConfigError with `where`.
void check_options(const KindSpec& spec, const GraphNode& node, const std::string& where);

// Options resolved to values (defaults filled in, "classes" replaced).
class Options {
 public:
  Options(const KindSpec& spec, const GraphNode& node, int classes, std::string where);
  int count(const std::string& name) const;
  bool flag(const std::string& name) const;
  double real(const std::string& name) const;
  bool given(const std::string& name) const;
  std::string text(const std::string& name) const;

 private:
  const KindSpec& spec_;
  const GraphNode& node_;
  int classes_;
  std::string where_;
};

// The Layer for `node` with these input shapes (already counted against the kind's arity).
std::unique_ptr<Layer> make_layer(const GraphNode& node, const std::vector<TensorShape>& in, int classes,
                                  const std::string& where);

}  // namespace drt::nn::kinds
