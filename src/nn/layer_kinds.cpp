#include "layer_kinds.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::nn::kinds {
namespace {

using T = OptionType;

std::vector<KindSpec> make_table() {
  const OptionSpec bias{"bias", T::kBool, "true"};
  const std::vector<OptionSpec> pool{
      {"kernel", T::kCount, ""}, {"stride", T::kCount, "=kernel"}, {"pad", T::kCount, "0"}};
  const OptionSpec init_std{"init_std", T::kReal, "0.02"};
  // Every kind with trainable tensors: overrides --decay-rule for them (docs/MODEL_FORMAT.md).
  const OptionSpec decay{"decay", T::kBool, "-"};
  return {
      {"linear",
       1,
       {{"out", T::kCountOrClasses, ""},
        {"in", T::kCount, "-"},
        bias,
        {"init_std", T::kReal, "-"},
        {"tie", T::kName, "-"},
        decay},
       "y = x W^T + b over each sample's values (each position's features on a sequence)"},
      {"conv2d",
       1,
       {{"out", T::kCountOrClasses, ""},
        {"kernel", T::kCount, ""},
        {"stride", T::kCount, "1"},
        {"pad", T::kCount, "0"},
        {"groups", T::kCount, "1"},
        bias,
        decay},
       "2-D convolution, square kernel"},
      {"maxpool2d", 1, pool, "max pooling"},
      {"avgpool2d", 1, pool, "average pooling (padding counts as zeros)"},
      {"global_avgpool", 1, {}, "mean over each channel's plane: N x C x 1 x 1"},
      {"batchnorm", 1, {{"eps", T::kReal, "1e-5"}, {"momentum", T::kReal, "0.1"}, decay}, "batch normalisation"},
      {"dropout", 1, {{"p", T::kReal, "0.5"}}, "inverted dropout"},
      {"relu", 1, {}, "max(x, 0)"},
      {"gelu", 1, {{"approximate", T::kWord, "none", {"none", "tanh"}}}, "x * Phi(x)"},
      {"tanh", 1, {}, "tanh(x)"},
      {"sigmoid", 1, {}, "1 / (1 + exp(-x))"},
      {"flatten", 1, {}, "N x C x H x W -> N x CHW x 1 x 1"},
      {"add", Layer::kAnyInputs, {}, "sum of two or more inputs of one shape"},
      {"concat", Layer::kAnyInputs, {}, "concatenation along channels"},
      {"embedding",
       1,
       {{"vocab", T::kCountOrClasses, "classes"}, {"dim", T::kCount, ""}, init_std, decay},
       "token ids -> rows of a [vocab, dim] table"},
      {"pos_embedding",
       1,
       {{"context", T::kCount, "0"}, init_std, decay},
       "adds rows 0..T-1 of a [context, dim] table to a sequence"},
      {"layernorm", 1, {{"eps", T::kReal, "1e-5"}, bias, decay}, "layer normalisation over the last axis"},
      {"attention",
       1,
       {{"heads", T::kCount, ""}, {"dropout", T::kReal, "0"}},
       "causal multi-head self-attention: [T, 3D] q, k, v -> [T, D]"},
      {kLoss, 1, {{"label_smoothing", T::kReal, "0"}}, "the loss of the logits (last line only)"},
  };
}

bool parse_long(const std::string& text, long long& value) {
  if (text.empty() || text[0] == '-' || text[0] == '+') return false;
  errno = 0;
  char* end = nullptr;
  value = std::strtoll(text.c_str(), &end, 10);
  return errno == 0 && end && *end == '\0';
}

bool parse_real(const std::string& text, double& value) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  value = std::strtod(text.c_str(), &end);
  return errno == 0 && end && *end == '\0' && std::isfinite(value);
}

const OptionSpec* option(const KindSpec& spec, const std::string& name) {
  for (const auto& o : spec.options)
    if (o.name == name) return &o;
  return nullptr;
}

std::string option_names(const KindSpec& spec) {
  std::vector<std::string> n;
  for (const auto& o : spec.options) n.push_back(o.name);
  return n.empty() ? std::string("none") : join(n, ", ");
}

void check_value(const OptionSpec& o, const std::string& value, const std::string& where) {
  long long n = 0;
  double r = 0.0;
  switch (o.type) {
    case T::kCount:
    case T::kCountOrClasses:
      if (o.type == T::kCountOrClasses && value == "classes") return;
      if (!parse_long(value, n) || n > (1 << 24))
        throw ConfigError(str(where, "option ", o.name, "=", value, " is not a whole number between 0 and 16777216",
                              o.type == T::kCountOrClasses ? " (or 'classes', the data set's class count)" : ""));
      return;
    case T::kBool:
      if (value != "true" && value != "false")
        throw ConfigError(str(where, "option ", o.name, "=", value, " must be true or false"));
      return;
    case T::kReal:
      if (!parse_real(value, r)) throw ConfigError(str(where, "option ", o.name, "=", value, " is not a number"));
      return;
    case T::kWord:
      for (const auto& w : o.words)
        if (value == w) return;
      throw ConfigError(str(where, "option ", o.name, "=", value, " must be one of: ", join(o.words, ", ")));
    case T::kName: return;  // ModelGraph checks that the node is defined above
  }
}

}  // namespace

const std::vector<KindSpec>& all() {
  static const std::vector<KindSpec> table = make_table();
  return table;
}

const KindSpec* find(const std::string& kind) {
  for (const auto& k : all())
    if (k.kind == kind) return &k;
  return nullptr;
}

