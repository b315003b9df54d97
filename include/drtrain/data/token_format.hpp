// Token streams in drtrain's HDF5 data-set format (docs/DATA_FORMAT.md, "Token streams"): a split
// holds `tokens`, one rank-1 stream of unsigned token ids, and the file's root attribute
// `vocab_size` bounds them. The header of such a split, the kind of a data-set file, and the
// check of every token (drtrain-data verify). Readers: token_source.hpp; writer: token_writer.hpp.
#pragma once

#include <cstdint>
#include <string>

#include "drtrain/data/hdf5_format.hpp"

namespace drt::data {

// The largest vocabulary: token ids reach the model as float32, which is exact below 2^24.
constexpr std::int64_t kMaxVocabulary = std::int64_t{1} << 24;

// What a data-set file holds: labelled images (root attribute `classes`) or token streams
// (root attribute `vocab_size`).
enum class DataKind { kImages, kTokens };

// Checks FILE's root (HDF5, format version, classes or vocab_size) and says which kind it is.
// Throws ConfigError naming the file and the problem.
DataKind data_kind(const std::string& file);

// Whether FILE (a data-set file, its root checked as data_kind does) has the group /SPLIT.
bool has_split(const std::string& file, const std::string& split);

// One split of a token file, its header checked (open_token_source's checks).
struct TokenSplitHeader {
  std::string file, split;      // split: "train" or "test"
  std::int64_t count = 0;       // tokens in the stream
  std::int64_t vocab_size = 0;  // root attribute: every token lies in [0, vocab_size)
  std::string source;           // root attribute: where the data came from; empty when absent
  DatasetStorage storage;       // of `tokens`
};

// FILE's token split ("train" or "test"), its header validated: the root attributes, `tokens`
// rank 1, an unsigned integer type of 1, 2, 4 or 8 bytes (either byte order), at least one token,
// filters this HDF5 library has. Throws ConfigError naming the file, the object, the problem and
// the fix.
TokenSplitHeader read_token_header(const std::string& file, const std::string& split);

// The windows of T = context tokens a stream of `tokens` holds: window i is tokens
// [i*T, i*T + T) and its targets [i*T + 1, i*T + T + 1), so floor((tokens - 1) / T) of them
// (0 when tokens <= T). context >= 1.
std::int64_t token_windows(std::int64_t tokens, int context);

// Reads every token of FILE's split in pieces (every chunk through its checksum) and checks each
// against vocab_size. Throws ConfigError naming the file, the split, the position and the value
// of the first token out of range, or the tokens a damaged chunk holds. Returns the count.
std::int64_t check_tokens(const std::string& file, const std::string& split);

// The element type drtrain-data writes for a vocabulary of V: "uint8" (V <= 256), "uint16"
// (V <= 65536), else "uint32".
const char* token_type_name(std::int64_t vocab_size);
std::size_t token_bytes(std::int64_t vocab_size);  // 1, 2 or 4

}  // namespace drt::data
