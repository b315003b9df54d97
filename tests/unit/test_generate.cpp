// Text generation (nn/generate.hpp, behind drtrain-ckpt sample): the token sampler (greedy, top-k,
// temperature, seeds, its distribution), and a language model rebuilt from a definition and its
// stored shapes: the vocabulary and context it finds, the windows it feeds (padded windows give
// the logits of unpadded ones; past the context, the last `context` tokens), seeded generation,
// and its errors. tests/e2e/sample_text.py runs the tool on checkpoint files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "drtrain/backend/backend.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/nn/generate.hpp"
#include "drtrain/nn/model_graph.hpp"
#include "drtrain/nn/model_spec.hpp"
#include "drtrain/nn/network.hpp"
#include "support/expect_errors.hpp"

namespace drt::nn {
namespace {

using testing_support::config_error_of;

std::vector<float> random_logits(int vocab, std::uint64_t seed, double scale = 2.0) {
  std::mt19937_64 rng(seed);
  std::vector<float> l(static_cast<std::size_t>(vocab));
  for (float& x : l) x = static_cast<float>(scale * (static_cast<double>(rng() >> 11) * 0x1.0p-53 - 0.5));
  return l;
}

std::vector<int> draws(TokenSampler& s, const std::vector<float>& logits, int count) {
  std::vector<int> out;
  out.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) out.push_back(s.next(logits.data(), static_cast<int>(logits.size())));
  return out;
}

TEST(TokenSampler, GreedyTakesTheLargestLogitAndTheLowestIdAmongEquals) {
  TokenSampler greedy(0.0, 0, 1);
  const std::vector<float> l = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f};
  EXPECT_EQ(draws(greedy, l, 3), (std::vector<int>{1, 1, 1}));
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    const auto r = random_logits(97, seed);
    TokenSampler g(0.0, 0, seed);
    EXPECT_EQ(g.next(r.data(), 97), std::max_element(r.begin(), r.end()) - r.begin());
  }
}

TEST(TokenSampler, TopOneIsGreedyAtAnyTemperature) {
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    const auto r = random_logits(50, seed + 100);
    TokenSampler top1(1.5, 1, seed), greedy(0.0, 0, seed);
    EXPECT_EQ(draws(top1, r, 5), draws(greedy, r, 5));
  }
  // Ties: the lower id, as greedy.
  const std::vector<float> tied = {1.0f, 4.0f, 4.0f, 0.0f};
  TokenSampler top1(1.0, 1, 3);
  EXPECT_EQ(draws(top1, tied, 4), (std::vector<int>{1, 1, 1, 1}));
}

TEST(TokenSampler, ASeedGivesOneSequenceAndAnotherSeedAnother) {
  const auto r = random_logits(64, 7);
  TokenSampler a(1.0, 0, 42), b(1.0, 0, 42), c(1.0, 0, 43);
  const auto first = draws(a, r, 200);
  EXPECT_EQ(first, draws(b, r, 200));
  EXPECT_NE(first, draws(c, r, 200));
  // Not degenerate: the draws spread over many tokens.
  std::vector<int> sorted = first;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_GT(std::unique(sorted.begin(), sorted.end()) - sorted.begin(), 30);
}

// The draws are pinned: mt19937_64's numbers are fixed by the C++ standard and the uniform is
// computed by hand, so these ids are what every machine gives for this seed and these logits. A
// change here changes every sample a user has made reproducible with --seed.
TEST(TokenSampler, DrawsArePinned) {
  const std::vector<float> l = {0.0f, 1.0f, 2.0f, 0.5f, -1.0f, 1.5f, 0.25f, 3.0f};
  TokenSampler s(1.0, 0, 1);
  EXPECT_EQ(draws(s, l, 16), (std::vector<int>{2, 2, 5, 0, 5, 7, 6, 1, 7, 7, 1, 7, 7, 2, 5, 2}));
  TokenSampler k(0.7, 3, 2024);
  EXPECT_EQ(draws(k, l, 12), (std::vector<int>{7, 2, 7, 7, 7, 7, 5, 7, 7, 7, 7, 7}));
}

