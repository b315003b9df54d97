// Dataset: labelled images held in memory as bytes (pixels 0..255, CHW), with loaders for
// Fashion-MNIST's IDX gzip files (one channel) and a synthetic generator for benchmarks. Training
// reads it through a SampleSource (memory_source.hpp); large data sets live in HDF5 files
// instead (hdf5_source.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace drt::data {

struct Dataset {
  std::string name;  // "fashion-mnist/train", "synthetic"
  int count = 0;     // images
  int channels = 1;
  int rows = 0, cols = 0;  // image size
  int classes = 10;
  std::vector<std::uint8_t> pixels;  // count x channels x rows x cols, row-major
  std::vector<std::uint8_t> labels;  // count, each < classes

  std::size_t image_size() const {
    return static_cast<std::size_t>(channels) * static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
  }
};

// Reads an IDX image file (magic 0x00000803, 3 dimensions) and an IDX label file (0x00000801,
// 1 dimension), gzip-compressed or not (zlib reads both). Validates magic numbers, dimensions
// (non-zero, at most 100'000'000 images of at most 4096 x 4096; `classes` in 1..256), that
// both files hold the same number of items, that
// every label is below `classes`, and that the files hold exactly the bytes their headers
// announce (neither truncated nor followed by extra data) before and while allocating.
// Throws ConfigError naming the file and the problem; a missing file's message names the
// Debian package dataset-fashion-mnist and --data-dir.
Dataset load_idx(const std::string& images_path, const std::string& labels_path, int classes = 10);

// `dir`/train-images-idx3-ubyte.gz + train-labels-idx1-ubyte.gz (train) or the t10k-* pair.
Dataset load_fashion_mnist(const std::string& dir, bool train);

// `count` images of channels x rows x cols with uniformly random pixels and labels, from `seed`
// (std::mt19937_64; the same on every machine). Throws ConfigError for a count outside
// 1..100'000'000, a side outside 1..4096, channels outside 1..4096, more than 2^34 pixels, or
// classes outside 1..256.
Dataset make_synthetic(int count, int channels, int rows, int cols, int classes, std::uint64_t seed);
inline Dataset make_synthetic(int count, int rows, int cols, int classes, std::uint64_t seed) {
  return make_synthetic(count, 1, rows, cols, classes, seed);
}

}  // namespace drt::data
