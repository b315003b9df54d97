#include "drtrain/nn/model_spec.hpp"

#include <cmath>
#include <random>
#include <sstream>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::nn {
namespace {

const char* kModelChoices = "mlp, cnn, or mlp:784-H1-...-10 (e.g. mlp:784-1024-10)";

std::vector<int> parse_sizes(const std::string& text, const std::string& whole) {
  if (text.empty() || text.back() == '-')
    throw ConfigError(str("--model '", whole, "': the layer sizes end with '-'; e.g. mlp:784-1024-10"));
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
  return sizes;
}

}  // namespace

ModelSpec ModelSpec::parse(const std::string& text) {
  ModelSpec spec;
  spec.name_ = text;
  if (text == "mlp" || text.rfind("mlp:", 0) == 0) {
    const std::vector<int> sizes = parse_sizes(text == "mlp" ? "784-512-256-10" : text.substr(4), text);
    if (sizes.size() < 2 || sizes.front() != 784 || sizes.back() != 10)
      throw ConfigError(str("--model '", text,
                            "': an MLP takes 784 inputs (28x28 images) and gives 10 outputs "
                            "(Fashion-MNIST's classes); e.g. mlp:784-1024-10"));
    spec.classes_ = sizes.back();
    for (std::size_t i = 1; i < sizes.size(); ++i) {
      spec.layers_.push_back({str("fc", i), "linear", {sizes[i - 1], sizes[i]}});
      if (i + 1 < sizes.size()) spec.layers_.push_back({"", "relu", {}});
    }
  } else if (text == "cnn") {
    spec.layers_ = {{"conv1", "conv", {1, 32, 5, 2}},
                    {"", "relu", {}},
                    {"", "maxpool", {2}},
                    {"conv2", "conv", {32, 64, 5, 2}},
                    {"", "relu", {}},
                    {"", "maxpool", {2}},
                    {"", "flatten", {}},
                    {"fc1", "linear", {3136, 512}},
                    {"", "relu", {}},
                    {"fc2", "linear", {512, 10}}};
  } else {
    throw ConfigError(str("unknown --model '", text, "'; choices: ", kModelChoices));
  }
  spec.finish();
  return spec;
}

void ModelSpec::finish() {
  TensorShape shape = input();
  for (const auto& layer : make_layers()) {
    shape = layer->output_shape(shape);  // throws for shapes that do not chain
  }
  if (static_cast<int>(shape.per_sample()) != classes_)
    throw ConfigError(str("--model '", name_, "' ends with ", shape.per_sample(), " outputs, expected ", classes_));
  const auto layers = make_layers();
  for (std::size_t i = 0; i < layers.size(); ++i)
    for (const ParamSpec& p : layers[i]->params()) layout_.add(layers_[i].name + "." + p.name, p.shape);
}

std::vector<std::unique_ptr<Layer>> ModelSpec::make_layers() const {
  std::vector<std::unique_ptr<Layer>> out;
  for (const LayerDesc& d : layers_) {
    if (d.kind == "linear") out.push_back(make_linear(d.args[0], d.args[1]));
    else if (d.kind == "relu") out.push_back(make_relu());
    else if (d.kind == "conv") out.push_back(make_conv2d(d.args[0], d.args[1], d.args[2], d.args[3]));
    else if (d.kind == "maxpool") out.push_back(make_maxpool2d(d.args[0]));
    else out.push_back(make_flatten());
  }
  return out;
}

std::string ModelSpec::describe() const {
  std::vector<std::string> parts;
  for (const auto& layer : make_layers()) parts.push_back(layer->describe());
  return str(name_, ": ", join(parts, ", "), " (", layout_.total(), " parameters, ",
             human_bytes(static_cast<double>(layout_.bytes())), ")");
}

void ModelSpec::init_params(std::uint64_t seed, float* host) const {
  std::mt19937_64 rng(seed);
  const double kTwoPi = 6.283185307179586;
  auto uniform = [&rng] { return (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53; };  // (0, 1)
  const auto layers = make_layers();
  std::size_t offset = 0;
  for (const auto& layer : layers)
    for (const ParamSpec& p : layer->params()) {
      std::size_t count = 1;
      for (auto d : p.shape) count *= static_cast<std::size_t>(d);
      const double stddev = p.fan_in ? std::sqrt(2.0 / static_cast<double>(p.fan_in)) : 0.0;
      for (std::size_t i = 0; i < count; ++i) {
        // Box-Muller: portable, unlike std::normal_distribution.
        const double z = p.fan_in ? std::sqrt(-2.0 * std::log(uniform())) * std::cos(kTwoPi * uniform()) : 0.0;
        host[offset + i] = static_cast<float>(z * stddev);
      }
      offset += count;
    }
}

}  // namespace drt::nn
