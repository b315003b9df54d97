// Model files and graphs: the parser's errors (each names the file, the line and the problem),
// let, repeat blocks and {expressions}, the language-model kinds and weight tying, the presets
// (gpt2's parameter count), shapes from the data set, and the graph executor (Network) on graphs that
// sequential models never exercise: fan-out and residual adds, concat, views, batch norm state,
// dropout's independence of the layout. Layers one by one are checked against float64
// references in test_layers.cpp and test_backend_ops.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "drtrain/backend/backend.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
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

// ---------------------------------------------------------------- let, repeat, {expressions}

// Each error names the file, the line (and inside a repeat block the iteration) and the fix.
INSTANTIATE_TEST_SUITE_P(
    Blocks, ModelFileRejects,
    testing::Values(
        BadFile{"let D = 4\nrepeat i = 0..1 {\nh.{i} = linear out={D}\nfc = linear out=10",
                {"net.model:2:", "no closing '}'"}},
        BadFile{"fc = linear out=10\n}", {"net.model:2:", "'}' closes no repeat block"}},
        BadFile{"repeat i = 0..1 {\nlet D = 3\n}\nfc = linear(input) out=10", {"net.model:2 (i=0):", "'let' inside"}},
        BadFile{"repeat i = 0..1 {\nh.{i} = conv3d\n}\nfc = linear out=10", {"net.model:2 (i=0):", "'conv3d'"}},
        BadFile{"repeat i = 0..2 {\nh = relu\n}\nfc = linear out=10",
                {"net.model:2 (i=1):", "'h' is defined twice", "line 2"}},
        BadFile{"fc = linear out={D}", {"net.model:1:", "unknown name 'D'"}},
        BadFile{"let L = 2\nfc = linear out={L*}", {"net.model:2:", "an operand is missing", "names defined here: L"}},
        BadFile{"fc = linear out={4/0}", {"net.model:1:", "division by zero"}},
        BadFile{"fc = linear out={4", {"net.model:1:", "'{' without its '}'"}},
        BadFile{"fc = linear out=4}", {"net.model:1:", "'}' without '{'"}},
        BadFile{"a = relu(input)\nfc = add(a, {in}) out=10", {"net.model:2:", "only inside a repeat block"}},
        BadFile{"let L = 1\nlet L = 2\nfc = linear out=10", {"net.model:2:", "'L' is defined twice"}},
        BadFile{"repeat i = 3..1 {\n}\nfc = linear(input) out=10", {"net.model:1:", "empty"}},
        BadFile{"repeat i = 0..x {\n}\nfc = linear(input) out=10", {"net.model:1:", "unknown name 'x'"}},
        BadFile{"repeat i = 0..1.5 {\n}\nfc = linear(input) out=10", {"net.model:1:", "not a whole number"}},
        BadFile{"repeat i = 0..1\nfc = linear(input) out=10", {"net.model:1:", "repeat VAR = FIRST..LAST {"}},
        BadFile{"repeat i = 0..1 {\nrepeat i = 0..1 {\n}\n}\nfc = linear(input) out=10",
                {"net.model:2 (i=0):", "'i' is already a name"}},
        BadFile{"repeat i = 0..100000000 {\nx{i} = relu\n}\nfc = linear out=10", {"net.model:1:", "more than"}},
        BadFile{"let = 3\nfc = linear out=10", {"net.model:1:", "unknown layer kind '3'"}}),
    [](const testing::TestParamInfo<BadFile>& p) { return "block" + std::to_string(p.index); });

