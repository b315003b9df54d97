// Conversion of existing data sets into drtrain's HDF5 format (drtrain-data convert): MNIST-style
// IDX file pairs, and NumPy .npy image and label arrays, read piece by piece.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "drtrain/data/hdf5_format.hpp"

namespace drt::data {

struct ConvertOptions {
  std::int64_t classes = 0;                          // 0: the largest label + 1
  std::string class_names;                           // optional, comma-separated
  bool normalize = false;                            // store mean/std of the train split in every split
  int compress_level = 0;                            // gzip level; 0: none
  std::size_t chunk_bytes = std::size_t{256} << 10;  // target size of an image chunk
};

// DIR/train-images-idx3-ubyte(.gz) + train-labels-idx1-ubyte(.gz) -> /train, and the t10k-*
// pair -> /test (either may be missing, not both), uint8 NCHW [N, 1, H, W]. Writes OUT through
// OUT.tmp (Hdf5Writer). Throws ConfigError naming the file and the problem.
void convert_idx(const std::string& dir, const std::string& out, const ConvertOptions& options);

struct NpyPair {
  std::string images, labels;  // .npy paths
};
// Images [N, H, W] (one channel) or [N, C, H, W] / [N, H, W, C] as `layout` says (required for
// 4-D arrays), uint8 or float32; labels [N] of any integer type. The test pair is optional and
// must have the train pair's sample shape and type. Stored in the layout given (no transpose).
void convert_npy(const NpyPair& train, const std::optional<NpyPair>& test, std::optional<Layout> layout,
                 const std::string& out, const ConvertOptions& options);

}  // namespace drt::data
