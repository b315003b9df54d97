#include "drtrain/data/npy_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::data {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicSize = 6;
constexpr std::size_t kMaxHeader = std::size_t{1} << 20;

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw ConfigError(str(path, ": ", problem));
}

// A cursor over the header text with the few Python literals np.save writes.
class Literal {
 public:
  Literal(const std::string& text, const std::string& path) : text_(text), path_(path) {}

  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool accept(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!accept(c)) bad(str("expected '", c, "'"));
  }
  char peek() {
    skip_space();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }
  std::string string() {
    skip_space();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) bad("expected a quoted string");
    const char quote = text_[pos_++];
    const std::size_t end = text_.find(quote, pos_);
    if (end == std::string::npos) bad("unterminated string");
    std::string value = text_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return value;
  }
  bool boolean() {
    skip_space();
    for (const auto& [word, value] : {std::pair<const char*, bool>{"True", true}, {"False", false}}) {
      const std::size_t n = std::strlen(word);
      if (text_.compare(pos_, n, word) == 0) {
        pos_ += n;
        return value;
      }
    }
    bad("expected True or False");
  }
  std::int64_t integer() {
    skip_space();
    std::int64_t value = 0;
    const std::size_t begin = pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      const int digit = text_[pos_++] - '0';
      if (value > (std::numeric_limits<std::int64_t>::max() - digit) / 10) bad("a dimension is too large");
      value = value * 10 + digit;
    }
    if (pos_ == begin) bad("expected a non-negative integer");
    if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;  // Python 2's long literals
    return value;
  }
  [[noreturn]] void bad(const std::string& what) const {
    fail(path_, str("bad .npy header at character ", pos_, ": ", what, " (header: ", text_, ")"));
  }

 private:
  const std::string& text_;
  const std::string& path_;
  std::size_t pos_ = 0;
};

}  // namespace

NpyHeader parse_npy_header(const std::string& text, const std::string& path) {
  Literal in(text, path);
  NpyHeader header;
  bool has_descr = false, has_order = false, has_shape = false;
  in.expect('{');
  while (!in.accept('}')) {
    const std::string key = in.string();
    in.expect(':');
    if (key == "descr") {
      if (in.peek() == '[')
        fail(path, "holds a structured array (a list of fields in 'descr'); save each field as an array of its own");
      header.descr = in.string();
      has_descr = true;
    } else if (key == "fortran_order") {
      header.fortran_order = in.boolean();
      has_order = true;
    } else if (key == "shape") {
      in.expect('(');
      while (!in.accept(')')) {
        header.shape.push_back(in.integer());
        if (!in.accept(',')) {
          in.expect(')');
          break;
        }
      }
      has_shape = true;
    } else {
      in.bad(str("unknown key '", key, "'"));
    }
    if (!in.accept(',')) {
      in.expect('}');
      break;
    }
  }
  if (!has_descr || !has_order || !has_shape) in.bad("the header lacks descr, fortran_order or shape");
  return header;
}

