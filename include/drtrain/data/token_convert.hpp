// Conversion of text and of other tools' token files into drtrain's token data sets
// (docs/DATA_FORMAT.md, "Token streams"; drtrain-data convert --text, --llmc-bin, --uint16-bin),
// read and written in pieces.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "drtrain/data/token_bin_file.hpp"

namespace drt::data {

// The byte written before every text file's tokens (its first byte, when nonempty): 0, which
// text does not hold, marks where a document begins (GPT-2's <|endoftext|> as llm.c places it).
constexpr std::uint32_t kTextDocumentSeparator = 0;

struct TokenConvertOptions {
  // 0: the inputs' own (256 for text, 50257 for llm.c's GPT-2 shards, 128256 for its LLaMA 3
  // ones); required for raw uint16 files. Every token must be below it.
  std::int64_t vocab_size = 0;
  // In (0, 1): the last fraction of every input file (floor(n * (1 - F)) tokens stay in /train,
  // the rest goes to /test) instead of test inputs; 0: none.
  double test_fraction = 0.0;
  int compress_level = 0;                           // gzip level; 0: none
  std::size_t chunk_bytes = std::size_t{32} << 10;  // target size of a chunk of tokens
};

// The files that command-line arguments name, in order: a file as is; a directory (when
// `directories`) as every regular file below it whose name does not start with '.'; a pattern
// holding *, ? or [ as its matches (glob(3); ** is not special), each expanded again. Each
// argument's files come in sorted (bytewise) order. Throws ConfigError naming `option` and the
// argument that names nothing (a missing file, a pattern without match, an empty directory).
std::vector<std::string> expand_inputs(const std::vector<std::string>& args, const std::string& option,
                                       bool directories);

// Byte-level text (vocabulary 256): each file's bytes, after one kTextDocumentSeparator, in the
// order expand_inputs gives (directories allowed); `train` -> /train, `test` (or the held-out
// fraction) -> /test. OUT is written through OUT.tmp (TokenWriter). Throws ConfigError naming the
// file and the problem (also: an input in both lists, OUT among the inputs).
void convert_text(const std::vector<std::string>& train, const std::vector<std::string>& test, const std::string& out,
                  const TokenConvertOptions& options);

// llm.c shards (kLlmc) or raw uint16 streams (kUint16), files or patterns ('train_*.bin')
// concatenated in sorted order, no separator (the tokenizer's own end-of-text tokens are in
// the streams). Every token is checked against the vocabulary: an error names the file, the
// token's position in it and its value.
void convert_token_files(TokenBinKind kind, const std::vector<std::string>& train, const std::vector<std::string>& test,
                         const std::string& out, const TokenConvertOptions& options);

}  // namespace drt::data
