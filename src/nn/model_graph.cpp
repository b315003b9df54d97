#include "drtrain/nn/model_graph.hpp"

#include <sys/stat.h>

#include <cctype>
#include <fstream>
#include <set>
#include <sstream>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "layer_kinds.hpp"
#include "model_presets.hpp"

namespace drt::nn {
namespace {

std::string trim(const std::string& s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

bool valid_name(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char ch : s)
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.')) return false;
  return s.back() != '.';
}

// "mlp:784-512-10" -> linear layers fc1..fcN with ReLU between them; the first size is the
// input's values per sample, checked when the shapes are known.
ModelGraph mlp_from_sizes(const std::string& whole) {
  const std::string text = whole.substr(4);
  if (text.empty() || text.back() == '-' || text.front() == '-')
    throw ConfigError(str("--model '", whole, "': the layer sizes start or end with '-'; e.g. mlp:784-1024-10"));
  std::vector<int> sizes;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, '-');) {
    long long v = -1;
    try {
      v = parse_count(item, "--model");
    } catch (const ConfigError&) {
      v = -1;
    }
    if (v < 1 || v > (1 << 24))
      throw ConfigError(str("--model '", whole, "': '", item, "' is not a layer size between 1 and 16777216"));
    sizes.push_back(static_cast<int>(v));
  }
  if (sizes.size() < 2)
    throw ConfigError(str("--model '", whole,
                          "': give the input size, any hidden sizes and the output size, e.g. "
                          "mlp:784-1024-10"));
  ModelGraph g(whole);
  for (std::size_t i = 1; i < sizes.size(); ++i) {
    std::map<std::string, std::string> o{{"out", std::to_string(sizes[i])}};
    if (i == 1) o["in"] = std::to_string(sizes[0]);
    g.add(str("fc", i), "linear", {}, o);
    if (i + 1 < sizes.size()) g.add(str("relu", i), "relu");
  }
  return g;
}

}  // namespace

std::string ModelGraph::where(const GraphNode& node) const {
  if (node.line > 0) return str(origin_, ":", node.line, ": ");
  return str("model '", name_, "', node '", node.name, "': ");
}

void ModelGraph::check_node(const GraphNode& node) const {
  const std::string at = where(node);
  if (!valid_name(node.name))
    throw ConfigError(
        str(at, "'", node.name, "' is not a node name (letters, digits, '_' and '.', starting with a letter or '_')"));
  if (node.name == kInput) throw ConfigError(str(at, "'input' is the data's name; give the node another"));
  for (const auto& n : nodes_)
    if (n.name == node.name)
      throw ConfigError(
          str(at, "'", node.name, "' is defined twice", n.line ? str(" (first on line ", n.line, ")") : ""));
  const kinds::KindSpec* spec = kinds::find(node.kind);
  if (!spec) throw ConfigError(str(at, "unknown layer kind '", node.kind, "'; kinds: ", kinds::names()));
  if (loss_given_) throw ConfigError(str(at, "nothing may follow the ", kinds::kLoss, " line"));
  if (spec->arity == 1 && node.inputs.size() != 1)
    throw ConfigError(str(at, node.kind, " takes one input, got ", node.inputs.size()));
  if (spec->arity == Layer::kAnyInputs && node.inputs.size() < 2)
    throw ConfigError(str(at, node.kind, " takes two or more inputs, got ", node.inputs.size()));
  for (const auto& in : node.inputs) {
    if (in == kInput) continue;
    bool found = false;
    for (const auto& n : nodes_) found = found || n.name == in;
    if (!found)
      throw ConfigError(str(at, "input '", in, "' is not defined above (nodes are defined before they are used; '",
                            kInput, "' is the data)"));
  }
  if (node.kind == kinds::kLoss && (nodes_.empty() || node.inputs.at(0) != nodes_.back().name))
    throw ConfigError(str(at, kinds::kLoss, " must take the node just above it (the logits)"));
  kinds::check_options(*spec, node, at);
}

ModelGraph& ModelGraph::add(const std::string& name, const std::string& kind, std::vector<std::string> inputs,
                            std::map<std::string, std::string> options) {
  append(GraphNode{name, kind, std::move(inputs), std::move(options), 0});
  return *this;
}

void ModelGraph::append(GraphNode node) {
  if (node.inputs.empty()) node.inputs.push_back(nodes_.empty() ? kInput : nodes_.back().name);
  check_node(node);
  if (node.kind != kinds::kLoss) {
    nodes_.push_back(std::move(node));
    return;
  }
  // The loss is not a layer: it sets the label smoothing of the softmax cross-entropy.
  const double s = kinds::Options(*kinds::find(node.kind), node, 0, where(node)).real("label_smoothing");
  if (!(s >= 0.0 && s < 1.0)) throw ConfigError(str(where(node), "label_smoothing=", s, " must be in [0, 1)"));
  label_smoothing_ = s;
  loss_given_ = true;
}

ModelGraph& ModelGraph::set_label_smoothing(double s) {
  if (!(s >= 0.0 && s < 1.0)) throw ConfigError(str("model '", name_, "': label_smoothing=", s, " must be in [0, 1)"));
  label_smoothing_ = s;
  return *this;
}