NpyFile::NpyFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail(path, str("cannot open: ", errno_text(errno)));
  try {
    check();
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

void NpyFile::check() {
  const std::string& path = path_;
  struct stat info {};
  if (::fstat(fd_, &info) != 0) fail(path, str("cannot stat: ", errno_text(errno)));
  if (S_ISDIR(info.st_mode)) fail(path, "is a directory; expected a .npy file");
  const auto file_size = static_cast<std::uint64_t>(info.st_size);

  read_header(file_size);
  check_dtype();
  if (header_.fortran_order)
    fail(path, "is stored in Fortran order; save it in C order (numpy: np.save(path, np.ascontiguousarray(x)))");
  check_data_size(file_size);
}

void NpyFile::read_header(std::uint64_t file_size) {
  const std::string& path = path_;
  unsigned char prefix[12] = {};
  const ssize_t got = ::pread(fd_, prefix, sizeof prefix, 0);
  if (got < static_cast<ssize_t>(kMagicSize) + 2 || std::memcmp(prefix, kMagic, kMagicSize) != 0)
    fail(path, "not a .npy file (no \\x93NUMPY magic); save arrays with numpy.save");
  const int major = prefix[6];
  std::uint64_t header_size = 0;
  if (major == 1) {
    if (got < 10) fail(path, "truncated .npy header");
    header_size = prefix[8] | static_cast<std::uint64_t>(prefix[9]) << 8;
    data_offset_ = 10;
  } else if (major == 2 || major == 3) {
    if (got < 12) fail(path, "truncated .npy header");
    header_size = prefix[8] | static_cast<std::uint64_t>(prefix[9]) << 8 |
                  static_cast<std::uint64_t>(prefix[10]) << 16 | static_cast<std::uint64_t>(prefix[11]) << 24;
    data_offset_ = 12;
  } else {
    fail(path, str(".npy format version ", major, ".", int{prefix[7]}, "; drtrain reads versions 1 to 3"));
  }
  if (header_size > kMaxHeader || data_offset_ + header_size > file_size)
    fail(path, str("the .npy header announces ", header_size, " bytes but the file holds ", file_size,
                   " bytes; the file is cut short or not an .npy file"));
  std::string text(static_cast<std::size_t>(header_size), '\0');
  if (::pread(fd_, text.data(), text.size(), static_cast<off_t>(data_offset_)) != static_cast<ssize_t>(text.size()))
    fail(path, str("cannot read the .npy header: ", errno_text(errno)));
  data_offset_ += header_size;
  header_ = parse_npy_header(text, path);
}

void NpyFile::check_dtype() {
  const std::string& path = path_;
  // descr: byte order, kind, size ("<f4", "|u1", "u1")
  const std::string& d = header_.descr;
  std::size_t at = 0;
  char order = '|';
  if (!d.empty() && (d[0] == '<' || d[0] == '>' || d[0] == '|' || d[0] == '=')) order = d[at++];
  if (at >= d.size()) fail(path, str("unsupported dtype '", d, "'"));
  kind_ = d[at++];
  std::size_t size = 0;
  for (; at < d.size() && std::isdigit(static_cast<unsigned char>(d[at])) && size < 1000; ++at)
    size = size * 10 + static_cast<std::size_t>(d[at] - '0');
  if (at != d.size() || (kind_ != 'u' && kind_ != 'i' && kind_ != 'f' && kind_ != 'b') ||
      (size != 1 && size != 2 && size != 4 && size != 8))
    fail(path,
         str("dtype '", d, "' is not supported; drtrain reads unsigned and signed integers, booleans and floats"));
  item_size_ = size;
  if (order == '>' && size > 1)
    fail(path,
         str("dtype '", d, "' is big-endian; save it little-endian (numpy: x.astype(x.dtype.newbyteorder('<')))"));
}

void NpyFile::check_data_size(std::uint64_t file_size) const {
  const std::string& path = path_;
  std::uint64_t bytes = item_size_;
  for (std::int64_t dim : header_.shape) {
    const auto u = static_cast<std::uint64_t>(dim);
    if (u != 0 && bytes > std::numeric_limits<std::uint64_t>::max() / u) fail(path, "the array's shape is too large");
    bytes *= u;
  }
  const std::uint64_t have = file_size - data_offset_;
  if (have != bytes) {
    std::vector<std::string> dims;
    for (std::int64_t dim : header_.shape) dims.push_back(std::to_string(dim));
    fail(path, str("the header announces ", dtype_name(), " (", join(dims, ", "), "): ", bytes, " bytes of data, but ",
                   have, " follow the header; the file is ",
                   have < bytes ? "cut short (an interrupted copy?)" : "longer than its array"));
  }
}

NpyFile::~NpyFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::string NpyFile::dtype_name() const {
  switch (kind_) {
    case 'u': return str("uint", item_size_ * 8);
    case 'i': return str("int", item_size_ * 8);
    case 'f': return str("float", item_size_ * 8);
    default: return "bool";
  }
}

std::int64_t NpyFile::rows() const { return header_.shape.empty() ? 1 : header_.shape[0]; }

std::size_t NpyFile::row_bytes() const {
  std::size_t bytes = item_size_;
  for (std::size_t d = 1; d < header_.shape.size(); ++d) bytes *= static_cast<std::size_t>(header_.shape[d]);
  return bytes;
}

void NpyFile::read_rows(std::int64_t first, std::int64_t count, void* out) const {
  DRT_ASSERT(first >= 0 && count >= 0 && first + count <= rows(), str(path_, ": rows out of range"));
  auto* dst = static_cast<char*>(out);
  std::size_t left = static_cast<std::size_t>(count) * row_bytes();
  auto offset = static_cast<off_t>(data_offset_ + static_cast<std::uint64_t>(first) * row_bytes());
  while (left > 0) {
    const ssize_t got = ::pread(fd_, dst, left, offset);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail(path_, str("read error: ", errno_text(errno)));
    if (got == 0) fail(path_, "the file ended early (was it truncated while being read?)");
    dst += got;
    left -= static_cast<std::size_t>(got);
    offset += got;
  }
}

std::vector<std::int64_t> NpyFile::read_integers(std::int64_t first, std::int64_t count) const {
  if (kind_ != 'u' && kind_ != 'i')
    fail(path_, str("dtype ", dtype_name(), "; expected integers (numpy: y.astype('int64'))"));
  std::vector<unsigned char> raw(static_cast<std::size_t>(count) * item_size_);
  read_rows(first, count, raw.data());
  std::vector<std::int64_t> values(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < values.size(); ++i) {
    const unsigned char* p = raw.data() + i * item_size_;
    std::uint64_t u = 0;
    for (std::size_t b = 0; b < item_size_; ++b) u |= static_cast<std::uint64_t>(p[b]) << (8 * b);  // little-endian
    std::int64_t v = 0;
    if (kind_ == 'i' && item_size_ < 8 && (u >> (8 * item_size_ - 1)) != 0)
      v = static_cast<std::int64_t>(u) - (std::int64_t{1} << (8 * item_size_));  // sign-extend
    else if (kind_ == 'u' && item_size_ == 8 &&
             u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      fail(path_, str("value ", u, " at index ", first + static_cast<std::int64_t>(i), " is too large for a label"));
    else v = static_cast<std::int64_t>(u);
    values[i] = v;
  }
  return values;
}

}  // namespace drt::data
