// ModelGraph: a network as the user describes it, before shapes are known: named nodes, each a
// layer kind with options and named inputs, in an order where every input is defined above its
// use (so the graph has no cycles). Made by parsing a model file (docs/MODEL_FORMAT.md), from a
// preset (models/*.model, built into the program), or in C++ with add(). ModelSpec turns it
// into layers for a given input shape and number of classes.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace drt::nn {

struct GraphNode {
  std::string name;                            // unique; the prefix of its tensors ("conv1" -> "conv1.weight")
  std::string kind;                            // linear, conv2d, batchnorm, relu, add, ...
  std::vector<std::string> inputs;             // node names, or "input" (the data)
  std::map<std::string, std::string> options;  // as written: "out" -> "16"
  int line = 0;                                // in the model file (0: built in C++)
  std::string context;                         // inside repeat blocks: "i=3" (errors name the iteration)
};

class ModelGraph {
 public:
  // The name of the data's node.
  static constexpr const char* kInput = "input";

  // Parses model-file text; `origin` names it in errors ("models/resnet20.model"). Throws
  // ConfigError "origin:line: problem" for bad syntax, unknown kinds or options, bad values,
  // undefined or duplicate names. `lets` replaces the values of the file's 'let NAME = ...'
  // lines (each must have one): how gpt:L-H-D sizes the gpt2 preset.
  static ModelGraph parse(const std::string& text, const std::string& origin,
                          const std::map<std::string, std::string>& lets = {});
  static ModelGraph parse_file(const std::string& path);
  // --model: a preset name (mlp, cnn, resnet20, gpt2), mlp:IN-H1-...-OUT, gpt:L-H-D[-C], or a
  // model file's path.
  static ModelGraph load(const std::string& model);
  // The presets' names and file texts (models/*.model, compiled in).
  static std::vector<std::string> preset_names();
  static const std::string* preset_text(const std::string& name);

  explicit ModelGraph(std::string name = "model") : name_(std::move(name)) {}
  // Appends a node (C++ models). Inputs default to the previous node (or the data for the
  // first). Checks like parse(); returns *this.
  ModelGraph& add(const std::string& name, const std::string& kind, std::vector<std::string> inputs = {},
                  std::map<std::string, std::string> options = {});
  // Softmax cross-entropy's label smoothing, in [0, 1).
  ModelGraph& set_label_smoothing(double s);

  const std::string& name() const { return name_; }
  const std::vector<GraphNode>& nodes() const { return nodes_; }
  double label_smoothing() const { return label_smoothing_; }
  const std::string& origin() const { return origin_; }
  // The graph in the model-file format (comments dropped, let and repeat expanded, every input
  // written out); parsing it gives the same graph. Stored in checkpoints.
  std::string to_text() const;

  // "origin:line: " (or "model 'name': " for C++ graphs) for messages about a node; inside a
  // repeat block "origin:line (i=3): ".
  std::string where(const GraphNode& node) const;

 private:
  class Parser;  // model_graph.cpp: lines, let, repeat, {expressions}
  friend class Parser;
  void check_node(const GraphNode& node) const;  // kinds, options, inputs, names
  // One node (or 'model NAME') line, its {expressions} already replaced; `at` prefixes errors.
  void parse_node_line(const std::string& line, int number, const std::string& context, const std::string& at);
  // Checks and appends a node (its input defaults to the node above); the loss node sets the
  // label smoothing instead.
  void append(GraphNode node);

  std::string name_;
  std::string origin_;
  std::vector<GraphNode> nodes_;
  double label_smoothing_ = 0.0;
  bool loss_given_ = false;  // the softmax_cross_entropy node was given: nothing may follow
};

}  // namespace drt::nn
