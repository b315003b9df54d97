// Fuzz target: drt::data::NpyFile, the NumPy .npy reader behind `drtrain-data convert --npy`
// (header dict parser, dtype and shape checks against the file size, row reads).
//
// Input: the bytes of a .npy file. Expected: an NpyFile that keeps the documented invariants,
// or drt::ConfigError. Anything else (another exception, a sanitizer report, a broken
// invariant) is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "drtrain/core/error.hpp"
#include "drtrain/data/npy_file.hpp"
#include "fuzz_util.hpp"

namespace {

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "fuzz_npy: %s\n", what);
  std::abort();
}

constexpr std::size_t kMaxReadBytes = std::size_t{1} << 20;  // reads of at most this many bytes

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = drt::fuzz::write_file("a.npy", data, size);
  try {
    const drt::data::NpyFile f(path);
    const char kind = f.kind();
    if (kind != 'u' && kind != 'i' && kind != 'f' && kind != 'b') finding("unsupported dtype kind accepted");
    const std::size_t item = f.item_size();
    if (item != 1 && item != 2 && item != 4 && item != 8) finding("unsupported item size accepted");
    for (std::int64_t dim : f.shape())
      if (dim < 0) finding("negative dimension accepted");
    const std::int64_t rows = f.rows();
    // The data the header announces is what follows it: rows x row_bytes fit in the input.
    if (rows > 0 && f.row_bytes() > size / static_cast<std::uint64_t>(rows))
      finding("rows x row_bytes larger than the file");
    if (rows > 0 && f.row_bytes() <= kMaxReadBytes) {
      std::vector<unsigned char> row(f.row_bytes());
      f.read_rows(0, 1, row.data());
      f.read_rows(rows - 1, 1, row.data());
    }
    if ((kind == 'u' || kind == 'i') && f.shape().size() == 1 && rows > 0 &&
        static_cast<std::uint64_t>(rows) * item <= kMaxReadBytes) {
      const std::vector<std::int64_t> values = f.read_integers(0, rows);
      if (values.size() != static_cast<std::size_t>(rows)) finding("read_integers returned the wrong count");
      if (kind == 'u')
        for (std::int64_t v : values)
          if (v < 0) finding("an unsigned value read as negative");
    }
  } catch (const drt::ConfigError&) {
    // the documented failure
  }
  return 0;
}