// The frequencies of 40000 draws follow softmax(logits / temperature) over the top k.
TEST(TokenSampler, DrawsFollowTheTemperedSoftmaxOverTheTopK) {
  const std::vector<float> l = {0.0f, 1.0f, 2.0f, 0.5f, -1.0f, 1.5f};
  for (const auto& [temperature, k] : std::vector<std::pair<double, int>>{{1.0, 0}, {0.5, 0}, {2.0, 3}, {1.0, 6}}) {
    std::vector<int> order(l.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b]; });
    std::vector<double> p(l.size(), 0.0);
    double total = 0;
    for (std::size_t r = 0; r < l.size(); ++r)
      if (k == 0 || static_cast<int>(r) < k) total += p[order[r]] = std::exp(l[order[r]] / temperature);
    for (double& x : p) x /= total;
    TokenSampler s(temperature, k, 11);
    const int n = 40000;
    std::vector<int> counts(l.size(), 0);
    for (int i = 0; i < n; ++i) ++counts[s.next(l.data(), static_cast<int>(l.size()))];
    for (std::size_t i = 0; i < l.size(); ++i) {
      const double f = static_cast<double>(counts[i]) / n;
      // 5 standard deviations of a frequency; exactly 0 outside the top k.
      EXPECT_NEAR(f, p[i], 5 * std::sqrt(p[i] * (1 - p[i]) / n) + 1e-12)
          << "token " << i << ", temperature " << temperature << ", top-k " << k;
    }
  }
}

TEST(TokenSampler, RefusesBadSettingsAndNonFiniteLogits) {
  EXPECT_CONTAINS(config_error_of([] { TokenSampler(-0.5, 0, 1); }), "--temperature -0.5 must be a finite number >= 0");
  EXPECT_CONTAINS(config_error_of([] { TokenSampler(NAN, 0, 1); }), "must be a finite number >= 0");
  EXPECT_CONTAINS(config_error_of([] { TokenSampler(1.0, -2, 1); }), "--top-k -2 must be >= 0");
  TokenSampler s(1.0, 0, 1);
  const std::vector<float> l = {0.0f, NAN, 1.0f};
  try {
    s.next(l.data(), 3);
    ADD_FAILURE() << "a NaN logit was sampled";
  } catch (const Error& e) {
    EXPECT_CONTAINS(std::string(e.what()), "logit of token 1 is nan: the checkpoint holds a diverged or damaged model");
  }
}

// ---- LanguageModel on the gpt2 preset at a tiny size, with random weights

constexpr int kVocab = 11, kTable = 12;

ModelGraph tiny_gpt(int table = kTable) {
  return ModelGraph::parse(*ModelGraph::preset_text("gpt2"), "models/gpt2.model",
                           {{"L", "2"}, {"H", "2"}, {"D", "16"}, {"C", std::to_string(table)}, {"P", "0.5"}});
}

// What a checkpoint of `graph` trained at context `trained` holds: its tensors, random values.
struct Stored {
  std::unique_ptr<ModelSpec> spec;
  std::vector<float> params;
  LanguageModel::ShapeOf shape_of() const {
    return [this](const std::string& name) {
      const TensorSpec* t = spec->layout().find(name);
      return t ? t->shape : std::vector<std::int64_t>{};
    };
  }
};

Stored stored(const ModelGraph& graph, int trained = kTable, int vocab = kVocab) {
  Stored s;
  s.spec = std::make_unique<ModelSpec>(graph, TensorShape::seq(1, trained, 1), vocab);
  s.params.resize(s.spec->layout().total());
  std::mt19937_64 rng(5);
  for (float& p : s.params) p = static_cast<float>(static_cast<double>(rng() >> 11) * 0x1.0p-53 - 0.5);
  return s;
}

// The logits of every position of `tokens` from a network built for exactly their length.
std::vector<float> unpadded_logits(const ModelGraph& graph, const Stored& s, const std::vector<int>& tokens) {
  auto device = backend::make_cpu_backend();
  const int t = static_cast<int>(tokens.size());
  const ModelSpec spec(graph, TensorShape::seq(1, t, 1), kVocab);  // the table keeps its kTable rows
  Network net(spec, *device, 1);
  net.bind(s.params.data(), nullptr);
  std::vector<float> ids(tokens.begin(), tokens.end());
  const float* logits = net.infer(ids.data(), 1);
  return std::vector<float>(logits, logits + static_cast<std::size_t>(t) * kVocab);
}

