// Samples on demand from a split of an HDF5 data set (docs/DATA_FORMAT.md): SampleSource, the
// interface a trainer reads batches through, and open_hdf5_source, which reads only the samples
// asked for (never the whole set) through HDF5's chunk cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace drt::data {

struct SourceInfo {
  std::string name;  // "FILE:/train"
  std::int64_t count = 0;
  int channels = 1, height = 0, width = 0, classes = 0;
  std::size_t sample_floats() const;  // channels*height*width
};

// A split of a data set that hands out samples on demand (no whole-set load).
class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual const SourceInfo& info() const = 0;
  // Writes samples `indices[i]` (any order, repeats allowed, each in [0, count)) as float CHW
  // (uint8 scaled by 1/255; no mean/std applied) to images + i*sample_floats(), and their labels.
  // Throws ConfigError naming the file, dataset and problem (e.g. a corrupt chunk, a label out of
  // range); an index outside [0, count) is the caller's bug: drt::Error.
  virtual void read(const std::vector<std::int64_t>& indices, float* images, std::int32_t* labels) = 0;
  // Per-channel mean and std stored with the split, empty when none.
  virtual std::vector<float> mean() const { return {}; }
  virtual std::vector<float> stddev() const { return {}; }
};

// Opens FILE's split ("train" or "test") read-only and validates the whole header: version,
// classes, ranks, dtypes, layout attribute, shapes, matching counts, mean/std shapes.
// Throws ConfigError naming the file, the dataset, the problem and the fix.
//
// Reading: the requested indices are sorted and merged into runs of consecutive samples; each
// run is one hyperslab read of images and labels (at most 4 MiB of images a read), converted to
// float CHW (NHWC is transposed) and scattered to the requested positions. HDF5 caches decoded
// chunks of images in `cache_bytes` (H5Pset_chunk_cache; labels get an eighth of it, at least
// 1 MiB), so batches that hit chunks read before cost no disk read and no checksum; a set that
// fits in the cache is read from the file once. Memory: the chunk caches and one run buffer.
//
// Threads: a source is used by one thread at a time. Debian's HDF5 is not thread-safe, so the
// data sets' HDF5 calls (every source, writer and header function here) take one process-wide
// lock: two sources may be read on two threads, one after the other; no other HDF5 code may
// run concurrently on another thread.
std::unique_ptr<SampleSource> open_hdf5_source(const std::string& file, const std::string& split,
                                               std::size_t cache_bytes = 64u << 20);

}  // namespace drt::data
