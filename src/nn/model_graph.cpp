#include "drtrain/nn/model_graph.hpp"

#include <sys/stat.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

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

// "gpt:L-H-D[-C]" -> the gpt2 preset with L blocks, H heads, width D and a position table of C
// rows (0 or left out: the data's context).
static ModelGraph gpt_from_sizes(const std::string& whole) {
  const std::string text = whole.substr(4);
  std::vector<long long> sizes;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, '-');) {
    long long v = -1;
    try {
      v = parse_count(item, "--model");
    } catch (const ConfigError&) {
      v = -1;
    }
    if (v < 1 || v > (1 << 20))
      throw ConfigError(str("--model '", whole, "': '", item, "' is not a size between 1 and 1048576; gpt:L-H-D or ",
                            "gpt:L-H-D-C (blocks, heads, width, context), e.g. gpt:6-6-384"));
    sizes.push_back(v);
  }
  if ((sizes.size() != 3 && sizes.size() != 4) || text.empty() || text.back() == '-')
    throw ConfigError(str("--model '", whole, "': give blocks, heads and width (and optionally the context), e.g. ",
                          "gpt:6-6-384 or gpt:12-12-768-1024"));
  if (sizes[2] % sizes[1] != 0)
    throw ConfigError(
        str("--model '", whole, "': the width ", sizes[2], " is not a multiple of the ", sizes[1], " heads"));
  const std::map<std::string, std::string> lets{{"L", std::to_string(sizes[0])},
                                                {"H", std::to_string(sizes[1])},
                                                {"D", std::to_string(sizes[2])},
                                                {"C", std::to_string(sizes.size() == 4 ? sizes[3] : 0)}};
  ModelGraph g = ModelGraph::parse(*ModelGraph::preset_text("gpt2"), "models/gpt2.model", lets);
  return g;
}

std::string ModelGraph::where(const GraphNode& node) const {
  if (node.line > 0 && !node.context.empty()) return str(origin_, ":", node.line, " (", node.context, "): ");
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
  const auto tie = node.options.find("tie");
  if (tie != node.options.end()) {
    const GraphNode* owner = nullptr;
    for (const auto& n : nodes_) {
      if (n.name == tie->second) owner = &n;
      const auto other = n.options.find("tie");
      if (other != n.options.end() && other->second == tie->second)
        throw ConfigError(str(at, "tie=", tie->second, ": '", n.name, "' is tied to it already (one head per table)"));
    }
    if (!owner)
      throw ConfigError(str(at, "tie=", tie->second,
                            " names no node defined above (tie= names the embedding whose table "
                            "this linear uses as its weight)"));
    if (owner->kind != "embedding")
      throw ConfigError(str(at, "tie=", tie->second, ": '", tie->second, "' is a ", owner->kind,
                            "; tie= names an embedding (its [vocab, dim] table is this linear's [out, in] weight)"));
  }
  if (node.kind == kinds::kLoss && (nodes_.empty() || node.inputs.at(0) != nodes_.back().name))
    throw ConfigError(str(at, kinds::kLoss, " must take the node just above it (the logits)"));
  kinds::check_options(*spec, node, at);
}