TEST(LanguageModel, FindsTheVocabularyAndContextInTheStoredTables) {
  auto device = backend::make_cpu_backend();
  const Stored s = stored(tiny_gpt());
  LanguageModel lm(tiny_gpt(), s.shape_of(), 0, *device);
  EXPECT_EQ(lm.vocab(), kVocab);  // the tied head: transformer.wte.weight's rows
  EXPECT_EQ(lm.context(), kTable);
  EXPECT_EQ(lm.positions(), kTable);
  EXPECT_EQ(lm.layout().to_text(), s.spec->layout().to_text());
  LanguageModel shorter(tiny_gpt(), s.shape_of(), 5, *device);
  EXPECT_EQ(shorter.context(), 5);
  EXPECT_EQ(shorter.layout().to_text(), s.spec->layout().to_text());
  // gpt:L-H-D: the table has the data's context (context=0); the stored rows say how many.
  const ModelGraph open = tiny_gpt(0);
  const Stored s9 = stored(open, 9);
  LanguageModel from_rows(open, s9.shape_of(), 0, *device);
  EXPECT_EQ(from_rows.context(), 9);
  LanguageModel window4(open, s9.shape_of(), 4, *device);
  EXPECT_EQ(window4.layout().to_text(), s9.spec->layout().to_text());  // still the 9-row table
}

// Every window length (padded to a power of two, or not) gives the logits of its last position
// as a network of exactly that length does; past the context, those of the last `context`
// tokens. Dropout (p=0.5 in this graph) is off: evaluation mode.
TEST(LanguageModel, WindowsGiveTheLogitsOfUnpaddedForwards) {
  auto device = backend::make_cpu_backend();
  const ModelGraph graph = tiny_gpt();
  const Stored s = stored(graph);
  const int context = 7;
  LanguageModel lm(graph, s.shape_of(), context, *device);
  lm.set_params(s.params);
  std::mt19937_64 rng(9);
  std::vector<int> tokens;
  for (int len = 1; len <= 16; ++len) {
    tokens.push_back(static_cast<int>(rng() % kVocab));
    const std::vector<int> window(tokens.end() - std::min(len, context), tokens.end());
    const std::vector<float> all = unpadded_logits(graph, s, window);
    const std::vector<float> want(all.end() - kVocab, all.end());
    const std::vector<float> got = lm.next_logits(tokens);
    ASSERT_EQ(got.size(), want.size());
    double worst = 0, scale = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
      worst = std::max(worst, std::abs(double(got[i]) - want[i])), scale = std::max(scale, std::abs(double(want[i])));
    EXPECT_LE(worst, 1e-5 * std::max(scale, 1.0)) << "after " << len << " tokens";
    EXPECT_GT(scale, 0.0);
  }
  // A token outside the vocabulary is refused, not read past the table.
  EXPECT_CONTAINS(config_error_of([&] { lm.next_logits({3, kVocab}); }), "token 11 is not in the vocabulary 0..10");
}

TEST(LanguageModel, SeededGenerationRepeatsAndTopOneIsGreedy) {
  auto device = backend::make_cpu_backend();
  const ModelGraph graph = tiny_gpt();
  const Stored s = stored(graph);
  LanguageModel lm(graph, s.shape_of(), 0, *device);
  lm.set_params(s.params);
  const auto run = [&](double temperature, int k, std::uint64_t seed, int length) {
    TokenSampler sampler(temperature, k, seed);
    std::vector<int> tokens = {1, 2};
    std::vector<int> seen;
    lm.generate(tokens, length, sampler, [&](int t) { seen.push_back(t); });
    EXPECT_EQ(std::vector<int>(tokens.begin() + 2, tokens.end()), seen);
    return seen;
  };
  const auto a = run(1.0, 0, 7, 40);  // past the context (12): the window slides
  EXPECT_EQ(a.size(), 40u);
  EXPECT_EQ(a, run(1.0, 0, 7, 40));
  EXPECT_NE(a, run(1.0, 0, 8, 40));
  EXPECT_EQ(run(1.0, 1, 7, 20), run(0.0, 0, 99, 20));
  EXPECT_TRUE(run(1.0, 0, 7, 0).empty());
  TokenSampler sampler(1.0, 0, 1);
  std::vector<int> tokens = {0};
  EXPECT_CONTAINS(config_error_of([&] { lm.generate(tokens, -1, sampler); }), "--length -1 must be >= 0");
}

