// Model files and graphs: the parser's errors (each names the file, the line and the problem),
// the presets, shapes from the data set, and the graph executor (Network) on graphs that
// sequential models never exercise: fan-out and residual adds, concat, views, batch norm state,
// dropout's independence of the layout. Layers one by one are checked against float64
// references in test_layers.cpp and test_backend_ops.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "drtrain/backend/backend.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/nn/model_graph.hpp"
#include "drtrain/nn/model_spec.hpp"
#include "drtrain/nn/network.hpp"

namespace drt::nn {
namespace {

using FVec = std::vector<float>;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError)";
}

// ---------------------------------------------------------------- parsing

struct BadFile {
  const char* text;
  std::vector<const char*> mentions;
};
void PrintTo(const BadFile& b, std::ostream* os) { *os << "'" << b.text << "'"; }

class ModelFileRejects : public testing::TestWithParam<BadFile> {};

TEST_P(ModelFileRejects, WithTheFileTheLineAndTheProblem) {
  const BadFile& bad = GetParam();
  const std::string message = error_of([&] { ModelSpec(ModelGraph::parse(bad.text, "net.model"), {1, 1, 8, 8}, 10); });
  for (const char* part : bad.mentions) EXPECT_NE(message.find(part), std::string::npos) << message;
}

INSTANTIATE_TEST_SUITE_P(
    Defects, ModelFileRejects,
    testing::Values(
        BadFile{"fc = linear out=10\nx = conv3d(fc) out=3", {"net.model:2:", "unknown layer kind 'conv3d'", "conv2d"}},
        BadFile{"c = conv2d out=4 kernel=3 strid=2\nfc = linear out=10",
                {"net.model:1:", "no option 'strid'", "stride"}},
        BadFile{"c = conv2d out=4\nfc = linear out=10", {"net.model:1:", "needs option kernel"}},
        BadFile{"c = conv2d out=four kernel=3\nfc = linear out=10", {"net.model:1:", "out=four", "whole number"}},
        BadFile{"fc = linear out=10 bias=maybe", {"net.model:1:", "true or false"}},
        BadFile{"a = relu\nfc = linear(b) out=10", {"net.model:2:", "input 'b' is not defined above"}},
        BadFile{"a = relu\na = linear out=10", {"net.model:2:", "'a' is defined twice", "line 1"}},
        BadFile{"a = relu\nfc = linear out=10\nl = softmax_cross_entropy(fc)\nb = relu", {"net.model:4:", "follow"}},
        BadFile{"a = relu\nfc = linear(input) out=10", {"net.model:1:", "'a' is not used"}},
        BadFile{"fc = linear out=7", {"net.model:1:", "7 values per sample", "10 classes"}},
        BadFile{"a = add(input)\nfc = linear out=10", {"net.model:1:", "two or more inputs"}},
        BadFile{"a = relu(input, input)\nfc = linear out=10", {"net.model:1:", "takes one input"}},
        BadFile{"fc = linear in=100 out=10", {"net.model:1:", "in=100", "64 values per sample"}},
        BadFile{"c = conv2d out=4 kernel=9\nfc = linear out=10", {"net.model:1:", "larger than the padded image"}},
        BadFile{"c = conv2d out=4 kernel=3 groups=3\nfc = linear out=10", {"net.model:1:", "groups=3", "divide"}},
        BadFile{"d = dropout p=1\nfc = linear out=10", {"net.model:1:", "p=1", "[0, 1)"}},
        BadFile{"c = conv2d out=3 kernel=1\ns = add(c, input)\nfc = linear out=10", {"net.model:2:", "one shape"}},
        BadFile{"fc = linear out=10\nl = softmax_cross_entropy(fc) label_smoothing=1.5", {"net.model:2:", "[0, 1)"}},
        BadFile{"input = relu\nfc = linear out=10", {"net.model:1:", "'input' is the data"}},
        BadFile{"fc linear out=10", {"net.model:1:", "NAME = KIND"}},
        BadFile{"fc = linear(input out=10", {"net.model:1:", "missing ')'"}},
        BadFile{"# only a comment\n", {"net.model", "no layers"}},
        // Found by fuzz_model: a padding this large made the flattened size wrap around int.
        BadFile{"c = conv2d out=64 kernel=5 pad=100000\nfc = linear out=10",
                {"net.model:1:", "64x200004x200004", "larger than 2^31 - 1"}}),
    [](const testing::TestParamInfo<BadFile>& p) { return "case" + std::to_string(p.index); });

