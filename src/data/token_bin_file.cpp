#include "drtrain/data/token_bin_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::data {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw ConfigError(str(path, ": ", problem));
}

// Reads exactly `size` bytes at `offset`; false when the file ends first.
bool read_at(int fd, const std::string& path, void* out, std::size_t size, std::uint64_t offset) {
  auto* dst = static_cast<char*>(out);
  while (size > 0) {
    const ssize_t got = ::pread(fd, dst, size, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail(path, str("read error: ", errno_text(errno)));
    if (got == 0) return false;
    dst += got;
    size -= static_cast<std::size_t>(got);
    offset += static_cast<std::uint64_t>(got);
  }
  return true;
}

std::int32_t little_int32(const unsigned char* p) {
  const std::uint32_t v =
      std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 | std::uint32_t{p[3]} << 24;
  std::int32_t out;
  std::memcpy(&out, &v, sizeof out);
  return out;
}

}  // namespace

TokenBinFile::TokenBinFile(const std::string& path, TokenBinKind kind) : path_(path), kind_(kind) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail(path, str("cannot open: ", errno_text(errno)));
  try {
    struct stat info {};
    if (::fstat(fd_, &info) != 0) fail(path, str("cannot stat: ", errno_text(errno)));
    if (!S_ISREG(info.st_mode)) fail(path, "is not a regular file");
    const auto size = static_cast<std::uint64_t>(info.st_size);
    switch (kind) {
      case TokenBinKind::kBytes:
        token_bytes_ = 1;
        count_ = static_cast<std::int64_t>(size);
        break;
      case TokenBinKind::kUint16:
        token_bytes_ = 2;
        if (size % 2 != 0)
          fail(path, str(size, " bytes, an odd number: not a stream of uint16 tokens (nanoGPT's train.bin: "
                               "np.array(ids, dtype=np.uint16).tofile(path)); cut short?"));
        count_ = static_cast<std::int64_t>(size / 2);
        break;
      case TokenBinKind::kLlmc: {
        const std::string what = "llm.c token shards start with 256 int32: magic 20240520, version 1, the token "
                                 "count, then the uint16 tokens (llm.c's dev/data scripts write them)";
        unsigned char header[kLlmcHeaderBytes];
        if (size < kLlmcHeaderBytes || !read_at(fd_, path, header, sizeof header, 0))
          fail(path, str(size, " bytes, shorter than llm.c's header of ", kLlmcHeaderBytes, " bytes; ", what));
        magic_ = little_int32(header);
        const std::int32_t version = little_int32(header + 4), count = little_int32(header + 8);
        if (magic_ == kLlmcMagicGpt2) {
          if (version != 1)
            fail(path,
                 str("llm.c shard of version ", version, " (header[1]); drtrain reads version 1 (uint16 tokens)"));
          token_bytes_ = 2;
        } else if (magic_ == kLlmcMagicLlama3) {
          if (version != 7)
            fail(path, str("llm.c LLaMA 3 shard of version ", version,
                           " (header[1]); drtrain reads version 7 (uint32 tokens)"));
          token_bytes_ = 4;
        } else {
          fail(path,
               str("magic number ", magic_, " (header[0]), expected ", kLlmcMagicGpt2, ": not an llm.c token shard; ",
                   what, ". A headerless uint16 stream (nanoGPT's train.bin) converts with --uint16-bin"));
        }
        if (count < 0) fail(path, str("llm.c header: token count ", count, " (header[2]) is negative"));
        count_ = count;
        offset_ = kLlmcHeaderBytes;
        const std::uint64_t expected = kLlmcHeaderBytes + static_cast<std::uint64_t>(count) * token_bytes_;
        if (size != expected)
          fail(path, str(size, " bytes, but its header announces ", count, " tokens of ", token_bytes_,
                         " bytes after 1024 header bytes: ", expected, " bytes; the file is ",
                         size < expected ? "cut short (an interrupted download?): fetch it again"
                                         : "longer than its header says: not an llm.c shard"));
        break;
      }
    }
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

TokenBinFile::~TokenBinFile() {
  if (fd_ >= 0) ::close(fd_);
}

TokenBinFile::TokenBinFile(TokenBinFile&& other) noexcept
    : path_(std::move(other.path_)),
      kind_(other.kind_),
      fd_(other.fd_),
      count_(other.count_),
      token_bytes_(other.token_bytes_),
      offset_(other.offset_),
      magic_(other.magic_) {
  other.fd_ = -1;
}

std::int64_t TokenBinFile::default_vocab() const {
  switch (kind_) {
    case TokenBinKind::kBytes: return 256;
    case TokenBinKind::kUint16: return 0;
    case TokenBinKind::kLlmc: return magic_ == kLlmcMagicLlama3 ? 128256 : 50257;
  }
  return 0;
}

void TokenBinFile::read(std::int64_t first, std::int64_t n, std::uint32_t* out) const {
  DRT_ASSERT(first >= 0 && n >= 0 && first + n <= count_, str(path_, ": tokens out of range"));
  if (n == 0) return;
  const std::size_t bytes = static_cast<std::size_t>(n) * token_bytes_;
  std::vector<unsigned char> raw(bytes);
  if (!read_at(fd_, path_, raw.data(), bytes, offset_ + static_cast<std::uint64_t>(first) * token_bytes_))
    fail(path_, "the file ended early (was it truncated while being read?)");
  const unsigned char* p = raw.data();
  for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i, p += token_bytes_) {
    switch (token_bytes_) {
      case 1: out[i] = p[0]; break;
      case 2: out[i] = std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8; break;
      default:
        out[i] = std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 | std::uint32_t{p[3]} << 24;
    }
  }
}

}  // namespace drt::data
