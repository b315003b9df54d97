// Windows of a token stream (docs/DATA_FORMAT.md, "Token streams") as a SampleSource: sample i
// of a stream tok[0..N) at context T is the window tok[i*T .. i*T + T) and its T next-token
// targets tok[i*T + 1 .. i*T + T + 1); the windows do not overlap and there are
// floor((N - 1) / T) of them. Read in pieces through HDF5's chunk cache, like the image sets
// (hdf5_source.hpp); a window may straddle chunks.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "drtrain/data/sample_source.hpp"

namespace drt::data {

// Opens FILE's split ("train" or "test") of a token file read-only, checks its header
// (read_token_header) and that the stream holds at least one window of `context` tokens.
// info(): channels = 1, height = 1, width = T, classes = vocab_size, tokens = true, targets = T,
// count = the windows. read(indices, images, labels) writes per sample T floats (the token ids,
// exact: vocab_size <= 2^24) to images + i*T and T int32 targets to labels + i*T; a token >=
// vocab_size met on the way is a ConfigError naming the file, the split, its position in the
// stream and its value. An index outside [0, count) is the caller's bug: drt::Error.
//
// Reading: the requested windows are sorted and merged into runs of consecutive windows; each
// run is one hyperslab read of the tokens it covers (at most 4 MiB of tokens a read, at least
// one window) in the stored type, widened here. `cache_bytes` of decoded chunks stay in HDF5's
// chunk cache, so a stream that fits is read from the file once. Threads: as hdf5_source.hpp (one
// thread per source; every data-set HDF5 call takes one process-wide lock).
//
// Throws ConfigError naming the file, the object, the problem and the fix: an image file, a
// missing vocab_size, a vocabulary above 2^24, tokens of another rank or a signed or float type,
// a context < 1, a stream shorter than one window ("the corpus has N tokens, shorter than one
// window of --context T + 1"), more than 2^31 - 1 windows.
std::unique_ptr<SampleSource> open_token_source(const std::string& file, const std::string& split, int context,
                                                std::size_t cache_bytes = 64u << 20);

// A language model's data from --data-file (and --test-file): /train of `data_file`; with
// `with_test`, /test of `test_file`, or of `data_file` when `test_file` is empty. Both at
// context T; the test split must have the train split's vocab_size.
struct TokenSources {
  std::unique_ptr<SampleSource> train, test;  // test: null without with_test
};
TokenSources open_token_sources(const std::string& data_file, const std::string& test_file, int context, bool with_test,
                                std::size_t cache_bytes = 64u << 20);

}  // namespace drt::data