TEST(ModelGraph, UnknownModelNamesListThePresets) {
  const std::string m = error_of([] { ModelGraph::load("resnet"); });
  for (const char* part : {"'resnet'", "mlp", "cnn", "resnet20", "model file"})
    EXPECT_NE(m.find(part), std::string::npos) << m;
  const std::string missing = error_of([] { ModelGraph::load("/nonexistent/net.model"); });
  EXPECT_NE(missing.find("cannot read the model file '/nonexistent/net.model'"), std::string::npos) << missing;
}

TEST(ModelGraph, CommentsDefaultInputsAndTextRoundTrip) {
  const ModelGraph g = ModelGraph::parse(
      "# a comment\nmodel tiny\n  c = conv2d(input) out=2 kernel=3 pad=1  # trailing\nr = relu\n"
      "s = add(r, c)\nfc = linear out=classes\nloss = softmax_cross_entropy(fc) label_smoothing=0.25\n",
      "tiny.model");
  EXPECT_EQ(g.name(), "tiny");
  ASSERT_EQ(g.nodes().size(), 4u);
  EXPECT_EQ(g.nodes()[1].inputs, std::vector<std::string>{"c"});
  EXPECT_EQ(g.nodes()[2].inputs, (std::vector<std::string>{"r", "c"}));
  EXPECT_EQ(g.nodes()[3].line, 6);
  EXPECT_DOUBLE_EQ(g.label_smoothing(), 0.25);
  const ModelGraph again = ModelGraph::parse(g.to_text(), "again");
  EXPECT_EQ(again.to_text(), g.to_text());
  EXPECT_DOUBLE_EQ(again.label_smoothing(), 0.25);
  // A model file on disk, by path.
  const std::string path = testing::TempDir() + "tiny.model";
  std::ofstream(path) << g.to_text();
  EXPECT_EQ(ModelGraph::load(path).to_text(), g.to_text());
}

// A node may be called "model": 'model = KIND' is a node, 'model NAME' the model's name (found by
// fuzz_model: "model= dropout p=0." parsed, but its to_text() did not parse back).
TEST(ModelGraph, ANodeCalledModelRoundTrips) {
  const ModelGraph g = ModelGraph::parse("model= dropout p=0.\n", "m.model");
  ASSERT_EQ(g.nodes().size(), 1u);
  EXPECT_EQ(g.nodes()[0].name, "model");
  const ModelGraph again = ModelGraph::parse(g.to_text(), "again");
  EXPECT_EQ(again.to_text(), g.to_text());
  EXPECT_EQ(again.nodes()[0].name, "model");
}

TEST(ModelGraph, BuiltInCppChecksLikeTheParser) {
  ModelGraph g("cpp");
  g.add("c", "conv2d", {"input"}, {{"out", "4"}, {"kernel", "3"}});
  const std::string m = error_of([&] { g.add("x", "linear", {"nope"}, {{"out", "3"}}); });
  EXPECT_NE(m.find("model 'cpp', node 'x'"), std::string::npos) << m;
  EXPECT_NE(m.find("input 'nope'"), std::string::npos) << m;
  g.add("fc", "linear", {}, {{"out", "classes"}});
  const ModelSpec spec(g, {1, 3, 9, 9}, 5);
  EXPECT_EQ(spec.layout().find("fc.weight")->shape, (std::vector<std::int64_t>{5, 196}));
}

// ---------------------------------------------------------------- presets

TEST(Presets, EveryPresetBuildsOnFashionMnistAndOnColourImages) {
  for (const std::string& name : ModelGraph::preset_names()) {
    SCOPED_TRACE(name);
    const ModelSpec grey = ModelSpec::parse(name);
    EXPECT_EQ(grey.wiring().back().output.per_sample(), 10u);
    const ModelSpec colour = ModelSpec::parse(name, {1, 3, 32, 32}, 100);
    EXPECT_EQ(colour.wiring().back().output.per_sample(), 100u);
  }
}

