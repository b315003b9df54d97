#include "drtrain/nn/model_spec.hpp"

#include <cmath>
#include <limits>
#include <random>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "layer_kinds.hpp"

namespace drt::nn {
namespace {

int node_index(const ModelGraph& g, const std::string& name) {
  if (name == ModelGraph::kInput) return -1;
  for (std::size_t i = 0; i < g.nodes().size(); ++i)
    if (g.nodes()[i].name == name) return static_cast<int>(i);
  DRT_ASSERT(false, "ModelGraph let an undefined input through");
  return -1;
}

// A layer's output must be a real tensor whose per-sample size fits the int the layers count
// features in (a model file's huge padding or kernel would otherwise wrap it around).
void check_output(const TensorShape& s) {
  if (s.c < 1 || s.h < 1 || s.w < 1 || s.per_sample() > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    throw ConfigError(str("its output (", s.c, "x", s.h, "x", s.w,
                          " per sample) is empty or larger than 2^31 - 1 values; check its options"));
}

}  // namespace

ModelSpec::ModelSpec(ModelGraph graph, TensorShape input, int classes)
    : graph_(std::move(graph)), input_(input), classes_(classes) {
  input_.n = 1;
  if (input_.sequence && input_.h != 1)
    throw ConfigError(
        str("model '", graph_.name(), "': a sequence input has one row of features per position, got ", input_.str()));
  if (input_.c < 1 || input_.h < 1 || input_.w < 1 || classes < 1)
    throw ConfigError(str("model '", graph_.name(), "': bad input shape ", input_.str(), " or class count ", classes));
  const auto& nodes = graph_.nodes();
  for (const GraphNode& node : nodes) {
    Wiring w;
    std::vector<TensorShape> in;
    for (const auto& name : node.inputs) {
      w.inputs.push_back(node_index(graph_, name));
      in.push_back(w.inputs.back() < 0 ? input_ : wiring_[static_cast<std::size_t>(w.inputs.back())].output);
    }
    const std::string at = graph_.where(node);
    try {
      const auto layer = kinds::make_layer(node, in, classes_, at);
      w.output = layer->output_shape(in);
      check_output(w.output);
      // decay=true|false overrides the decay rule for every tensor of the node (docs/MODEL_FORMAT.md).
      const auto decay = node.options.find("decay");
      const Decay forced = decay == node.options.end() ? Decay::kByRule
                           : decay->second == "true"   ? Decay::kOn
                                                       : Decay::kOff;
      for (const ParamSpec& p : layer->params())
        layout_.add(node.name + "." + p.name, p.shape, p.state, p.matrix, forced);
      const auto tie = node.options.find("tie");
      if (tie != node.options.end()) {
        w.tied = node_index(graph_, tie->second);
        const TensorSpec* table = layout_.find(tie->second + ".weight");
        DRT_ASSERT(table, "tie= to a node without a weight");
        const std::vector<std::int64_t> want{w.output.features(), in.at(0).features()};
        if (table->shape != want)
          throw ConfigError(str(at, node.name, " = linear tie=", tie->second, ": the table ", tie->second,
                                ".weight is ", table->shape_string(), " but this linear's weight would be ", want[0],
                                "x", want[1], " (out x in)"));
      }
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      if (what.rfind(at, 0) == 0) throw;
      throw ConfigError(str(at, node.name, " = ", node.kind, ": ", what));
    } catch (const Error& e) {  // ParamLayout's: a tensor the model file's options made impossible
      throw ConfigError(str(at, node.name, " = ", node.kind, ": ", e.what()));
    }
    wiring_.push_back(std::move(w));
  }
  // 2^34 floats (64 GiB) is beyond any PS layout this code is tested with; refuse it here rather
  // than fail an allocation later.
  if (layout_.total() > (std::size_t{1} << 34))
    throw ConfigError(str("model '", graph_.name(), "' has ", layout_.total(),
                          " parameters and state values, more than 2^34 (64 GiB of float32)"));
  // Every node but the last must feed another: a dangling branch is a mistake in the file.
  std::vector<int> uses(nodes.size(), 0);
  for (const auto& w : wiring_)
    for (int i : w.inputs)
      if (i >= 0) ++uses[static_cast<std::size_t>(i)];
  for (std::size_t i = 0; i + 1 < nodes.size(); ++i)
    if (uses[i] == 0)
      throw ConfigError(str(graph_.where(nodes[i]), "the output of '", nodes[i].name,
                            "' is not used by any node below; the last node is the logits"));
  const TensorShape out = wiring_.back().output;
  if (out.sequence && out.w != classes_)
    throw ConfigError(str(graph_.where(nodes.back()), "model '", graph_.name(), "' ends with ", out.w,
                          " values per position (", out.str(), "), but the data set has ", classes_,
                          " classes (the vocabulary); end with e.g. 'linear out=classes'"));
  if (!out.sequence && static_cast<int>(out.per_sample()) != classes_)
    throw ConfigError(str(graph_.where(nodes.back()), "model '", graph_.name(), "' ends with ", out.per_sample(),
                          " values per sample (", out.str(), "), but the data set has ", classes_,
                          " classes; end with e.g. 'linear out=classes'"));
}

ModelSpec ModelSpec::parse(const std::string& model, TensorShape input, int classes) {
  return ModelSpec(ModelGraph::load(model), input, classes);
}

std::vector<std::unique_ptr<Layer>> ModelSpec::make_layers() const {
  std::vector<std::unique_ptr<Layer>> out;
  const auto& nodes = graph_.nodes();
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    std::vector<TensorShape> in;
    for (int k : wiring_[i].inputs) in.push_back(k < 0 ? input_ : wiring_[static_cast<std::size_t>(k)].output);
    out.push_back(kinds::make_layer(nodes[i], in, classes_, graph_.where(nodes[i])));
  }
  return out;
}

double ModelSpec::training_flops_per_token() const {
  if (wiring_.empty() || !wiring_.back().output.sequence) return 0.0;
  double params = 0.0, attention = 0.0;
  const auto& nodes = graph_.nodes();
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].kind == "pos_embedding") continue;
    if (nodes[i].kind == "attention") {
      const TensorShape& out = wiring_[i].output;  // [T, D]
      attention += 12.0 * out.positions() * out.features();
    }
  }
  for (const TensorSpec& t : layout_.tensors()) {
    if (t.state) continue;
    bool position_table = false;
    for (const GraphNode& n : nodes)
      if (n.kind == "pos_embedding" && t.name.rfind(n.name + ".", 0) == 0) position_table = true;
    if (!position_table) params += static_cast<double>(t.numel);
  }
  return 6.0 * params + attention;
}