TEST(ModelGraph, RepeatBlocksExpandWithTheirVariablesAndInputs) {
  const ModelGraph g =
      ModelGraph::parse("model blocks\n"
                        "let W = 6\n"
                        "let HALF = W / 2   # 3\n"
                        "stem = linear(input) out={W}\n"
                        "repeat i = 1..2 {\n"
                        "  b{i}.fc = linear out={W}\n"
                        "  repeat j = 0..1 {\n"
                        "    b{i}.inner{j} = linear out={HALF*2 - j*0}\n"
                        "  }\n"
                        "  b{i}.sum = add(b{i}.inner1, {in})   # {in}: the node above this iteration's first line\n"
                        "}\n"
                        "head = linear out={sqrt(100)}\n",
                        "blocks.model");
  std::vector<std::string> names, firsts;
  for (const auto& n : g.nodes()) names.push_back(n.name), firsts.push_back(n.inputs[0]);
  EXPECT_EQ(names, (std::vector<std::string>{"stem", "b1.fc", "b1.inner0", "b1.inner1", "b1.sum", "b2.fc", "b2.inner0",
                                             "b2.inner1", "b2.sum", "head"}));
  EXPECT_EQ(g.nodes()[4].inputs, (std::vector<std::string>{"b1.inner1", "stem"}));
  EXPECT_EQ(g.nodes()[8].inputs, (std::vector<std::string>{"b2.inner1", "b1.sum"}));
  EXPECT_EQ(g.nodes()[5].inputs[0], "b1.sum");  // "the node above" across iterations
  EXPECT_EQ(g.nodes()[7].options.at("out"), "6");
  EXPECT_EQ(g.nodes()[9].options.at("out"), "10");
  EXPECT_EQ(g.nodes()[7].line, 8);  // lines of the file, not of the expansion
  EXPECT_EQ(g.nodes()[7].context, "i=2, j=1");
  EXPECT_EQ(g.where(g.nodes()[7]), "blocks.model:8 (i=2, j=1): ");
  const ModelGraph again = ModelGraph::parse(g.to_text(), "again");
  EXPECT_EQ(again.to_text(), g.to_text());
  EXPECT_EQ(ModelSpec(g, {1, 1, 2, 2}, 10).layout().total(), ModelSpec(again, {1, 1, 2, 2}, 10).layout().total());
  // Reals keep every digit they need.
  const ModelGraph r = ModelGraph::parse("let L = 12\nfc = linear(input) out=10 init_std={0.02/sqrt(2*L)}\n", "r");
  EXPECT_EQ(r.nodes()[0].options.at("init_std"), "0.004082482904638631");
  EXPECT_EQ(std::stod(r.nodes()[0].options.at("init_std")), 0.02 / std::sqrt(24.0));
}

TEST(ModelGraph, LetValuesCanBeSetFromOutside) {
  const std::string text = "let W = 3\nfc = linear(input) out={W}\n";
  EXPECT_EQ(ModelGraph::parse(text, "x").nodes()[0].options.at("out"), "3");
  EXPECT_EQ(ModelGraph::parse(text, "x", {{"W", "5"}}).nodes()[0].options.at("out"), "5");
  const std::string m = error_of([&] { ModelGraph::parse(text, "x.model", {{"V", "5"}}); });
  EXPECT_NE(m.find("no 'let V = ...' line"), std::string::npos) << m;
}

// ---------------------------------------------------------------- language-model kinds

TensorShape tokens(int length) { return TensorShape::seq(1, length, 1); }

INSTANTIATE_TEST_SUITE_P(
    Sequences, ModelFileRejects,
    testing::Values(
        BadFile{"e = embedding dim=4\nfc = linear out=10", {"net.model:1:", "sequence of token ids", "1x8x8"}},
        BadFile{"e = embedding\nfc = linear out=10", {"net.model:1:", "needs option dim"}},
        BadFile{"fc = linear out=10 tie=nope", {"net.model:1:", "tie=nope names no node defined above"}},
        BadFile{"c = linear(input) out=4\nfc = linear out=10 tie=c",
                {"net.model:2:", "tie=c", "is a linear", "embedding"}},
        BadFile{"g = gelu(input) approximate=fast\nfc = linear out=10", {"net.model:1:", "one of: none, tanh"}},
        BadFile{"fc = linear out=10 init_std=-1", {"net.model:1:", "init_std=-1", "positive"}}),
    [](const testing::TestParamInfo<BadFile>& p) { return "seq" + std::to_string(p.index); });

struct BadSequenceModel {
  const char* text;
  int length, classes;
  std::vector<const char*> mentions;
};
void PrintTo(const BadSequenceModel& b, std::ostream* os) { *os << "'" << b.text << "'"; }

class SequenceModelRejects : public testing::TestWithParam<BadSequenceModel> {};

