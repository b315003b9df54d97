// Per-channel mean and standard deviation of images, accumulated piece by piece while a data set
// is written (drtrain-data convert --normalize): exact for uint8 pixels (a histogram per
// channel), Chan et al.'s pairwise update in double for float32 ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "drtrain/data/hdf5_format.hpp"

namespace drt::data {

class ChannelStats {
 public:
  explicit ChannelStats(int channels);

  // Adds `count` samples of `channels` x `plane` pixels stored in `layout`. uint8 pixels count
  // as x/255, the floats a SampleSource returns. A source adds one pixel type only.
  void add(const std::uint8_t* samples, std::int64_t count, std::size_t plane, Layout layout);
  void add(const float* samples, std::int64_t count, std::size_t plane, Layout layout);

  std::int64_t values() const { return values_; }  // pixels added per channel
  // Population statistics (dividing by the number of pixels) over every pixel of each channel.
  std::vector<float> mean() const;
  std::vector<float> stddev() const;

 private:
  struct Moments {
    double n = 0, mean = 0, m2 = 0;  // m2: sum of squared deviations from the mean
  };
  std::vector<Moments> moments() const;

  int channels_;
  std::int64_t values_ = 0;
  std::vector<std::int64_t> histogram_;  // channels x 256, for uint8 pixels
  std::vector<Moments> float_;           // per channel, for float32 pixels
};

}  // namespace drt::data