ModelGraph& ModelGraph::add(const std::string& name, const std::string& kind, std::vector<std::string> inputs,
                            std::map<std::string, std::string> options) {
  append(GraphNode{name, kind, std::move(inputs), std::move(options), 0, {}});
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

// The model-file reader: comments and blank lines dropped, then the lines in order. 'let NAME =
// EXPR' defines a value, 'repeat VAR = A..B {' ... '}' repeats the lines between for VAR = A..B,
// and '{EXPR}' anywhere in a node's line is replaced by the expression's value (numbers, the
// names of let and repeat variables, + - * / ( ) and sqrt; {in}: the node above the current
// iteration's first line). Each node line is then parsed and appended, so '{in}' and "the node
// above" see the nodes as expanded so far.
class ModelGraph::Parser {
 public:
  Parser(ModelGraph& g, const std::string& text, std::string origin, std::map<std::string, std::string> lets)
      : g_(g), origin_(std::move(origin)), lets_(std::move(lets)) {
    std::istringstream in(text);
    int number = 0;
    for (std::string raw; std::getline(in, raw);) {
      ++number;
      std::string line = trim(raw.substr(0, raw.find('#')));
      if (!line.empty()) lines_.push_back({number, std::move(line)});
    }
  }

  void run() {
    block(0, lines_.size());
    for (const auto& [name, value] : lets_)
      if (!used_.count(name))
        throw ConfigError(str(origin_, ": the model has no 'let ", name, " = ...' line to set to ", value));
  }

 private:
  struct Line {
    int number;
    std::string text;
  };
  // Limits that keep a hostile file from running for ever or overflowing the stack.
  static constexpr std::size_t kMaxExpanded = std::size_t{1} << 22;  // iterations and node lines
  static constexpr std::size_t kMaxDepth = 16;                       // nested repeat blocks

  std::string at(const Line& l) const {
    if (context_.empty()) return str(origin_, ":", l.number, ": ");
    return str(origin_, ":", l.number, " (", join(context_, ", "), "): ");
  }

  // "let" or "repeat" as the first word of a statement (a node may still be called let: 'let = relu').
  static bool statement(const std::string& text, const std::string& word) {
    if (text.compare(0, word.size(), word) != 0 || text.size() == word.size()) return false;
    if (!std::isspace(static_cast<unsigned char>(text[word.size()]))) return false;
    return trim(text.substr(word.size()))[0] != '=';
  }

  static bool identifier(const std::string& s) {
    if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
    for (char ch : s)
      if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_')) return false;
    return true;
  }

  void block(std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      const Line& l = lines_[i];
      if (statement(l.text, "let")) {
        let(l);
      } else if (statement(l.text, "repeat")) {
        i = repeat(i);
      } else if (l.text == "}") {
        throw ConfigError(str(at(l), "'}' closes no repeat block"));
      } else {
        if (++expanded_ > kMaxExpanded)
          throw ConfigError(str(at(l), "the repeat blocks expand to more than ", kMaxExpanded, " lines"));
        g_.parse_node_line(substitute(l), l.number, join(context_, ", "), at(l));
      }
    }
  }

  void let(const Line& l) {
    const std::string rest = trim(l.text.substr(3));
    const std::size_t eq = rest.find('=');
    const std::string name = trim(rest.substr(0, eq));
    if (eq == std::string::npos || !identifier(name) || trim(rest.substr(eq + 1)).empty())
      throw ConfigError(str(at(l), "expected 'let NAME = VALUE' (e.g. let D = 768), got '", l.text, "'"));
    if (!context_.empty())
      throw ConfigError(str(at(l), "'let' inside a repeat block; define ", name, " before the block"));
    if (name == "in") throw ConfigError(str(at(l), "'in' is the name of a repeat iteration's input; choose another"));
    if (vars_.count(name)) throw ConfigError(str(at(l), "'", name, "' is defined twice"));
    const auto given = lets_.find(name);
    if (given != lets_.end()) used_.insert(name);
    vars_[name] = evaluate(l, given != lets_.end() ? given->second : trim(rest.substr(eq + 1)));
  }

  // 'repeat VAR = A..B {' at lines_[open]; returns the index of its '}'.
  std::size_t repeat(std::size_t open) {
    const Line& l = lines_[open];
    const std::string usage = "expected 'repeat VAR = FIRST..LAST {' (e.g. repeat i = 0..L-1 {), got '";
    const std::string rest = trim(l.text.substr(6));
    const std::size_t eq = rest.find('='), dots = rest.find("..");
    if (eq == std::string::npos || dots == std::string::npos || dots < eq || rest.back() != '{')
      throw ConfigError(str(at(l), usage, l.text, "'"));
    const std::string var = trim(rest.substr(0, eq));
    if (!identifier(var)) throw ConfigError(str(at(l), usage, l.text, "'"));
    if (var == "in" || vars_.count(var))
      throw ConfigError(str(at(l), "repeat variable '", var, "' is already a name here; choose another"));
    if (context_.size() >= kMaxDepth) throw ConfigError(str(at(l), "repeat blocks nest deeper than ", kMaxDepth));
    const long long first = whole(l, trim(rest.substr(eq + 1, dots - eq - 1)));
    const long long last = whole(l, trim(rest.substr(dots + 2, rest.size() - dots - 3)));
    if (last < first)
      throw ConfigError(
          str(at(l), "repeat ", var, " = ", first, "..", last, " is empty (the last value is below the first)"));
    if (last - first >= static_cast<long long>(kMaxExpanded))
      throw ConfigError(
          str(at(l), "repeat ", var, " = ", first, "..", last, " has more than ", kMaxExpanded, " iterations"));
    // The matching '}', counting the blocks opened inside.
    std::size_t close = open + 1;
    for (int depth = 1; close < lines_.size(); ++close) {
      if (statement(lines_[close].text, "repeat")) ++depth;
      if (lines_[close].text == "}" && --depth == 0) break;
    }
    if (close == lines_.size()) throw ConfigError(str(at(l), "this repeat block has no closing '}' line"));
    const auto saved_in = vars_.find("in") == vars_.end() ? std::string() : vars_["in"];
    for (long long v = first; v <= last; ++v) {
      if (++expanded_ > kMaxExpanded)
        throw ConfigError(str(at(l), "the repeat blocks expand to more than ", kMaxExpanded, " lines"));
      vars_[var] = std::to_string(v);
      vars_["in"] = g_.nodes_.empty() ? std::string(kInput) : g_.nodes_.back().name;
      context_.push_back(str(var, "=", v));
      block(open + 1, close);
      context_.pop_back();
    }
    vars_.erase(var);
    if (saved_in.empty()) vars_.erase("in");
    else vars_["in"] = saved_in;
    return close;
  }

  long long whole(const Line& l, const std::string& expr) {
    const std::string v = evaluate(l, expr);
    long long n = 0;
    try {
      std::size_t used = 0;
      n = std::stoll(v, &used);
      if (used != v.size()) throw std::invalid_argument(v);
    } catch (const std::exception&) {
      throw ConfigError(str(at(l), "'", expr, "' = ", v, " is not a whole number"));
    }
    return n;
  }

  // The line with each {EXPR} replaced by its value.
  std::string substitute(const Line& l) {
    std::string out;
    for (std::size_t i = 0; i < l.text.size(); ++i) {
      if (l.text[i] == '}') throw ConfigError(str(at(l), "'}' without '{' in '", l.text, "'"));
      if (l.text[i] != '{') {
        out += l.text[i];
        continue;
      }
      const std::size_t close = l.text.find('}', i);
      if (close == std::string::npos || l.text.find('{', i + 1) < close)
        throw ConfigError(str(at(l), "'{' without its '}' in '", l.text, "'"));
      out += evaluate(l, trim(l.text.substr(i + 1, close - i - 1)));
      i = close;
    }
    return out;
  }

  // Expressions: numbers, names, + - * / ( ) and sqrt(...); a name alone may be a node name
  // ({in}). Values are doubles, written as whole numbers when they are, else in the shortest
  // form that reads back exactly.
  std::string evaluate(const Line& l, const std::string& expr) {
    if (expr.empty()) throw ConfigError(str(at(l), "empty '{}'"));
    if (identifier(expr)) {
      const auto it = vars_.find(expr);
      if (it != vars_.end()) return it->second;
    }
    Expression e{*this, l, expr, 0, 0};
    const double v = e.sum();
    e.skip();
    if (e.pos != expr.size()) e.fail("unexpected '" + expr.substr(e.pos) + "'");
    if (!std::isfinite(v)) e.fail("the value is not finite");
    if (std::abs(v) < 1e15 && v == std::floor(v)) return std::to_string(static_cast<long long>(v));
    char buffer[64];
    for (int digits = 1; digits <= 17; ++digits) {
      std::snprintf(buffer, sizeof buffer, "%.*g", digits, v);
      if (std::strtod(buffer, nullptr) == v) break;
    }
    return buffer;
  }

  struct Expression {
    Parser& p;
    const Line& l;
    const std::string& text;
    std::size_t pos;
    int depth = 0;
    static constexpr int kMaxNesting = 64;  // parentheses and signs: no stack overflow on hostile text
    [[noreturn]] void fail(const std::string& what) const {
      std::vector<std::string> names;
      for (const auto& [name, value] : p.vars_) names.push_back(name);
      throw ConfigError(str(p.at(l), "in {", text, "}: ", what,
                            names.empty() ? std::string() : str("; names defined here: ", join(names, ", "))));
    }
    void skip() {
      while (pos < text.size() && std::isspace(static_cast<unsigned char>(text[pos]))) ++pos;
    }
    bool take(char ch) {
      skip();
      if (pos < text.size() && text[pos] == ch) return ++pos, true;
      return false;
    }
    double sum() {
      double v = product();
      for (;;) {
        if (take('+')) v += product();
        else if (take('-')) v -= product();
        else return v;
      }
    }
    double product() {
      double v = factor();
      for (;;) {
        if (take('*')) {
          v *= factor();
        } else if (take('/')) {
          const double d = factor();
          if (d == 0.0) fail("division by zero");
          v /= d;
        } else {
          return v;
        }
      }
    }
    double factor() {
      if (++depth > kMaxNesting) fail("nested too deeply");
      const double v = operand();
      --depth;
      return v;
    }
    double operand() {
      if (take('-')) return -factor();
      if (take('(')) {
        const double v = sum();
        if (!take(')')) fail("missing ')'");
        return v;
      }
      skip();
      const std::size_t start = pos;
      if (pos < text.size() && (std::isdigit(static_cast<unsigned char>(text[pos])) || text[pos] == '.')) {
        char* end = nullptr;
        const double v = std::strtod(text.c_str() + pos, &end);
        pos = static_cast<std::size_t>(end - text.c_str());
        if (pos == start) fail("expected a number");
        return v;
      }
      while (pos < text.size() && (std::isalnum(static_cast<unsigned char>(text[pos])) || text[pos] == '_')) ++pos;
      const std::string name = text.substr(start, pos - start);
      if (name.empty()) fail(pos < text.size() ? str("unexpected '", text[pos], "'") : "an operand is missing");
      if (name == "sqrt") {
        if (!take('(')) fail("sqrt needs '('");
        const double v = sum();
        if (!take(')')) fail("missing ')'");
        if (v < 0.0) fail("sqrt of a negative number");
        return std::sqrt(v);
      }
      const auto it = p.vars_.find(name);
      if (it == p.vars_.end() && name == "in")
        fail("'in' (a repeat iteration's input) exists only inside a repeat block");
      if (it == p.vars_.end()) fail(str("unknown name '", name, "'"));
      char* end = nullptr;
      const double v = std::strtod(it->second.c_str(), &end);
      if (it->second.empty() || *end != '\0') fail(str("'", name, "' is ", it->second, ", not a number"));
      return v;
    }
  };

  ModelGraph& g_;
  std::string origin_;
  std::map<std::string, std::string> lets_;  // overrides of let values
  std::set<std::string> used_;
  std::vector<Line> lines_;
  std::map<std::string, std::string> vars_;  // let and repeat variables, and "in": their values as text
  std::vector<std::string> context_;         // "i=3" per enclosing repeat block
  std::size_t expanded_ = 0;
};