TEST_P(SequenceModelRejects, WithTheLineAndTheShapes) {
  const BadSequenceModel& bad = GetParam();
  const std::string message =
      error_of([&] { ModelSpec(ModelGraph::parse(bad.text, "lm.model"), tokens(bad.length), bad.classes); });
  for (const char* part : bad.mentions) EXPECT_NE(message.find(part), std::string::npos) << message;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SequenceModelRejects,
    testing::Values(BadSequenceModel{"e = embedding(input) dim=4\nc = conv2d out=2 kernel=1\nfc = linear out=classes",
                                     8,
                                     5,
                                     {"lm.model:2:", "conv2d takes images", "8x4 seq"}},
                    BadSequenceModel{"e = embedding(input) dim=4\np = pos_embedding context=6\nfc = linear out=classes",
                                     8,
                                     5,
                                     {"lm.model:2:", "8 positions", "context=6"}},
                    BadSequenceModel{"e = embedding(input) dim=4\na = attention heads=2\nfc = linear out=classes",
                                     8,
                                     5,
                                     {"lm.model:2:", "heads=2", "8x4 seq"}},
                    BadSequenceModel{"e = embedding(input) dim=4\nfc = linear out=3",
                                     8,
                                     5,
                                     {"lm.model:2:", "3 values per position", "5 classes"}},
                    BadSequenceModel{"e = embedding(input) dim=4 vocab=7\nfc = linear out=classes tie=e",
                                     8,
                                     6,
                                     {"lm.model:2:", "tie=e", "7x4", "6x4 (out x in)"}},
                    BadSequenceModel{
                        "e = embedding(input) dim=4\nf = linear out=classes tie=e\ng = linear(e) out=classes tie=e\n"
                        "s = add(f, g)",
                        8,
                        6,
                        {"lm.model:3:", "'f' is tied to it already"}}),
    [](const testing::TestParamInfo<BadSequenceModel>& p) { return "case" + std::to_string(p.index); });

TEST(LanguageModel, SequenceShapesAndTensorsFromTheFile) {
  const ModelSpec spec(ModelGraph::parse("e = embedding(input) dim=6\n"
                                         "p = pos_embedding context=9 init_std=0.5\n"
                                         "n = layernorm bias=false\n"
                                         "qkv = linear out=18\n"
                                         "a = attention heads=3 dropout=0.1\n"
                                         "g = gelu approximate=tanh\n"
                                         "s = add(g, p)\n"
                                         "head = linear out=classes bias=false tie=e\n",
                                         "lm.model"),
                       tokens(7), 11);
  std::vector<std::string> shapes;
  for (const auto& w : spec.wiring()) shapes.push_back(w.output.str());
  EXPECT_EQ(shapes, (std::vector<std::string>{"7x6 seq", "7x6 seq", "7x6 seq", "7x18 seq", "7x6 seq", "7x6 seq",
                                              "7x6 seq", "7x11 seq"}));
  std::vector<std::string> names;
  for (const auto& t : spec.layout().tensors()) names.push_back(t.name + " " + t.shape_string());
  EXPECT_EQ(names, (std::vector<std::string>{"e.weight 11x6", "p.weight 9x6", "n.weight 6", "qkv.weight 18x6",
                                             "qkv.bias 18"}));
  EXPECT_EQ(spec.wiring().back().tied, 0);
  // Initial values: N(0, 0.02^2) for the token table (the default), N(0, 0.5^2) where the
  // file says so, He for the linear without init_std, ones for the layer norm.
  FVec p(spec.layout().total());
  spec.init_params(7, p.data());
  const auto stddev = [&](const char* name) {
    const TensorSpec& t = *spec.layout().find(name);
    double sq = 0.0;
    for (std::size_t i = t.offset; i < t.offset + t.numel; ++i) sq += static_cast<double>(p[i]) * p[i];
    return std::sqrt(sq / static_cast<double>(t.numel));
  };
  EXPECT_NEAR(stddev("e.weight"), 0.02, 0.02 * 0.5);
  EXPECT_NEAR(stddev("p.weight"), 0.5, 0.5 * 0.5);
  EXPECT_NEAR(stddev("qkv.weight"), std::sqrt(2.0 / 6), std::sqrt(2.0 / 6) * 0.5);
  EXPECT_EQ(stddev("n.weight"), 1.0);
  // The position table defaults to the data's context.
  const ModelSpec fitted(
      ModelGraph::parse("e = embedding(input) dim=2\np = pos_embedding\nfc = linear out=classes", "fit.model"),
      tokens(13), 3);
  EXPECT_EQ(fitted.layout().find("p.weight")->shape, (std::vector<std::int64_t>{13, 2}));
}

