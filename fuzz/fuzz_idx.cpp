// Fuzz target: drt::data::load_idx, the IDX image + label reader (gzip or plain; zlib reads both).
//
// Input layout (fuzz/README.md):
//   byte 0     flags: bit 0 gzip-compress the image file, bit 1 the label file (so that valid
//              compressed streams are reached; raw bytes also reach zlib's own parser, since
//              zlib sniffs the gzip magic in uncompressed files too)
//   byte 1     classes (0 means 256)
//   bytes 2-3  L, the label file's length (little-endian; clamped to what is left)
//   then       L bytes: the label file, then the rest: the image file
// Expected: a Dataset that keeps the documented invariants, or drt::ConfigError. Anything else
// (another exception, a sanitizer report, a broken invariant) is a finding.
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "drtrain/core/error.hpp"
#include "drtrain/data/dataset.hpp"
#include "fuzz_util.hpp"

namespace {

std::string write_maybe_gzip(const std::string& name, const std::uint8_t* data, std::size_t size, bool gzip) {
  if (!gzip) return drt::fuzz::write_file(name, data, size);
  const std::string path = drt::fuzz::scratch_dir() + "/" + name;
  gzFile f = gzopen(path.c_str(), "wb1");
  if (!f || (size && gzwrite(f, data, static_cast<unsigned>(size)) != static_cast<int>(size)) || gzclose(f) != Z_OK) {
    std::perror(("fuzz_idx: writing " + path).c_str());
    std::abort();
  }
  return path;
}

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "fuzz_idx: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 4) return -1;
  const unsigned flags = data[0];
  const int classes = data[1] ? data[1] : 256;
  std::size_t label_size = data[2] | std::size_t{data[3]} << 8;
  data += 4, size -= 4;
  if (label_size > size) label_size = size;
  const std::string labels = write_maybe_gzip("labels", data, label_size, flags & 2);
  const std::string images = write_maybe_gzip("images", data + label_size, size - label_size, flags & 1);
  try {
    const drt::data::Dataset d = drt::data::load_idx(images, labels, classes);
    if (d.count < 1 || d.rows < 1 || d.cols < 1 || d.rows > 4096 || d.cols > 4096) finding("bad dimensions accepted");
    if (d.classes != classes) finding("classes not kept");
    if (d.pixels.size() != static_cast<std::size_t>(d.count) * d.image_size())
      finding("pixels size != count*rows*cols");
    if (d.labels.size() != static_cast<std::size_t>(d.count)) finding("labels size != count");
    for (std::uint8_t l : d.labels)
      if (l >= classes) finding("label not below classes accepted");
  } catch (const drt::ConfigError&) {
    // the documented failure
  }
  return 0;
}