ModelGraph ModelGraph::parse(const std::string& text, const std::string& origin,
                             const std::map<std::string, std::string>& lets) {
  ModelGraph g;
  g.origin_ = origin;
  Parser(g, text, origin, lets).run();
  if (g.nodes_.empty()) throw ConfigError(str(origin, ": the model has no layers"));
  return g;
}

void ModelGraph::parse_node_line(const std::string& line, int number, const std::string& context,
                                 const std::string& at) {
  // 'model NAME' names the model; 'model = KIND ...' is a node called model.
  if ((line.rfind("model ", 0) == 0 || line == "model") && line.find('=') == std::string::npos) {
    const std::string name = trim(line.substr(5));
    if (!nodes_.empty() || name.empty() || name.find_first_of(" \t") != std::string::npos)
      throw ConfigError(str(at, "'model NAME' (one word) may only come before the first node"));
    name_ = name;
    return;
  }
  const std::size_t eq = line.find('=');
  if (eq == std::string::npos)
    throw ConfigError(str(at, "expected 'NAME = KIND(INPUTS) option=value ...', got '", line, "'"));
  GraphNode node;
  node.line = number;
  node.context = context;
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
  append(std::move(node));
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
                          join(preset_names(), ", "), "), mlp:IN-H1-...-OUT, gpt:L-H-D, or a model file"));
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
  if (model.rfind("gpt:", 0) == 0) {
    ModelGraph g = gpt_from_sizes(model);
    g.name_ = model;
    return g;
  }
  if (const std::string* text = preset_text(model)) {
    ModelGraph g = parse(*text, str("models/", model, ".model"));
    g.name_ = model;
    return g;
  }
  if (model.find('/') == std::string::npos && model.find('.') == std::string::npos)
    throw ConfigError(str("unknown --model '", model, "'; choices: ", join(preset_names(), ", "),
                          ", mlp:IN-H1-...-OUT (e.g. mlp:784-1024-10), gpt:L-H-D (e.g. gpt:6-6-384), or a model "
                          "file's path"));
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