TEST(Presets, Resnet20HasThePapersShape) {
  // Counted independently (python, from the architecture): 3x3 conv 16; 3 stages of 3 basic
  // blocks at 16/32/64 channels; 1x1 conv + BN shortcuts into stages 2 and 3; linear 64 -> 10.
  const ModelSpec grey = ModelSpec::parse("resnet20");
  EXPECT_EQ(grey.layout().total() - grey.layout().state_elements(), 272186u);  // parameters
  EXPECT_EQ(grey.layout().state_elements(), 1568u);                            // 21 batch norms, mean and variance
  const ModelSpec colour = ModelSpec::parse("resnet20", {1, 3, 32, 32}, 10);
  EXPECT_EQ(colour.layout().total() - colour.layout().state_elements(), 272474u);
  // Stride 2 twice: 28 -> 14 -> 7 before the pooling; 32 -> 16 -> 8.
  const auto shape_of = [](const ModelSpec& s, const std::string& node) {
    for (std::size_t i = 0; i < s.graph().nodes().size(); ++i)
      if (s.graph().nodes()[i].name == node) return s.wiring()[i].output;
    return TensorShape{};
  };
  EXPECT_EQ(shape_of(grey, "layer3.2.relu2").str(), "64x7x7");
  EXPECT_EQ(shape_of(colour, "layer3.2.relu2").str(), "64x8x8");
  EXPECT_EQ(shape_of(colour, "layer2.0.downsample.1").str(), "32x16x16");
  ASSERT_NE(grey.layout().find("layer2.0.bn1.running_var"), nullptr);
  EXPECT_TRUE(grey.layout().find("layer2.0.bn1.running_var")->state);
  EXPECT_FALSE(grey.layout().find("layer2.0.bn1.weight")->state);
  // Initial values: scales and running variances 1, shifts and running means 0.
  FVec p(grey.layout().total());
  grey.init_params(3, p.data());
  for (const char* name : {"bn1.weight", "bn1.running_var"})
    for (std::size_t i = 0; i < 16; ++i) EXPECT_EQ(p[grey.layout().find(name)->offset + i], 1.0f) << name;
  for (const char* name : {"bn1.bias", "bn1.running_mean"})
    for (std::size_t i = 0; i < 16; ++i) EXPECT_EQ(p[grey.layout().find(name)->offset + i], 0.0f) << name;
}

TEST(Presets, MlpFileEqualsTheSizesSyntax) {
  const ModelSpec file = ModelSpec::parse("mlp");
  const ModelSpec sizes = ModelSpec::parse("mlp:784-512-256-10");
  EXPECT_EQ(file.layout().to_text(), sizes.layout().to_text());
  FVec a(file.layout().total()), b(a.size());
  file.init_params(5, a.data());
  sizes.init_params(5, b.data());
  EXPECT_EQ(a, b);
  const std::string m = error_of([] { ModelSpec::parse("mlp:784-10", {1, 3, 32, 32}, 10); });
  EXPECT_NE(m.find("in=784"), std::string::npos) << m;
  EXPECT_NE(m.find("3072 values per sample"), std::string::npos) << m;
}

// ---------------------------------------------------------------- the graph executor

FVec normal(std::size_t n, std::uint64_t seed, double sd = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(0.0, sd);
  FVec v(n);
  for (float& x : v) x = static_cast<float>(d(rng));
  return v;
}

struct TrainRun {
  FVec grads;
  double loss = 0.0;
};

// One training pass on the CPU; params are the network's, grads come back.
TrainRun train_once(const ModelSpec& spec, const FVec& params, const FVec& x, const std::vector<std::int32_t>& y, int n,
                    const Pass& pass = {}) {
  auto cpu = backend::make_cpu_backend();
  Network net(spec, *cpu, n);
  FVec p = params, g(params.size(), std::nanf(""));
  net.bind(p.data(), g.data());
  TrainRun r;
  r.loss = net.train(x.data(), y.data(), n, 1.0f, pass).loss;
  r.grads = g;
  return r;
}

double loss_at(const ModelSpec& spec, const FVec& params, const FVec& x, const std::vector<std::int32_t>& y, int n) {
  return train_once(spec, params, x, y, n).loss;
}