TEST(LanguageModel, ErrorsNameTheProblemAndTheFix) {
  auto device = backend::make_cpu_backend();
  const Stored s = stored(tiny_gpt());
  // An image model: linear reads the data.
  const ModelGraph mlp = ModelGraph::load("mlp");
  const ModelSpec mlp_spec(mlp, kFashionMnistInput, 10);
  const auto mlp_shapes = [&](const std::string& name) {
    const TensorSpec* t = mlp_spec.layout().find(name);
    return t ? t->shape : std::vector<std::int64_t>{};
  };
  EXPECT_CONTAINS(config_error_of([&] { LanguageModel(mlp, mlp_shapes, 0, *device); }),
                  "not a language model: its data is read by linear 'fc1', not by an embedding of token ids");
  // Embeddings in, but the output is not a sequence (flattened).
  ModelGraph flat("flat");
  flat.add("wte", "embedding", {"input"}, {{"dim", "4"}})
      .add("flat", "flatten")
      .add("head", "linear", {}, {{"out", "classes"}});
  const ModelSpec flat_spec(flat, TensorShape::seq(1, 3, 1), 5);
  const auto flat_shapes = [&](const std::string& name) {
    const TensorSpec* t = flat_spec.layout().find(name);
    return t ? t->shape : std::vector<std::int64_t>{};
  };
  EXPECT_CONTAINS(config_error_of([&] { LanguageModel(flat, flat_shapes, 3, *device); }),
                  "not a language model: its output (head, 5x1x1 per sample) is not a sequence of per-token logits");
  // No position table: the context must be given.
  EXPECT_CONTAINS(
      config_error_of([&] { LanguageModel(flat, flat_shapes, 0, *device); }),
      "has no position table (pos_embedding), so the checkpoint does not say its context: pass --context T");
  EXPECT_CONTAINS(config_error_of([&] { LanguageModel(tiny_gpt(), s.shape_of(), kTable + 1, *device); }),
                  "--context 13 is larger than the position table: transformer.wpe.weight has 12 rows; pass --context "
                  "12 or less");
  const auto without = [&](const std::string& missing) {
    return [&, missing](const std::string& name) {
      return name == missing ? std::vector<std::int64_t>{} : s.shape_of()(name);
    };
  };
  EXPECT_CONTAINS(config_error_of([&] { LanguageModel(tiny_gpt(), without("transformer.wte.weight"), 0, *device); }),
                  "the checkpoint holds no tensor transformer.wte.weight, which its model definition needs");
  EXPECT_CONTAINS(config_error_of([&] { LanguageModel(tiny_gpt(), without("transformer.wpe.weight"), 0, *device); }),
                  "the checkpoint holds no tensor transformer.wpe.weight");
  // An input vocabulary other than the logits'.
  ModelGraph two("two");
  two.add("wte", "embedding", {"input"}, {{"dim", "4"}, {"vocab", "7"}})
      .add("wpe", "pos_embedding", {}, {{"context", "4"}})
      .add("head", "linear", {}, {{"out", "9"}});
  const ModelSpec two_spec(two, TensorShape::seq(1, 4, 1), 9);
  const auto two_shapes = [&](const std::string& name) {
    const TensorSpec* t = two_spec.layout().find(name);
    return t ? t->shape : std::vector<std::int64_t>{};
  };
  EXPECT_CONTAINS(config_error_of([&] { LanguageModel(two, two_shapes, 0, *device); }),
                  "embedding 'wte' takes 7 token ids but the logits have 9 values");
}

}  // namespace
}  // namespace drt::nn