// nanoGPT's GPT-2 124M with the GPT-2 vocabulary: 124,439,808 parameters (its own count with the
// tied head, wpe included). Counted by hand: wte 50257 x 768 = 38,597,376; wpe 1024 x 768 =
// 786,432; per block ln 2 x 1536, c_attn 768 x 2304 + 2304, attn.c_proj 768 x 768 + 768, c_fc
// 768 x 3072 + 3072, mlp.c_proj 3072 x 768 + 768: 7,087,872, x 12 = 85,054,464; ln_f 1536.
TEST(Presets, Gpt2HasNanoGptsParameterCountAndNames) {
  const ModelSpec spec = ModelSpec::parse("gpt2", tokens(1024), 50257);
  EXPECT_EQ(spec.layout().total(), 124439808u);
  EXPECT_EQ(std::size_t{38597376} + 786432 + 12 * std::size_t{7087872} + 1536, 124439808u);
  EXPECT_EQ(spec.layout().state_elements(), 0u);
  const std::vector<std::pair<const char*, std::vector<std::int64_t>>> expected = {
      {"transformer.wte.weight", {50257, 768}},
      {"transformer.wpe.weight", {1024, 768}},
      {"transformer.h.0.ln_1.weight", {768}},
      {"transformer.h.0.ln_1.bias", {768}},
      {"transformer.h.0.attn.c_attn.weight", {2304, 768}},
      {"transformer.h.0.attn.c_attn.bias", {2304}},
      {"transformer.h.0.attn.c_proj.weight", {768, 768}},
      {"transformer.h.0.ln_2.weight", {768}},
      {"transformer.h.0.mlp.c_fc.weight", {3072, 768}},
      {"transformer.h.0.mlp.c_fc.bias", {3072}},
      {"transformer.h.11.mlp.c_proj.weight", {768, 3072}},
      {"transformer.h.11.mlp.c_proj.bias", {768}},
      {"transformer.ln_f.weight", {768}},
      {"transformer.ln_f.bias", {768}}};
  for (const auto& [name, shape] : expected) {
    const TensorSpec* t = spec.layout().find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->shape, shape) << name;
  }
  EXPECT_EQ(spec.layout().find("lm_head.weight"), nullptr);  // tied: transformer.wte.weight
  EXPECT_EQ(spec.layout().tensors().size(), 2u + 12 * 12 + 2);
  EXPECT_EQ(spec.wiring().back().output.str(), "1024x50257 seq");
  // A shorter context uses the first rows of the table; a longer one is refused, naming both.
  EXPECT_EQ(ModelSpec::parse("gpt2", tokens(256), 50257).layout().total(), 124439808u);
  const std::string m = error_of([] { ModelSpec::parse("gpt2", tokens(2048), 50257); });
  for (const char* part : {"models/gpt2.model:14:", "2048 positions", "context=1024"})
    EXPECT_NE(m.find(part), std::string::npos) << m;
  // The model file is short: the repeat block writes the 12 blocks (the graph has 149 nodes).
  const std::string* text = ModelGraph::preset_text("gpt2");
  ASSERT_NE(text, nullptr);
  int lines = 0;
  std::istringstream in(*text);
  for (std::string line; std::getline(in, line);) lines += !line.empty() && line[0] != '#';
  EXPECT_LE(lines, 30);
  EXPECT_EQ(spec.graph().nodes().size(), 3u + 12 * 12 + 2);
}

