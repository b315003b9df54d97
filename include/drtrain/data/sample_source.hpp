// SampleSource: one split of a data set (train or test) that hands out the samples a step asks
// for, as float CHW images and int32 labels, without holding the whole set: in memory (IDX
// files, synthetic data: memory_source.hpp) or read from an HDF5 file in chunks
// (hdf5_source.hpp). The loader reads each step's samples of one worker with one read() call.
// A token stream is a SampleSource too (token_source.hpp): a sample is a window of T token ids
// (as floats, a 1 x 1 x T "image") with its T next-token targets as labels.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace drt::data {

struct SourceInfo {
  std::string name;  // "FILE:/train", "fashion-mnist/train", "synthetic/train"
  std::int64_t count = 0;
  int channels = 1, height = 0, width = 0, classes = 0;  // token windows: 1, 1, T, vocab_size
  bool tokens = false;  // samples are windows of token ids (token_source.hpp), not images
  int targets = 1;      // labels per sample: 1 for images, T for token windows
  std::size_t sample_floats() const {
    return static_cast<std::size_t>(channels) * static_cast<std::size_t>(height) * static_cast<std::size_t>(width);
  }
};

// A split of a data set that hands out samples on demand (no whole-set load).
class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual const SourceInfo& info() const = 0;
  // Writes samples `indices[i]` (any order, repeats allowed, each in [0, count)) as float CHW
  // (uint8 scaled by 1/255; no mean/std applied) to images + i*sample_floats(), and their labels
  // to labels + i*targets (token windows: T token ids as floats and their T next tokens).
  // Throws ConfigError naming the file, dataset and problem (e.g. a corrupt chunk, a label out of
  // range); an index outside [0, count) is the caller's bug: drt::Error.
  virtual void read(const std::vector<std::int64_t>& indices, float* images, std::int32_t* labels) = 0;
  // Per-channel mean and std stored with the split, empty when none.
  virtual std::vector<float> mean() const { return {}; }
  virtual std::vector<float> stddev() const { return {}; }
};

// A read request in file order: `order` becomes the (index, position in the request) pairs of
// `indices`, sorted by index, so that a source reads each chunk once however the request is
// shuffled. Throws drt::Error for an index outside [0, info.count) (`unit`: "sample", "window").
void sort_request(const SourceInfo& info, const std::vector<std::int64_t>& indices, const char* unit,
                  std::vector<std::pair<std::int64_t, std::int64_t>>& order);

// x / 255 for every byte value: how every source turns uint8 pixels into floats (the same floats
// as dividing each pixel), so IDX files and HDF5 files of the same bytes train identically.
const std::array<float, 256>& byte_pixel_values();

}  // namespace drt::data
