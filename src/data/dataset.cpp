#include "drtrain/data/dataset.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <iomanip>
#include <random>
#include <sstream>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::data {

namespace {

constexpr std::uint32_t kImageMagic = 0x00000803;  // unsigned bytes (0x08), 3 dimensions
constexpr std::uint32_t kLabelMagic = 0x00000801;  // unsigned bytes (0x08), 1 dimension
constexpr std::uint32_t kMaxCount = 100'000'000;
constexpr std::uint32_t kMaxSide = 4096;
// The payload buffer starts at most this large and doubles as data arrives, so a header that
// announces more than the file holds cannot make us allocate the announced size up front.
constexpr std::size_t kFirstChunk = std::size_t{64} << 20;
constexpr unsigned kMaxRead = 1u << 30;  // gzread takes an unsigned and returns an int

std::string hex32(std::uint32_t value) {
  std::ostringstream out;
  out << "0x" << std::hex << std::setw(8) << std::setfill('0') << value;
  return out.str();
}

// An open IDX file (gzip-compressed or plain; zlib reads both) that names itself in errors.
class IdxReader {
 public:
  explicit IdxReader(const std::string& path) : path_(path) {
    errno = 0;
    file_ = gzopen(path.c_str(), "rb");
    if (!file_) {
      const int err = errno;
      std::string why = err ? errno_text(err) : "out of memory";
      if (err == ENOENT || err == ENOTDIR)
        why += "; install the Debian package dataset-fashion-mnist (apt-get install dataset-fashion-mnist) or "
               "pass --data-dir DIR";
      fail(str("cannot open: ", why));
    }
    gzbuffer(file_, 1u << 17);  // fewer, larger reads than the 8 KiB default
  }
  ~IdxReader() {
    if (file_) gzclose(file_);
  }
  IdxReader(const IdxReader&) = delete;
  IdxReader& operator=(const IdxReader&) = delete;

  [[noreturn]] void fail(const std::string& problem) const { throw ConfigError(str(path_, ": ", problem)); }

  // Reads up to `n` bytes into `out`; returns how many were read (fewer only at the end of the
  // data). Throws on a read error or corrupt compressed data.
  std::size_t read(std::uint8_t* out, std::size_t n) {
    std::size_t done = 0;
    while (done < n) {
      const unsigned want = static_cast<unsigned>(std::min<std::size_t>(n - done, kMaxRead));
      const int got = gzread(file_, out + done, want);
      if (got < 0) {
        const int err = errno;  // before gzerror can touch it
        int code = Z_OK;
        const char* message = gzerror(file_, &code);
        if (code == Z_ERRNO) fail(str("read error: ", errno_text(err)));
        std::string why = message ? message : "unknown zlib error";
        // zlib prefixes its message with the path it was given; ours already names the file.
        if (why.compare(0, path_.size() + 2, path_ + ": ") == 0) why.erase(0, path_.size() + 2);
        fail(str("corrupt gzip data: ", why));
      }
      if (got == 0) break;  // end of the (decompressed) data
      done += static_cast<std::size_t>(got);
      consumed_ += static_cast<std::size_t>(got);
    }
    return done;
  }

