// Fuzz target: the model-file parser and the shape checks (nn::ModelGraph::parse, nn::ModelSpec).
//
// Input: the text of a model file (docs/MODEL_FORMAT.md). It is parsed and built for a small
// colour input (3 x 8 x 8, 5 classes) and for a sequence of 8 token ids (a vocabulary of 5); no
// buffers are allocated. Expected: a ModelSpec, or
// drt::ConfigError. A graph that parses must survive its own round trip: parsing to_text()
// gives the same text. Anything else (another exception, a sanitizer report, a failed round
// trip) is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "drtrain/core/error.hpp"
#include "drtrain/nn/model_graph.hpp"
#include "drtrain/nn/model_spec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  drt::nn::ModelGraph graph;
  try {
    graph = drt::nn::ModelGraph::parse(text, "fuzz.model");
  } catch (const drt::ConfigError&) {
    return 0;
  }
  const std::string once = graph.to_text();
  try {
    const drt::nn::ModelGraph again = drt::nn::ModelGraph::parse(once, "again");
    if (again.to_text() != once) {
      std::fprintf(stderr, "fuzz_model: to_text() changes over a round trip\n--- first:\n%s\n--- second:\n%s\n",
                   once.c_str(), again.to_text().c_str());
      std::abort();
    }
  } catch (const drt::ConfigError& e) {
    std::fprintf(stderr, "fuzz_model: to_text() does not parse back: %s\n--- to_text():\n%s\n", e.what(), once.c_str());
    std::abort();
  }
  for (const drt::nn::TensorShape input : {drt::nn::TensorShape{1, 3, 8, 8}, drt::nn::TensorShape::seq(1, 8, 1)}) {
    try {
      const drt::nn::ModelSpec spec(graph, input, 5);
      (void)spec.describe();
    } catch (const drt::ConfigError&) {
    }
  }
  return 0;
}