// A graph with every kind of wiring: fan-out into three consumers, residual add, concat, a view
// (flatten) feeding a linear, batch norm, average pooling and smooth activations (so that
// central differences are accurate).
const char* kWiredGraph = "c1 = conv2d(input) out=3 kernel=3 pad=1\n"
                          "t = tanh\n"
                          "c2 = conv2d(t) out=3 kernel=3 pad=1 bias=false\n"
                          "bn = batchnorm(c2)\n"
                          "s = add(bn, t, t)\n"
                          "g = gelu(s)\n"
                          "cat = concat(g, t)\n"
                          "p = avgpool2d(cat) kernel=2\n"
                          "sg = sigmoid\n"
                          "f = flatten\n"
                          "fc = linear out=classes\n"
                          "loss = softmax_cross_entropy(fc) label_smoothing=0.1\n";

TEST(Network, GradientsOfAWiredGraphMatchFiniteDifferences) {
  const ModelSpec spec(ModelGraph::parse(kWiredGraph, "wired.model"), {1, 2, 6, 6}, 4);
  const int n = 3;
  const FVec x = normal(spec.input().per_sample() * n, 1);
  const std::vector<std::int32_t> y{0, 3, 1};
  FVec params(spec.layout().total());
  spec.init_params(11, params.data());
  // Perturb batch norm's scale and shift away from 1 and 0 so their gradients are generic.
  const FVec noise = normal(params.size(), 2, 0.2);
  for (const TensorSpec& t : spec.layout().tensors())
    if (!t.state)
      for (std::size_t i = t.offset; i < t.offset + t.numel; ++i) params[i] += noise[i];
  const TrainRun run = train_once(spec, params, x, y, n);
  // Central differences of the float32 loss (summed over 3 samples, about 4): steps of 1e-2
  // leave a truncation error ~1e-5 on these smooth functions and a rounding error ~4 * 2^-24 /
  // 1e-2 ~ 2e-5, so 2e-3 of the gradient's scale separates rounding from any wiring mistake (a
  // missing fan-out term or a wrong alias moves a gradient by O(1) of the scale).
  double scale = 0.0, worst = 0.0;
  std::size_t worst_at = 0;
  std::vector<double> fd(params.size(), 0.0);
  for (const TensorSpec& t : spec.layout().tensors()) {
    if (t.state) continue;
    for (std::size_t i = t.offset; i < t.offset + t.numel; ++i) {
      FVec up = params, down = params;
      const float h = 1e-2f;
      up[i] += h, down[i] -= h;
      fd[i] = (loss_at(spec, up, x, y, n) - loss_at(spec, down, x, y, n)) / (static_cast<double>(up[i]) - down[i]);
      scale = std::max(scale, std::abs(fd[i]));
    }
  }
  for (const TensorSpec& t : spec.layout().tensors()) {
    if (t.state) continue;
    for (std::size_t i = t.offset; i < t.offset + t.numel; ++i) {
      const double err = std::abs(run.grads[i] - fd[i]);
      if (err > worst) worst = err, worst_at = i;
    }
  }
  EXPECT_LE(worst, 2e-3 * scale) << "worst at element " << worst_at << ": " << run.grads[worst_at] << " vs "
                                 << fd[worst_at] << " (scale " << scale << ")";
  EXPECT_GT(scale, 1e-3);
}

TEST(Network, BatchNormWritesTheRunningStatisticsUpdateScaled) {
  const ModelSpec spec(ModelGraph::parse("bn = batchnorm(input) momentum=0.25\nfc = linear out=classes", "bn.model"),
                       {1, 2, 3, 1}, 2);
  const int n = 4;
  const FVec x = normal(spec.input().per_sample() * n, 3, 2.0);
  FVec params(spec.layout().total());
  spec.init_params(1, params.data());
  const TensorSpec& mean = *spec.layout().find("bn.running_mean");
  const TensorSpec& var = *spec.layout().find("bn.running_var");
  params[mean.offset] = 0.5f, params[var.offset + 1] = 3.0f;  // not the initial values
  Pass pass;
  pass.state_scale = 0.5f;
  const TrainRun run = train_once(spec, params, x, {0, 1, 1, 0}, n, pass);
  for (int c = 0; c < 2; ++c) {
    // Batch statistics in float64 over n samples x 3 positions.
    double sum = 0, sq = 0;
    const auto at = [c](int s, int k) {
      return static_cast<std::size_t>(s) * 6 + static_cast<std::size_t>(c) * 3 + static_cast<std::size_t>(k);
    };
    for (int s = 0; s < n; ++s)
      for (int k = 0; k < 3; ++k) sum += x[at(s, k)];
    const double mu = sum / 12;
    for (int s = 0; s < n; ++s)
      for (int k = 0; k < 3; ++k) sq += std::pow(x[at(s, k)] - mu, 2);
    const double unbiased = sq / 11;
    const double r_mean = params[mean.offset + c], r_var = params[var.offset + c];
    EXPECT_NEAR(run.grads[mean.offset + c], 0.5 * 0.25 * (mu - r_mean), 1e-6) << c;
    EXPECT_NEAR(run.grads[var.offset + c], 0.5 * 0.25 * (unbiased - r_var), 1e-5) << c;
  }
}

