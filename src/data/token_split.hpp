// A token split (docs/DATA_FORMAT.md, "Token streams") opened read-only and checked (internal to
// data_hdf5): the handles and the reads that the token source and check_tokens share. Every call
// here is made holding hdf5_mutex().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "drtrain/data/token_format.hpp"
#include "hdf5_split.hpp"

namespace drt::data::h5 {

struct TokenSplit {
  DataFile file;
  TokenSplitHeader header;
  io::H5Id tokens, space, memory_type;  // the dataset (with its chunk cache), its space, the type read
  std::size_t stored_bytes = 1;         // bytes of a token as stored and in memory_type (1, 2, 4, 8)
  std::vector<unsigned char> raw;       // the last read, in memory_type
  void close() noexcept;
};

// `file` must be a token file (else ConfigError: an image set has no token stream).
TokenSplit open_token_split(DataFile file, const std::string& split, std::size_t cache_bytes);

// Tokens [first, first + count) of the stream, each checked against vocab_size (a ConfigError
// naming the file, split, position and value) and widened to `out`. A read that fails (a chunk
// that fails its checksum) is a ConfigError naming the tokens and the fix.
void read_tokens(TokenSplit& s, std::int64_t first, std::int64_t count, std::uint32_t* out);

}  // namespace drt::data::h5
