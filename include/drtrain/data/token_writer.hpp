// Writes a token data set (docs/DATA_FORMAT.md, "Token streams"): /train/tokens and/or
// /test/tokens and the root attributes drtrain_dataset and vocab_size, in pieces (a stream larger
// than memory is fine). Tokens are stored as uint8 when vocab_size <= 256, uint16 when <= 65536,
// else uint32; chunked (about chunk_bytes a chunk) with fletcher32 (and gzip on request). Like
// Hdf5Writer, the file is written as PATH.tmp and renamed to PATH by commit(); a writer destroyed
// before commit() removes PATH.tmp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace drt::data {

struct TokenWriterOptions {
  std::int64_t vocab_size = 0;                      // V in 1..2^24: tokens lie in [0, V)
  std::string source;                               // optional: where the data came from (root attribute)
  int compress_level = 0;                           // gzip level 1..9; 0: none
  std::size_t chunk_bytes = std::size_t{32} << 10;  // target size of a chunk
};

class TokenWriter {
 public:
  // Creates PATH.tmp. Throws ConfigError for bad options or a file that cannot be created.
  TokenWriter(const std::string& path, const TokenWriterOptions& options);
  ~TokenWriter();  // without commit(): closes and removes PATH.tmp
  TokenWriter(const TokenWriter&) = delete;
  TokenWriter& operator=(const TokenWriter&) = delete;

  // Creates /SPLIT/tokens ("train" or "test", each at most once) for `count` >= 1 tokens. Splits
  // may be filled in any order, also alternately.
  void begin_split(const std::string& split, std::int64_t count);
  // Tokens per chunk (the same for every split): appending multiples of it is fastest.
  std::int64_t chunk_tokens() const;
  // Appends `count` tokens to a begun split; each must be below vocab_size (else ConfigError
  // naming the split and the position).
  void append(const std::string& split, const std::uint32_t* tokens, std::int64_t count);
  // Every split begun must hold all its tokens; closes, fsyncs and renames PATH.tmp to PATH.
  void commit();

  const std::string& path() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace drt::data