std::string ModelSpec::describe() const {
  std::vector<std::string> parts;
  for (const auto& layer : make_layers()) parts.push_back(layer->describe());
  const std::size_t state = layout_.state_elements();
  return str(name(), " on ", input_.str(), ", ", classes_, " classes: ", join(parts, ", "), " (",
             layout_.total() - state, " parameters", state ? str(" + ", state, " state values") : "", ", ",
             human_bytes(static_cast<double>(layout_.bytes())), ")");
}

void ModelSpec::init_params(std::uint64_t seed, float* host) const {
  std::mt19937_64 rng(seed);
  const double kTwoPi = 6.283185307179586;
  auto uniform = [&rng] { return (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53; };  // (0, 1)
  std::size_t offset = 0;
  for (const auto& layer : make_layers())
    for (const ParamSpec& p : layer->params()) {
      const std::size_t count = p.numel();
      const double stddev = p.init == Init::kNormal ? p.init_std
                            : p.fan_in              ? std::sqrt(2.0 / static_cast<double>(p.fan_in))
                                                    : 0.0;
      for (std::size_t i = 0; i < count; ++i) {
        float v = 0.0f;
        if (p.init == Init::kOnes) v = 1.0f;
        else if (p.init == Init::kHeNormal || p.init == Init::kNormal) {
          // Box-Muller: portable, unlike std::normal_distribution.
          const double z = std::sqrt(-2.0 * std::log(uniform())) * std::cos(kTwoPi * uniform());
          v = static_cast<float>(z * stddev);
        }
        host[offset + i] = v;
      }
      offset += count;
    }
}

}  // namespace drt::nn