std::string names() {
  std::vector<std::string> n;
  for (const auto& k : all()) n.push_back(k.kind);
  return join(n, ", ");
}

void check_options(const KindSpec& spec, const GraphNode& node, const std::string& where) {
  for (const auto& [name, value] : node.options) {
    const OptionSpec* o = option(spec, name);
    if (!o) throw ConfigError(str(where, spec.kind, " has no option '", name, "'; its options: ", option_names(spec)));
    check_value(*o, value, where);
  }
  for (const auto& o : spec.options)
    if (o.fallback.empty() && !node.options.count(o.name))
      throw ConfigError(str(where, spec.kind, " needs option ", o.name, "=...; its options: ", option_names(spec)));
}

Options::Options(const KindSpec& spec, const GraphNode& node, int classes, std::string where)
    : spec_(spec), node_(node), classes_(classes), where_(std::move(where)) {}

bool Options::given(const std::string& name) const { return node_.options.count(name) > 0; }

std::string Options::text(const std::string& name) const {
  const auto it = node_.options.find(name);
  if (it != node_.options.end()) return it->second;
  const OptionSpec* o = option(spec_, name);
  DRT_ASSERT(o && !o->fallback.empty(), "option without default");
  if (o->fallback[0] == '=') return text(o->fallback.substr(1));
  return o->fallback;
}

int Options::count(const std::string& name) const {
  const std::string t = text(name);
  if (t == "classes") return classes_;
  long long n = 0;
  parse_long(t, n);
  return static_cast<int>(n);
}

bool Options::flag(const std::string& name) const { return text(name) == "true"; }

double Options::real(const std::string& name) const {
  double r = 0.0;
  parse_real(text(name), r);
  return r;
}

std::unique_ptr<Layer> make_layer(const GraphNode& node, const std::vector<TensorShape>& in, int classes,
                                  const std::string& where) {
  const KindSpec* spec = find(node.kind);
  DRT_ASSERT(spec, "unchecked layer kind");
  const Options o(*spec, node, classes, where);
  const std::string& k = node.kind;
  const TensorShape& x = in.at(0);
  const auto positive = [&](const char* name) {
    const int v = o.count(name);
    if (v < 1) throw ConfigError(str(where, k, " option ", name, "=", v, " must be at least 1"));
    return v;
  };
  const auto std_dev = [&](const char* name) {
    const double v = o.real(name);
    if (!(v > 0.0)) throw ConfigError(str(where, k, " option ", name, "=", v, " must be positive"));
    return v;
  };
  // Layers for images only: a sequence would be read as channels x 1 x features.
  static const char* const kImageKinds[] = {"conv2d",         "maxpool2d", "avgpool2d",
                                            "global_avgpool", "batchnorm", "concat"};
  for (const char* image_kind : kImageKinds)
    for (const TensorShape& s : in)
      if (k == image_kind && s.sequence)
        throw ConfigError(str(where, k, " takes images (C x H x W), but its input is a sequence (", s.str(),
                              "); over a sequence use linear, layernorm, attention, activations, dropout and add"));
  if (k == "linear") {
    const int features = x.features();
    if (o.given("in") && o.count("in") != features)
      throw ConfigError(str(where, "linear in=", o.count("in"), " but its input has ", features,
                            x.sequence ? " features per position (" : " values per sample (", x.str(), ")"));
    LinearOptions l;
    l.in = features, l.out = positive("out"), l.bias = o.flag("bias");
    l.init_std = o.given("init_std") ? std_dev("init_std") : 0.0;
    l.tied = o.given("tie");
    return make_linear(l);
  }
  if (k == "embedding") return make_embedding(positive("vocab"), positive("dim"), std_dev("init_std"));
  if (k == "pos_embedding") {
    const int context = o.count("context");
    return make_position_embedding(context > 0 ? context : x.c, x.sequence ? x.w : 1, std_dev("init_std"));
  }
  if (k == "layernorm") return make_layernorm(x.features(), static_cast<float>(o.real("eps")), o.flag("bias"));
  if (k == "attention") return make_attention(positive("heads"), static_cast<float>(o.real("dropout")));
  if (k == "conv2d") {
    Conv2dOptions c;
    c.in_channels = x.c, c.out_channels = positive("out"), c.kernel = positive("kernel");
    c.stride = positive("stride"), c.pad = o.count("pad"), c.groups = positive("groups"), c.bias = o.flag("bias");
    return make_conv2d(c);
  }
  if (k == "maxpool2d" || k == "avgpool2d")
    return make_pool2d(k == "maxpool2d" ? PoolKind::kMax : PoolKind::kAverage,
                       {positive("kernel"), positive("stride"), o.count("pad")});
  if (k == "global_avgpool") return make_global_avgpool();
  if (k == "batchnorm")
    return make_batchnorm(x.c, static_cast<float>(o.real("eps")), static_cast<float>(o.real("momentum")));
  if (k == "dropout") return make_dropout(static_cast<float>(o.real("p")));
  if (k == "relu") return make_relu();
  if (k == "gelu")
    return make_activation(o.text("approximate") == "tanh" ? backend::Activation::kGeluTanh
                                                           : backend::Activation::kGelu);
  if (k == "tanh") return make_activation(backend::Activation::kTanh);
  if (k == "sigmoid") return make_activation(backend::Activation::kSigmoid);
  if (k == "flatten") return make_flatten();
  if (k == "add") return make_add();
  if (k == "concat") return make_concat();
  throw Error(str(where, "layer kind ", k, " cannot be built"));
}

}  // namespace drt::nn::kinds