ModelGraph ModelGraph::parse(const std::string& text, const std::string& origin) {
  ModelGraph g;
  g.origin_ = origin;
  std::istringstream in(text);
  int number = 0;
  for (std::string raw; std::getline(in, raw);) {
    ++number;
    const std::string line = trim(raw.substr(0, raw.find('#')));
    if (line.empty()) continue;
    const std::string at = str(origin, ":", number, ": ");
    // 'model NAME' names the model; 'model = KIND ...' is a node called model.
    if ((line.rfind("model ", 0) == 0 || line == "model") && line.find('=') == std::string::npos) {
      const std::string name = trim(line.substr(5));
      if (!g.nodes_.empty() || name.empty() || name.find_first_of(" \t") != std::string::npos)
        throw ConfigError(str(at, "'model NAME' (one word) may only come before the first node"));
      g.name_ = name;
      continue;
    }
    const std::size_t eq = line.find('=');
    if (eq == std::string::npos)
      throw ConfigError(str(at, "expected 'NAME = KIND(INPUTS) option=value ...', got '", line, "'"));
    GraphNode node;
    node.line = number;
    node.name = trim(line.substr(0, eq));
    if (node.name.find_first_of(" \t(") != std::string::npos)
      throw ConfigError(str(at, "expected 'NAME = KIND(INPUTS) option=value ...', got '", line, "'"));
    std::string rest = trim(line.substr(eq + 1));
    // KIND, then optional (INPUTS), then options.
    std::size_t k = 0;
    while (k < rest.size() && (std::isalnum(static_cast<unsigned char>(rest[k])) || rest[k] == '_')) ++k;
    node.kind = rest.substr(0, k);
    if (node.kind.empty()) throw ConfigError(str(at, "expected a layer kind after '=', got '", rest, "'"));
    rest = trim(rest.substr(k));
    if (!rest.empty() && rest[0] == '(') {
      const std::size_t close = rest.find(')');
      if (close == std::string::npos) throw ConfigError(str(at, "missing ')' after the inputs"));
      const std::string list = rest.substr(1, close - 1);
      if (trim(list).empty()) throw ConfigError(str(at, "empty input list '()'; leave it out to use the node above"));
      std::stringstream items(list);
      for (std::string item; std::getline(items, item, ',');) {
        item = trim(item);
        if (item.empty()) throw ConfigError(str(at, "empty name in the input list (", list, ")"));
        node.inputs.push_back(item);
      }
      rest = trim(rest.substr(close + 1));
    }
    std::istringstream opts(rest);
    for (std::string item; opts >> item;) {
      const std::size_t e = item.find('=');
      if (e == std::string::npos || e == 0 || e + 1 == item.size())
        throw ConfigError(str(at, "expected option=value, got '", item, "'"));
      const std::string key = item.substr(0, e);
      if (node.options.count(key)) throw ConfigError(str(at, "option ", key, " is given twice"));
      node.options[key] = item.substr(e + 1);
    }
    g.append(std::move(node));
  }
  if (g.nodes_.empty()) throw ConfigError(str(origin, ": the model has no layers"));
  return g;
}

ModelGraph ModelGraph::parse_file(const std::string& path) {
  // A regular file of at most 1 MiB: never a device, a FIFO or a directory that would block or
  // never end.
  constexpr std::size_t kMaxBytes = std::size_t{1} << 20;
  struct stat st {};
  std::ifstream in;
  if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) in.open(path, std::ios::binary);
  if (!in.is_open() || !in)
    throw ConfigError(str("cannot read the model file '", path, "'; --model takes a preset (",
                          join(preset_names(), ", "), "), mlp:IN-H1-...-OUT, or a model file"));
  std::string text(kMaxBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > kMaxBytes) throw ConfigError(str("the model file '", path, "' is larger than 1 MiB"));
  return parse(text, path);
}

std::vector<std::string> ModelGraph::preset_names() {
  std::vector<std::string> names;
  for (const auto& p : presets::all()) names.push_back(p.name);
  return names;
}

const std::string* ModelGraph::preset_text(const std::string& name) {
  for (const auto& p : presets::all())
    if (p.name == name) return &p.text;
  return nullptr;
}

ModelGraph ModelGraph::load(const std::string& model) {
  if (model.rfind("mlp:", 0) == 0) return mlp_from_sizes(model);
  if (const std::string* text = preset_text(model)) {
    ModelGraph g = parse(*text, str("models/", model, ".model"));
    g.name_ = model;
    return g;
  }
  if (model.find('/') == std::string::npos && model.find('.') == std::string::npos)
    throw ConfigError(str("unknown --model '", model, "'; choices: ", join(preset_names(), ", "),
                          ", mlp:IN-H1-...-OUT (e.g. mlp:784-1024-10), or a model file's path"));
  ModelGraph g = parse_file(model);
  return g;
}

std::string ModelGraph::to_text() const {
  std::ostringstream out;
  out << "model " << name_ << "\n";
  for (const auto& n : nodes_) {
    out << n.name << " = " << n.kind << "(" << join(n.inputs, ", ") << ")";
    for (const auto& [k, v] : n.options) out << " " << k << "=" << v;
    out << "\n";
  }
  if (label_smoothing_ > 0.0 && !nodes_.empty())
    out << "loss = " << kinds::kLoss << "(" << nodes_.back().name << ") label_smoothing=" << label_smoothing_ << "\n";
  return out.str();
}

}  // namespace drt::nn
