// Writes a data set in drtrain's HDF5 format (docs/DATA_FORMAT.md), one split after the other
// and each in pieces, so that a set larger than memory can be written. The file is written as
// PATH.tmp and renamed to PATH by commit(); a writer destroyed before commit() removes PATH.tmp,
// so nothing half-written is ever found under PATH.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "drtrain/data/hdf5_format.hpp"

namespace drt::data {

struct WriterOptions {
  std::int64_t classes = 0;                         // K >= 1: labels lie in [0, K)
  std::string class_names;                          // optional: K comma-separated names
  std::string source;                               // optional: where the data came from (root attribute `source`)
  int compress_level = 0;                           // gzip level 1..9; 0: none (reading speed matters)
  std::size_t chunk_bytes = std::size_t{32} << 10;  // target size of an image chunk (>= 1 sample)
  bool normalize = false;  // compute mean/std over the train split and store them in every split
};

// The shape of one split's images as stored.
struct SplitShape {
  std::int64_t count = 0;
  int channels = 1, height = 0, width = 0;
  PixelType pixel_type = PixelType::kUint8;
  Layout layout = Layout::kNCHW;
};

class Hdf5Writer {
 public:
  // Creates PATH.tmp (replacing one left by an earlier run). Throws ConfigError for bad options
  // or a file that cannot be created.
  Hdf5Writer(const std::string& path, const WriterOptions& options);
  ~Hdf5Writer();  // without commit(): closes and removes PATH.tmp
  Hdf5Writer(const Hdf5Writer&) = delete;
  Hdf5Writer& operator=(const Hdf5Writer&) = delete;

  // Starts split "train" or "test" (each at most once); the previous split must be complete.
  void begin_split(const std::string& split, const SplitShape& shape);
  // Samples per image chunk of the current split: appending multiples of it is fastest.
  std::int64_t chunk_samples() const;
  // Appends `count` samples: images in the split's layout and pixel type (count x C*H*W
  // values), and their labels, each in [0, classes) (else ConfigError naming the sample).
  void append(const void* images, const std::int64_t* labels, std::int64_t count);
  // Writes mean/std (with normalize), closes the file, fsyncs it and renames PATH.tmp to PATH.
  // Every split begun must hold all its samples.
  void commit();

  const std::string& path() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace drt::data
