// Token files of other tools, opened for reading in pieces (drtrain-data convert): llm.c's shards
// (a header of 256 little-endian int32, then the tokens), nanoGPT's headerless uint16 streams
// (train.bin, val.bin) and plain bytes (text, byte-level). The header is checked against the
// file's size when the file is opened; tokens are read by range, never the whole file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace drt::data {

enum class TokenBinKind {
  kLlmc,    // llm.c: header[0] magic 20240520 and header[1] version 1 (uint16 tokens, GPT-2), or
            // magic 20240801 and version 7 (uint32, LLaMA 3); header[2] the token count
  kUint16,  // nanoGPT's train.bin: little-endian uint16, no header
  kBytes,   // each byte a token (text)
};

// llm.c's header: 256 int32 (1024 bytes).
constexpr std::size_t kLlmcHeaderBytes = 1024;
constexpr std::int32_t kLlmcMagicGpt2 = 20240520;
constexpr std::int32_t kLlmcMagicLlama3 = 20240801;

class TokenBinFile {
 public:
  // Opens and checks PATH: a regular file; llm.c: the magic and version, a count >= 0, and exactly
  // 1024 + count * token size bytes; uint16: an even size. Throws ConfigError naming the file,
  // the problem and the fix.
  TokenBinFile(const std::string& path, TokenBinKind kind);
  ~TokenBinFile();
  TokenBinFile(const TokenBinFile&) = delete;
  TokenBinFile& operator=(const TokenBinFile&) = delete;
  TokenBinFile(TokenBinFile&& other) noexcept;
  TokenBinFile& operator=(TokenBinFile&&) = delete;

  const std::string& path() const { return path_; }
  TokenBinKind kind() const { return kind_; }
  std::int64_t count() const { return count_; }             // tokens in the file
  std::size_t token_bytes() const { return token_bytes_; }  // 1, 2 or 4
  // The vocabulary its tokenizer has: 50257 for llm.c's GPT-2 shards, 128256 for LLaMA 3, 256
  // for bytes, 0 (unknown) for raw uint16.
  std::int64_t default_vocab() const;
  // Tokens [first, first + n) to `out`. ConfigError on a read error or a file that shrank.
  void read(std::int64_t first, std::int64_t n, std::uint32_t* out) const;

 private:
  std::string path_;
  TokenBinKind kind_;
  int fd_ = -1;
  std::int64_t count_ = 0;
  std::size_t token_bytes_ = 1;
  std::uint64_t offset_ = 0;  // of the first token
  std::int32_t magic_ = 0;
};

}  // namespace drt::data
