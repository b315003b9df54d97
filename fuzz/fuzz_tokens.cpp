// Fuzz target: the token-stream parsers of drtrain's data sets: a token split of an HDF5 data
// set (data::open_token_source, read_token_header, check_tokens: the root attributes, the
// `tokens` dataset's rank, type and filters, windows read across chunks, every token checked
// against vocab_size) and the token files drtrain-data convert reads (data::TokenBinFile: llm.c
// shards' header against the file size, nanoGPT's raw uint16 streams).
//
// Input: byte 0 picks the parser (mod 3): 0 an HDF5 file, 1 an llm.c shard, 2 a raw uint16
// file; for HDF5, byte 1 gives the context T = 1 + byte % 64; the rest is the file's bytes.
// Expected: success with the invariants below, or drt::ConfigError; a drt::Error from an HDF5
// call that fails on a malformed file (DRT_H5_CHECK) too. Anything else (another exception, an
// internal-error assertion, a sanitizer report, a broken invariant) is a finding; a crash inside
// libhdf5 itself is a known library limitation (fuzz/README.md).
#include <hdf5.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "drtrain/core/error.hpp"
#include "drtrain/data/token_bin_file.hpp"
#include "drtrain/data/token_format.hpp"
#include "drtrain/data/token_source.hpp"
#include "fuzz_util.hpp"

namespace {

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "fuzz_tokens: %s\n", what);
  std::abort();
}

constexpr std::int64_t kMaxCheckedTokens = std::int64_t{1} << 22;  // check_tokens of at most this many

// A window read: inputs are whole token ids below the vocabulary, each target the next input.
void check_window(const float* x, const std::int32_t* y, int t, int vocab) {
  for (int p = 0; p < t; ++p) {
    if (!(x[p] >= 0.0f && x[p] < static_cast<float>(vocab)) || std::floor(x[p]) != x[p])
      finding("an input token id outside [0, vocab_size) or not whole");
    if (y[p] < 0 || y[p] >= vocab) finding("a target outside [0, vocab_size)");
    if (p + 1 < t && static_cast<float>(y[p]) != x[p + 1]) finding("a target is not the next input token");
  }
}

void hdf5_tokens(const std::string& path, int context) {
  const auto source = drt::data::open_token_source(path, "train", context, std::size_t{1} << 20);
  const drt::data::SourceInfo& info = source->info();
  const drt::data::TokenSplitHeader h = drt::data::read_token_header(path, "train");
  if (!info.tokens || info.targets != context || info.width != context || info.channels != 1 || info.height != 1)
    finding("the shape of a token source is not 1 x 1 x T with T targets");
  if (info.count < 1 || info.count != drt::data::token_windows(h.count, context))
    finding("the window count is not floor((tokens - 1) / T)");
  if (info.classes != h.vocab_size || h.vocab_size < 1 || h.vocab_size > drt::data::kMaxVocabulary)
    finding("the vocabulary is outside 1..2^24");
  const auto t = static_cast<std::size_t>(context);
  std::vector<float> x(2 * t);
  std::vector<std::int32_t> y(2 * t);
  try {
    source->read({info.count - 1, 0}, x.data(), y.data());
    check_window(x.data(), y.data(), context, info.classes);
    check_window(x.data() + t, y.data() + t, context, info.classes);
  } catch (const drt::ConfigError&) {
    // a token out of range or a damaged chunk: the documented failures of read()
  }
  if (h.count <= kMaxCheckedTokens) {
    try {
      if (drt::data::check_tokens(path, "train") != h.count) finding("check_tokens counted another number of tokens");
    } catch (const drt::ConfigError&) {
    }
  }
}

void bin_tokens(const std::string& path, drt::data::TokenBinKind kind, std::size_t size) {
  const drt::data::TokenBinFile f(path, kind);
  const std::uint64_t header = kind == drt::data::TokenBinKind::kLlmc ? drt::data::kLlmcHeaderBytes : 0;
  if (f.count() < 0 || header + static_cast<std::uint64_t>(f.count()) * f.token_bytes() != size)
    finding("the header's token count does not match the file's size");
  if (f.count() > 0) {
    std::vector<std::uint32_t> tokens(static_cast<std::size_t>(std::min<std::int64_t>(f.count(), 4096)));
    f.read(0, static_cast<std::int64_t>(tokens.size()), tokens.data());
    f.read(f.count() - 1, 1, tokens.data());
    if (f.token_bytes() == 2 && tokens[0] > 65535) finding("a uint16 token above 65535");
  }
}

}  // namespace

// As fuzz_checkpoint: libhdf5 sizes some allocations from the file and copes with a null malloc;
// it keeps free lists until exit.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1:detect_leaks=0"; }

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // HDF5's error stacks would flood the log
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const int mode = data[0] % 3;
  try {
    if (mode == 0) {
      hdf5_tokens(drt::fuzz::write_file("tokens.h5", data + 2, size - 2), 1 + data[1] % 64);
    } else {
      const std::string path = drt::fuzz::write_file("tokens.bin", data + 1, size - 1);
      bin_tokens(path, mode == 1 ? drt::data::TokenBinKind::kLlmc : drt::data::TokenBinKind::kUint16, size - 1);
    }
  } catch (const drt::ConfigError&) {
    // the documented failure
  } catch (const drt::Error& e) {
    // An HDF5 call that failed on a malformed file is reported as drt::Error; an assertion
    // (DRT_ASSERT: "internal error at") is a finding.
    if (std::strstr(e.what(), "internal error") != nullptr) {
      std::fprintf(stderr, "fuzz_tokens: %s\n", e.what());
      std::abort();
    }
  }
  return 0;
}