  // The magic number and the dimensions that follow it; exactly `dims` of them.
  std::vector<std::uint32_t> read_header(std::uint32_t magic, int dims, const char* kind) {
    std::uint8_t bytes[4 * 4];
    const std::size_t header_size = 4 * (1 + static_cast<std::size_t>(dims));
    std::size_t got = read(bytes, 4);
    if (got < 4) fail(str("truncated: the file ends after ", got, " bytes, inside the 4-byte IDX magic number"));
    const std::uint32_t found = big_endian(bytes);
    if (found != magic) {
      const std::string expected =
          str("bad magic number ", hex32(found), " (expected ", hex32(magic), " for an IDX ", kind, " file)");
      // Bytes 0-1 are zero, byte 2 is the element type (0x08: unsigned byte), byte 3 the number
      // of dimensions.
      if (bytes[0] == 0 && bytes[1] == 0 && bytes[2] == 0x08) {
        const int found_dims = bytes[3];
        std::string hint;
        if (dims == 3 && found_dims == 1) hint = "; is this the label file?";
        if (dims == 1 && found_dims == 3) hint = "; is this the image file?";
        fail(str(expected, ": wrong number of dimensions: the header announces ", found_dims, ", an IDX ", kind,
                 " file has ", dims, hint));
      }
      fail(str(expected, "; not an IDX file of unsigned bytes"));
    }
    got += read(bytes + 4, header_size - 4);
    if (got < header_size)
      fail(str("truncated: the file ends after ", got, " bytes, inside the ", header_size, "-byte IDX header"));
    std::vector<std::uint32_t> values;
    values.reserve(static_cast<std::size_t>(dims));
    for (int d = 0; d < dims; ++d) values.push_back(big_endian(bytes + 4 * static_cast<std::size_t>(d + 1)));
    return values;
  }

  // Exactly `n` payload bytes, then the end of the data. `what` describes them for messages,
  // e.g. "60000 images of 28x28".
  std::vector<std::uint8_t> read_payload(std::size_t n, const std::string& what) {
    std::vector<std::uint8_t> out;
    std::size_t filled = 0;
    while (filled < n) {
      // Grow only as data arrives (see kFirstChunk).
      out.resize(std::min(n, std::max(kFirstChunk, 2 * out.size())));
      const std::size_t got = read(out.data() + filled, out.size() - filled);
      filled += got;
      if (filled < out.size())
        fail(str("truncated: the header announces ", what, " (", n, " bytes) but only ", filled, " bytes follow the ",
                 consumed_ - filled, "-byte header", compressed_note()));
    }
    std::uint8_t extra[1];
    // Reading past the payload also makes zlib check the gzip trailer (CRC and length).
    if (read(extra, 1) != 0) {
      std::size_t more = 1;
      std::vector<std::uint8_t> sink(1 << 16);
      for (std::size_t got; (got = read(sink.data(), sink.size())) > 0;) more += got;
      fail(str("unexpected data after the payload: the header announces ", what, " (", n, " bytes) but ", more,
               " more bytes follow", compressed_note()));
    }
    return out;
  }

 private:
  static std::uint32_t big_endian(const std::uint8_t* p) {
    return std::uint32_t{p[0]} << 24 | std::uint32_t{p[1]} << 16 | std::uint32_t{p[2]} << 8 | std::uint32_t{p[3]};
  }
  // For messages about sizes: whether they count decompressed bytes, and whether zlib saw the
  // compressed stream end before its trailer (a file cut short, e.g. by an interrupted download).
  std::string compressed_note() const {
    if (gzdirect(file_)) return "";
    int code = Z_OK;
    gzerror(file_, &code);
    return code == Z_BUF_ERROR ? " (sizes after decompression; the gzip stream itself is cut short)"
                               : " (sizes after decompression)";
  }

  std::string path_;
  gzFile file_ = nullptr;
  std::size_t consumed_ = 0;  // bytes read so far (decompressed)
};

}  // namespace

