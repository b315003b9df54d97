// Synthetic data sets in drtrain's HDF5 format (drtrain-data synth), for memory and throughput
// tests: any size (written in pieces, never held in memory), the same bytes from the same seed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "drtrain/data/hdf5_format.hpp"

namespace drt::data {

struct SyntheticOptions {
  std::int64_t count = 0;       // train samples (>= 1)
  std::int64_t test_count = 0;  // test samples (0: no test split)
  int channels = 1, height = 28, width = 28;
  std::int64_t classes = 10;
  PixelType pixel_type = PixelType::kUint8;
  Layout layout = Layout::kNCHW;
  std::uint64_t seed = 1;
  int compress_level = 0;
  std::size_t chunk_bytes = std::size_t{256} << 10;  // target size of an image chunk
  bool normalize = false;
};

// Each class has a random prototype image; a sample of class k is the mean of k's prototype and
// uniform noise (so a model can learn the classes). Labels are uniform over the classes. Drawn
// from std::mt19937_64: the prototypes, then the train split, from `seed`; the test split from
// seed + 0x9E3779B97F4A7C15; sample by sample (label, then pixels in the file's layout), so the
// bytes depend on the options only. Throws ConfigError for bad options (the
// prototypes, classes x sample size, may take at most 1 GiB).
void write_synthetic_hdf5(const std::string& path, const SyntheticOptions& options);

}  // namespace drt::data
