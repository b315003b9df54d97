// Samples on demand from a split of an HDF5 data set (docs/DATA_FORMAT.md): open_hdf5_source
// gives a SampleSource (sample_source.hpp) that reads only the samples asked for (never the whole
// set) through HDF5's chunk cache. An index outside [0, count) is the caller's bug: drt::Error.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "drtrain/data/sample_source.hpp"

namespace drt::data {

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