Dataset load_idx(const std::string& images_path, const std::string& labels_path, int classes) {
  if (classes < 1 || classes > 256)
    throw ConfigError(str("the number of classes must be in 1..256 for byte labels (got ", classes, ")"));
  IdxReader images(images_path);
  IdxReader labels(labels_path);

  // Both headers are read and checked before anything sized by them is allocated.
  const std::vector<std::uint32_t> dims = images.read_header(kImageMagic, 3, "image");
  const std::uint32_t count = dims[0], rows = dims[1], cols = dims[2];
  if (count < 1 || count > kMaxCount)
    images.fail(str("the header announces ", count, " images; expected 1..", kMaxCount));
  if (rows < 1 || rows > kMaxSide || cols < 1 || cols > kMaxSide)
    images.fail(str("the header announces images of ", rows, "x", cols, "; each side must be in 1..", kMaxSide));
  const std::uint32_t label_count = labels.read_header(kLabelMagic, 1, "label")[0];
  if (label_count != count)
    labels.fail(str("holds ", label_count, " labels but ", images_path, " holds ", count,
                    " images; the two files must describe the same items"));

  Dataset data;
  data.name = images_path;
  data.count = static_cast<int>(count);
  data.rows = static_cast<int>(rows);
  data.cols = static_cast<int>(cols);
  data.classes = classes;
  data.pixels = images.read_payload(std::size_t{count} * rows * cols, str(count, " images of ", rows, "x", cols));
  data.labels = labels.read_payload(count, str(count, " labels"));
  const auto bad = std::find_if(data.labels.begin(), data.labels.end(), [&](std::uint8_t l) { return l >= classes; });
  if (bad != data.labels.end())
    labels.fail(str("label ", int{*bad}, " at index ", bad - data.labels.begin(),
                    " is not below the number of classes (", classes, ")"));
  return data;
}

Dataset load_fashion_mnist(const std::string& dir, bool train) {
  const std::string prefix = train ? "train" : "t10k";
  const std::filesystem::path base(dir);
  Dataset data = load_idx((base / (prefix + "-images-idx3-ubyte.gz")).string(),
                          (base / (prefix + "-labels-idx1-ubyte.gz")).string(), 10);
  data.name = train ? "fashion-mnist/train" : "fashion-mnist/test";
  return data;
}

Dataset make_synthetic(int count, int channels, int rows, int cols, int classes, std::uint64_t seed) {
  if (count < 1 || count > static_cast<int>(kMaxCount))
    throw ConfigError(str("synthetic data: the image count must be in 1..", kMaxCount, " (got ", count, ")"));
  if (rows < 1 || rows > static_cast<int>(kMaxSide) || cols < 1 || cols > static_cast<int>(kMaxSide) || channels < 1 ||
      channels > static_cast<int>(kMaxSide))
    throw ConfigError(
        str("synthetic data: images of ", channels, "x", rows, "x", cols, "; each side must be in 1..", kMaxSide));
  if (static_cast<std::uint64_t>(count) * static_cast<std::uint64_t>(channels) * static_cast<std::uint64_t>(rows) *
          static_cast<std::uint64_t>(cols) >
      (std::uint64_t{1} << 34))
    throw ConfigError(str("synthetic data: ", count, " images of ", channels, "x", rows, "x", cols,
                          " are more than 2^34 pixels; use an HDF5 data set (drtrain-data synth) for sets that large"));
  if (classes < 1 || classes > 256)
    throw ConfigError(str("synthetic data: the number of classes must be in 1..256 (got ", classes, ")"));
  Dataset data;
  data.name = "synthetic";
  data.count = count;
  data.channels = channels;
  data.rows = rows;
  data.cols = cols;
  data.classes = classes;
  data.pixels.resize(static_cast<std::size_t>(count) * data.image_size());
  data.labels.resize(static_cast<std::size_t>(count));

  // Bytes are taken straight from the engine's 64-bit outputs, least significant byte first (no
  // std:: distribution, whose output differs between standard libraries).
  std::mt19937_64 rng(seed);
  std::uint64_t word = 0;
  for (std::size_t i = 0; i < data.pixels.size(); ++i) {
    if (i % 8 == 0) word = rng();
    data.pixels[i] = static_cast<std::uint8_t>(word >> (8 * (i % 8)));
  }
  // Labels: one draw each, rejecting the top 2^64 mod classes values so every class is equally likely.
  const std::uint64_t bound = static_cast<std::uint64_t>(classes);
  const std::uint64_t threshold = (0 - bound) % bound;
  for (auto& label : data.labels) {
    std::uint64_t r;
    do r = rng();
    while (r < threshold);
    label = static_cast<std::uint8_t>(r % bound);
  }
  return data;
}

}  // namespace drt::data
