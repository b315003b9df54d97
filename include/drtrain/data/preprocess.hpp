// What the loader does to a training sample after reading it: augmentation (random crop with
// zero padding, horizontal flip; drawn per (seed, epoch, sample), so a run is reproducible and
// does not depend on the number of workers or towers) and per-channel normalisation
// ((x - mean) / std, in training and evaluation alike).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace drt::data {

struct Augmentation {
  int crop_pad = 0;   // random crop of the image's own size from the image padded by this (0: none)
  bool flip = false;  // horizontal flip with probability 1/2
  bool any() const { return crop_pad > 0 || flip; }
  std::string text() const;  // "none", "crop:4,flip", as parse_augmentation reads it
};

// "none", or a comma-separated list of "crop:PAD" (PAD in 1..64) and "flip". Throws ConfigError
// naming --augment and the accepted forms.
Augmentation parse_augmentation(const std::string& text);

// Augments one CHW image in place: the draws are a hash of (seed, epoch, sample), where sample
// is the image's index in the data set. Crop: shifts by (dy, dx) uniform in [-pad, pad]^2 and
// fills what comes from outside the image with 0, which is torchvision's
// RandomCrop(size, padding=pad) followed by RandomHorizontalFlip. `scratch` holds at least
// height * width floats.
void augment_image(const Augmentation& a, std::uint64_t seed, int epoch, std::int64_t sample, int channels, int height,
                   int width, float* image, float* scratch);

// Per-channel (x - mean) / std. Empty: no normalisation.
struct Normalization {
  std::vector<float> mean, stddev;
  bool any() const { return !mean.empty(); }
  std::string text() const;  // "none", or "M1,M2/S1,S2"
};

// "none", "stored" (the data file's statistics: `stored` is what the source holds, and an error
// when it holds none), or "M1,...,Mc/S1,...,Sc" with one mean and one positive std per channel.
// Throws ConfigError naming --normalize.
Normalization parse_normalization(const std::string& text, int channels, const std::vector<float>& stored_mean,
                                  const std::vector<float>& stored_std, const std::string& source_name);

// Applies `n` to `count` CHW images in place.
void normalize_images(const Normalization& n, int channels, std::size_t plane, float* images, std::size_t count);

}  // namespace drt::data