TEST(Presets, GptSizesSyntax) {
  // gpt:12-12-768-1024 is the gpt2 file.
  EXPECT_EQ(ModelSpec::parse("gpt:12-12-768-1024", tokens(64), 50257).layout().to_text(),
            ModelSpec::parse("gpt2", tokens(64), 50257).layout().to_text());
  // Without C the position table has the data's context.
  const ModelSpec small = ModelSpec::parse("gpt:6-6-384", tokens(256), 256);
  EXPECT_EQ(small.name(), "gpt:6-6-384");
  EXPECT_EQ(small.layout().find("transformer.wpe.weight")->shape, (std::vector<std::int64_t>{256, 384}));
  EXPECT_NE(small.layout().find("transformer.h.5.attn.c_attn.weight"), nullptr);
  EXPECT_EQ(small.layout().find("transformer.h.6.ln_1.weight"), nullptr);
  // nanoGPT's scaled c_proj: N(0, (0.02 / sqrt(2 L))^2), on the tensors the file names.
  const GraphNode* c_proj = nullptr;
  for (const auto& n : small.graph().nodes())
    if (n.name == "transformer.h.3.mlp.c_proj") c_proj = &n;
  ASSERT_NE(c_proj, nullptr);
  EXPECT_EQ(std::stod(c_proj->options.at("init_std")), 0.02 / std::sqrt(12.0));
  for (const auto& [model, part] :
       std::vector<std::pair<const char*, const char*>>{{"gpt:6-5-384", "not a multiple of the 5 heads"},
                                                        {"gpt:6-6", "blocks, heads and width"},
                                                        {"gpt:6-6-384-", "blocks, heads and width"},
                                                        {"gpt:0-6-384", "'0'"},
                                                        {"gpt:x-6-384", "'x'"}}) {
    const std::string m = error_of([model = model] { ModelGraph::load(model); });
    EXPECT_NE(m.find(part), std::string::npos) << model << ": " << m;
  }
  // The round trip of the stored definition.
  const ModelGraph g = ModelGraph::load("gpt:2-2-8");
  EXPECT_EQ(ModelGraph::parse(g.to_text(), "again").to_text(), g.to_text());
}

// ---------------------------------------------------------------- the decay rule

// The tensors of `spec` that weight decay applies to under `rule`, by name.
std::vector<std::string> decaying(const ModelSpec& spec, DecayRule rule) {
  std::vector<std::string> out;
  for (const TensorSpec& t : spec.layout().tensors())
    if (t.decays(rule)) out.push_back(t.name);
  return out;
}

// --decay-rule matrices (the default): the weights of linear and conv layers decay; biases,
// batch and layer norms, embeddings and state never do. `all`: every trainable tensor.
TEST(DecayRule, MatricesAreTheWeightsOfLinearAndConvLayers) {
  const ModelSpec mlp = ModelSpec::parse("mlp");
  EXPECT_EQ(decaying(mlp, DecayRule::kMatrices), (std::vector<std::string>{"fc1.weight", "fc2.weight", "fc3.weight"}));
  EXPECT_EQ(decaying(mlp, DecayRule::kAll).size(), 6u);
  // The ranges the PS exempts: the biases, each its own range (weights lie between them).
  const ParamLayout& l = mlp.layout();
  const auto ranges = l.no_decay_ranges(DecayRule::kMatrices);
  ASSERT_EQ(ranges.size(), 3u);
  EXPECT_EQ(ranges[0], std::make_pair(l.find("fc1.bias")->offset, l.find("fc1.bias")->offset + 512));
  EXPECT_EQ(ranges[2].second, l.total());
  EXPECT_TRUE(l.no_decay_ranges(DecayRule::kAll).empty());
  EXPECT_EQ(l.decaying_elements(DecayRule::kMatrices),
            std::size_t{784} * 512 + std::size_t{512} * 256 + std::size_t{256} * 10);
  EXPECT_EQ(l.decaying_elements(DecayRule::kAll), l.total());

  const ModelSpec cnn = ModelSpec::parse("cnn");
  EXPECT_EQ(decaying(cnn, DecayRule::kMatrices),
            (std::vector<std::string>{"conv1.weight", "conv2.weight", "fc1.weight", "fc2.weight"}));

  // ResNet-20: every convolution (none has a bias) and the classifier's weight; batch norm's
  // scale and shift are trainable but exempt, its running statistics are state (never decayed,
  // not even under `all`, and not among the no-decay ranges: the PS averages them instead).
  const ModelSpec resnet = ModelSpec::parse("resnet20");
  std::size_t convs = 0, norms = 0, state = 0;
  for (const TensorSpec& t : resnet.layout().tensors()) {
    const bool conv_or_fc = t.shape.size() >= 2;
    EXPECT_EQ(t.decays(DecayRule::kMatrices), conv_or_fc) << t.name;
    EXPECT_EQ(t.decays(DecayRule::kAll), !t.state) << t.name;
    convs += conv_or_fc ? 1 : 0;
    norms += !conv_or_fc && !t.state ? 1 : 0;
    state += t.state ? 1 : 0;
  }
  EXPECT_EQ(convs, 19u + 2 + 1);  // 19 3x3 convolutions, 2 1x1 shortcuts, the linear layer
  EXPECT_EQ(norms, 2 * 21u + 1);  // weight and bias of 21 batch norms, the linear bias
  EXPECT_EQ(state, 2 * 21u);
  for (const auto& [begin, end] : resnet.layout().no_decay_ranges(DecayRule::kMatrices))
    for (const auto& [state_begin, state_end] : resnet.layout().state_ranges())
      EXPECT_TRUE(end <= state_begin || state_end <= begin) << "a no-decay range overlaps state";
}