TEST(Network, EvaluationUsesTheRunningStatistics) {
  const ModelSpec spec(ModelGraph::parse("bn = batchnorm(input)\nfc = linear out=classes", "bn.model"), {1, 1, 1, 1},
                       2);
  auto cpu = backend::make_cpu_backend();
  Network net(spec, *cpu, 2);
  FVec p(spec.layout().total()), g(p.size());
  spec.init_params(1, p.data());
  // Scale 3, shift 1, running mean 2, running variance 4 - eps; the linear layer passes the
  // normalised value z as logit 0 and 0 as logit 1: z = 3 (x - 2) / 2 + 1 = 7 for x = 6.
  p[spec.layout().find("bn.weight")->offset] = 3.0f;
  p[spec.layout().find("bn.bias")->offset] = 1.0f;
  p[spec.layout().find("bn.running_mean")->offset] = 2.0f;
  p[spec.layout().find("bn.running_var")->offset] = 4.0f - 1e-5f;
  const TensorSpec& w = *spec.layout().find("fc.weight");
  p[w.offset] = 1.0f, p[w.offset + 1] = 0.0f;
  net.bind(p.data(), g.data());
  // Two equal samples: their batch variance is 0, so batch statistics would give z = 1 (the shift).
  const FVec x{6.0f, 6.0f};
  const std::vector<std::int32_t> y{0, 0};
  const backend::LossSums s = net.evaluate(x.data(), y.data(), 2);
  EXPECT_EQ(s.correct, 2);
  EXPECT_NEAR(s.loss, 2 * std::log1p(std::exp(-7.0)), 1e-5);
}

TEST(Network, DropoutIsTheSameWhateverTheTowerSplit) {
  // Two towers of 3 samples (first_sample 0 and 3) against one of 6: same masks, so the summed
  // gradients agree to rounding.
  const ModelSpec spec(ModelGraph::parse("fc1 = linear(input) out=16\nd = dropout p=0.5\nr = relu\nfc2 = linear "
                                         "out=classes",
                                         "drop.model"),
                       {1, 1, 4, 4}, 3);
  const int n = 6;
  const FVec x = normal(std::size_t{16} * n, 4);
  const std::vector<std::int32_t> y{0, 1, 2, 2, 1, 0};
  FVec params(spec.layout().total());
  spec.init_params(9, params.data());
  Pass pass;
  pass.seed = 77, pass.step = 12;
  const TrainRun whole = train_once(spec, params, x, y, n, pass);
  Pass first = pass, second = pass;
  second.first_sample = 3;
  const TrainRun a = train_once(spec, params, FVec(x.begin(), x.begin() + 48), {0, 1, 2}, 3, first);
  const TrainRun b = train_once(spec, params, FVec(x.begin() + 48, x.end()), {2, 1, 0}, 3, second);
  double scale = 0.0;
  for (float v : whole.grads) scale = std::max(scale, std::abs(static_cast<double>(v)));
  for (std::size_t i = 0; i < whole.grads.size(); ++i)
    EXPECT_NEAR(a.grads[i] + b.grads[i], whole.grads[i], 1e-5 * scale) << i;
  // Another step draws other masks.
  Pass later = pass;
  later.step = 13;
  const TrainRun other = train_once(spec, params, x, y, n, later);
  EXPECT_NE(other.grads, whole.grads);
}

}  // namespace
}  // namespace drt::nn
