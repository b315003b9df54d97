#include "drtrain/data/token_format.hpp"

#include <algorithm>
#include <cstring>
#include <mutex>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "token_split.hpp"

namespace drt::data {

namespace h5 {

using io::H5Id;

namespace {

template <typename T>
std::uint64_t load(const unsigned char* p) {
  T value;
  std::memcpy(&value, p, sizeof value);
  return value;
}

std::string damaged(const std::string& file) {
  return str("; the file is damaged (a chunk fails its checksum or cannot be decompressed): check it with "
             "drtrain-data verify ",
             file, ", then copy or convert it again");
}

// After a failed read of tokens [first, first + count) spanning several chunks: " (the chunk of
// tokens A..B is bad)" for the first chunk that fails alone; "" otherwise.
std::string bad_chunk(TokenSplit& s, std::int64_t first, std::int64_t count) {
  const std::vector<std::int64_t>& chunk = s.header.storage.chunk;
  if (chunk.empty()) return "";
  const std::int64_t k = std::max<std::int64_t>(1, chunk[0]);
  if (first / k == (first + count - 1) / k) return "";
  std::vector<unsigned char> one(static_cast<std::size_t>(k) * s.stored_bytes);
  for (std::int64_t c = first / k * k; c < first + count; c += k) {
    const auto begin = static_cast<hsize_t>(std::max(c, first));
    const auto n = static_cast<hsize_t>(std::min(c + k, first + count)) - begin;
    H5Sselect_hyperslab(s.space, H5S_SELECT_SET, &begin, nullptr, &n, nullptr);
    H5Id memory(H5Screate_simple(1, &n, nullptr));
    if (H5Dread(s.tokens, s.memory_type, memory, s.space, H5P_DEFAULT, one.data()) < 0) {
      H5Eclear2(H5E_DEFAULT);
      return str(" (the chunk of tokens ", c, "..", std::min(c + k, s.header.count) - 1, " is bad)");
    }
  }
  return "";
}

}  // namespace

void TokenSplit::close() noexcept {
  space.reset();
  memory_type.reset();
  tokens.reset();
  file.file.reset();
}

TokenSplit open_token_split(DataFile file, const std::string& split, std::size_t cache_bytes) {
  const std::string& path = file.path;
  if (split != "train" && split != "test")
    throw ConfigError(str(path, ": no split '", split, "': a data set's splits are train and test"));
  const std::string g = "/" + split, object = g + "/tokens";
  const std::string format =
      "a token data set holds /train/tokens and /test/tokens (rank 1, unsigned integers) and the root attribute "
      "vocab_size (docs/DATA_FORMAT.md, \"Token streams\"; drtrain-data convert --text, --llmc-bin, --uint16-bin)";
  if (!file.tokens)
    fail(path, "",
         str("is an image data set (root attribute classes = ", file.classes,
             "), not a token stream: train it without --context; ", format));
  if (!has_split(file, split)) {
    std::vector<std::string> present;
    for (const char* name : {"train", "test"})
      if (has_split(file, name)) present.push_back(str("/", name));
    fail(path, "",
         str("has no group '", g, "' (", present.empty() ? "nor any other split" : "it holds " + join(present, " and "),
             "); ", format));
  }
  H5Id group = open_object(path, "", file.file, split, H5I_GROUP, format);
  open_object(path, g, group, "tokens", H5I_DATASET, format);

  TokenSplit s;
  s.header.file = path;
  s.header.split = split;
  s.header.vocab_size = file.vocab_size;
  s.header.source = file.source;
  {
    H5Id probe(DRT_H5_CHECK(H5Dopen2(group, "tokens", H5P_DEFAULT), "opening " + object));
    std::string missing;
    s.header.storage = describe_storage(probe, &missing);
    H5Id type(DRT_H5_CHECK(H5Dget_type(probe), "H5Dget_type"));
    const std::vector<std::int64_t>& dims = s.header.storage.shape;
    if (dims.size() != 1)
      fail(path, object,
           str("rank ", dims.size(), " ", shape_text(dims),
               "; expected rank 1, [N], one stream of token ids (numpy: tokens.reshape(-1))"));
    const std::size_t size = H5Tget_size(type);
    if (H5Tget_class(type) != H5T_INTEGER || H5Tget_sign(type) != H5T_SGN_NONE ||
        (size != 1 && size != 2 && size != 4 && size != 8))
      fail(path, object,
           str("element type ", type_name(type),
               "; token ids are stored as unsigned integers, uint8, uint16 or uint32 (numpy: "
               "tokens.astype(np.uint16))"));
    const std::size_t precision = H5Tget_precision(type);
    const int offset = H5Tget_offset(type);
    if (precision == 0 || offset < 0 || precision + static_cast<std::size_t>(offset) > 8 * size)
      fail(path, object,
           str("element type ", type_name(type), " is malformed (", precision, " bits of precision at offset ", offset,
               " in ", size, " bytes); store the tokens as uint8, uint16 or uint32"));
    if (dims[0] < 1) fail(path, object, "holds no tokens");
    if (!missing.empty())
      fail(path, object,
           str("is stored with the filter ", missing,
               ", which this HDF5 library lacks; store it uncompressed or with gzip (h5py: compression='gzip')"));
    s.header.count = dims[0];
    // Read as the native unsigned type of the stored size (HDF5 converts the byte order and any
    // precision below the size's).
    const hid_t native = size == 1   ? H5T_NATIVE_UINT8
                         : size == 2 ? H5T_NATIVE_UINT16
                         : size == 4 ? H5T_NATIVE_UINT32
                                     : H5T_NATIVE_UINT64;
    s.memory_type = H5Id(DRT_H5_CHECK(H5Tcopy(native), "H5Tcopy"));
    s.stored_bytes = size;
    // The probe must be closed first: HDF5 shares an open dataset's chunk cache with later opens.
    probe.reset();
    H5Id dapl = chunk_cache_access(s.header.storage, s.stored_bytes, cache_bytes);
    s.tokens = H5Id(DRT_H5_CHECK(H5Dopen2(group, "tokens", dapl), "opening " + object));
    s.space = H5Id(DRT_H5_CHECK(H5Dget_space(s.tokens), "H5Dget_space"));
  }
  s.file = std::move(file);
  return s;
}

void read_tokens(TokenSplit& s, std::int64_t first, std::int64_t count, std::uint32_t* out) {
  const TokenSplitHeader& h = s.header;
  DRT_ASSERT(first >= 0 && count >= 1 && first + count <= h.count,
             str(h.file, ":/", h.split, "/tokens: tokens ", first, " + ", count, " outside the stream"));
  s.raw.resize(static_cast<std::size_t>(count) * s.stored_bytes);
  const auto start = static_cast<hsize_t>(first), n = static_cast<hsize_t>(count);
  DRT_H5_CHECK(H5Sselect_hyperslab(s.space, H5S_SELECT_SET, &start, nullptr, &n, nullptr), "H5Sselect_hyperslab");
  H5Id memory(DRT_H5_CHECK(H5Screate_simple(1, &n, nullptr), "H5Screate_simple"));
  if (H5Dread(s.tokens, s.memory_type, memory, s.space, H5P_DEFAULT, s.raw.data()) < 0) {
    const std::string stack = io::hdf5_error_stack();
    fail(h.file, "/" + h.split + "/tokens",
         str("cannot read tokens ", first, "..", first + count - 1, bad_chunk(s, first, count), ": ", stack,
             damaged(h.file)));
  }
  const auto vocab = static_cast<std::uint64_t>(h.vocab_size);
  for (std::size_t i = 0; i < static_cast<std::size_t>(count); ++i) {
    const unsigned char* p = s.raw.data() + i * s.stored_bytes;
    std::uint64_t v = 0;
    switch (s.stored_bytes) {
      case 1: v = load<std::uint8_t>(p); break;
      case 2: v = load<std::uint16_t>(p); break;
      case 4: v = load<std::uint32_t>(p); break;
      default: v = load<std::uint64_t>(p); break;
    }
    if (v >= vocab)
      fail(h.file, "/" + h.split + "/tokens",
           str("token ", first + static_cast<std::int64_t>(i), " is ", v, ", not below vocab_size ", h.vocab_size,
               " (root attribute); every token id lies in [0, vocab_size): fix the stream or the attribute"));
    out[i] = static_cast<std::uint32_t>(v);
  }
}

}  // namespace h5

DataKind data_kind(const std::string& file) {
  std::lock_guard<std::recursive_mutex> lock(h5::hdf5_mutex());
  const h5::DataFile data = h5::open_data_file(file);
  return data.tokens ? DataKind::kTokens : DataKind::kImages;
}

bool has_split(const std::string& file, const std::string& split) {
  std::lock_guard<std::recursive_mutex> lock(h5::hdf5_mutex());
  return h5::has_split(h5::open_data_file(file), split);
}

TokenSplitHeader read_token_header(const std::string& file, const std::string& split) {
  std::lock_guard<std::recursive_mutex> lock(h5::hdf5_mutex());
  h5::TokenSplit s = h5::open_token_split(h5::open_data_file(file), split, std::size_t{1} << 20);
  TokenSplitHeader header = s.header;
  s.close();
  return header;
}

std::int64_t token_windows(std::int64_t tokens, int context) {
  DRT_ASSERT(context >= 1, "token_windows: context < 1");
  return tokens <= 1 ? 0 : (tokens - 1) / context;
}

std::int64_t check_tokens(const std::string& file, const std::string& split) {
  std::lock_guard<std::recursive_mutex> lock(h5::hdf5_mutex());
  h5::TokenSplit s = h5::open_token_split(h5::open_data_file(file), split, std::size_t{4} << 20);
  constexpr std::int64_t kBlock = std::int64_t{1} << 20;
  std::vector<std::uint32_t> tokens(static_cast<std::size_t>(std::min(kBlock, s.header.count)));
  for (std::int64_t first = 0; first < s.header.count; first += kBlock)
    h5::read_tokens(s, first, std::min(kBlock, s.header.count - first), tokens.data());
  const std::int64_t count = s.header.count;
  s.close();
  return count;
}

const char* token_type_name(std::int64_t vocab_size) {
  return vocab_size <= 256 ? "uint8" : vocab_size <= 65536 ? "uint16" : "uint32";
}

std::size_t token_bytes(std::int64_t vocab_size) { return vocab_size <= 256 ? 1 : vocab_size <= 65536 ? 2 : 4; }

}  // namespace drt::data