// A small GPT (gpt:2-2-32) on tokens: the four matrices of each block decay (c_attn, attn.c_proj,
// c_fc, mlp.c_proj); the token and position embeddings, the layer norms and every bias do not;
// the head is tied to the token embedding and has no weight of its own.
TEST(DecayRule, GptDecaysTheBlocksMatricesOnly) {
  const ModelSpec gpt = ModelSpec::parse("gpt:2-2-32", tokens(16), 64);
  std::vector<std::string> want;
  for (int i = 0; i < 2; ++i)
    for (const char* m : {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"})
      want.push_back(str("transformer.h.", i, ".", m, ".weight"));
  EXPECT_EQ(decaying(gpt, DecayRule::kMatrices), want);
  EXPECT_EQ(gpt.layout().decaying_elements(DecayRule::kMatrices), std::size_t{2} * 12 * 32 * 32);
  EXPECT_FALSE(gpt.layout().find("transformer.wte.weight")->decays(DecayRule::kMatrices));
  EXPECT_TRUE(gpt.layout().find("transformer.wte.weight")->decays(DecayRule::kAll));
}

// decay=true|false on a node overrides either rule for its tensors. nanoGPT decays every tensor
// of rank >= 2, embeddings included: gpt2's file with decay=true on both embeddings gives exactly
// that set (docs/MODEL_FORMAT.md).
TEST(DecayRule, ANodesDecayOptionOverridesTheRule) {
  std::string text = *ModelGraph::preset_text("gpt2");
  for (const char* node : {"transformer.wte = ", "transformer.wpe = "}) {
    const std::size_t at = text.find(node);
    ASSERT_NE(at, std::string::npos) << node;
    text.insert(text.find('\n', at), " decay=true");
  }
  const ModelSpec nano(ModelGraph::parse(text, "nanogpt.model", {{"L", "2"}, {"H", "2"}, {"D", "32"}, {"C", "16"}}),
                       tokens(16), 64);
  for (const TensorSpec& t : nano.layout().tensors())
    EXPECT_EQ(t.decays(DecayRule::kMatrices), t.shape.size() >= 2) << t.name;

  const ModelSpec spec(ModelGraph::parse("c = conv2d(input) out=2 kernel=3 decay=false\n"
                                         "bn = batchnorm decay=true\n"
                                         "f = flatten\n"
                                         "fc = linear out=classes\n",
                                         "override.model"),
                       kFashionMnistInput, 10);
  EXPECT_EQ(decaying(spec, DecayRule::kMatrices),
            (std::vector<std::string>{"bn.weight", "bn.bias", "fc.weight"}));  // never the running statistics
  EXPECT_EQ(decaying(spec, DecayRule::kAll),
            (std::vector<std::string>{"bn.weight", "bn.bias", "fc.weight", "fc.bias"}));
  // Only kinds with tensors take it, and only true or false.
  std::string m = error_of([] { ModelGraph::parse("r = relu(input) decay=true\nfc = linear out=classes", "r.model"); });
  EXPECT_NE(m.find("relu has no option 'decay'"), std::string::npos) << m;
  m = error_of([] { ModelGraph::parse("fc = linear(input) out=classes decay=yes", "y.model"); });
  EXPECT_NE(m.find("decay=yes must be true or false"), std::string::npos) << m;
}

// ---------------------------------------------------------------- presets

// The image presets; the language model (gpt2) takes token data and refuses images clearly.
TEST(Presets, EveryPresetBuildsOnFashionMnistAndOnColourImages) {
  for (const std::string& name : ModelGraph::preset_names()) {
    SCOPED_TRACE(name);
    if (name == "gpt2") {
      const std::string m = error_of([] { ModelSpec::parse("gpt2"); });
      EXPECT_NE(m.find("sequence of token ids"), std::string::npos) << m;
      continue;
    }
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
