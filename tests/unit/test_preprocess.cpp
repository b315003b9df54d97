// Augmentation and normalisation (data/preprocess): what a crop and a flip do to an image
// (checked against a direct formula), that the draws cover the whole range and depend only on
// (seed, epoch, sample), that the loader's batches are the same for any number of workers and
// towers, and the --augment / --normalize parsers and their messages.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "drtrain/core/error.hpp"
#include "drtrain/data/batch_loader.hpp"
#include "drtrain/data/dataset.hpp"
#include "drtrain/data/memory_source.hpp"
#include "drtrain/data/preprocess.hpp"
#include "support/expect_errors.hpp"

namespace drt::data {
namespace {

using testing_support::config_error_of;

// The image that a crop by (dy, dx) (output (y, x) from input (y + dy, x' + dx), x' = x or its
// mirror) gives, zeros outside: the definition, written independently of augment_image.
std::vector<float> expected(const std::vector<float>& in, int c, int h, int w, int dy, int dx, bool flip) {
  std::vector<float> out(in.size(), 0.0f);
  for (int ch = 0; ch < c; ++ch)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        const int sy = y + dy, sx = (flip ? w - 1 - x : x) + dx;
        const auto at = [&](int row, int col) { return (static_cast<std::size_t>(ch) * h + row) * w + col; };
        if (sy >= 0 && sy < h && sx >= 0 && sx < w) out[at(y, x)] = in[at(sy, sx)];
      }
  return out;
}

std::vector<float> distinct_image(int c, int h, int w) {
  std::vector<float> img(static_cast<std::size_t>(c * h * w));
  for (std::size_t i = 0; i < img.size(); ++i) img[i] = 1.0f + static_cast<float>(i);  // no zeros, all different
  return img;
}

// Which (dy, dx, flip) turned `in` into `out` (exactly one fits a distinct image).
std::tuple<int, int, bool> transform_of(const std::vector<float>& in, const std::vector<float>& out, int c, int h,
                                        int w, int pad) {
  std::vector<std::tuple<int, int, bool>> fits;
  for (int dy = -pad; dy <= pad; ++dy)
    for (int dx = -pad; dx <= pad; ++dx)
      for (bool flip : {false, true})
        if (expected(in, c, h, w, dy, dx, flip) == out) fits.emplace_back(dy, dx, flip);
  EXPECT_EQ(fits.size(), 1u);
  return fits.empty() ? std::tuple<int, int, bool>{99, 99, false} : fits[0];
}

TEST(Augmentation, CropAndFlipCoverTheirRangeAndDependOnlyOnSeedEpochSample) {
  const int c = 2, h = 6, w = 7, pad = 2;
  const Augmentation a = parse_augmentation("crop:2,flip");
  const std::vector<float> in = distinct_image(c, h, w);
  std::vector<float> scratch(static_cast<std::size_t>(h * w));
  std::map<std::tuple<int, int, bool>, int> seen;
  for (std::int64_t sample = 0; sample < 1000; ++sample) {
    std::vector<float> img = in;
    augment_image(a, 42, 3, sample, c, h, w, img.data(), scratch.data());
    const auto t = transform_of(in, img, c, h, w, pad);
    ++seen[t];
    std::vector<float> again = in;  // the same draw again
    augment_image(a, 42, 3, sample, c, h, w, again.data(), scratch.data());
    EXPECT_EQ(again, img);
  }
  // 5 x 5 shifts x 2 flips, each drawn about 1000 / 50 = 20 times.
  EXPECT_EQ(seen.size(), 50u);
  for (const auto& [t, n] : seen) EXPECT_GE(n, 5) << std::get<0>(t) << "," << std::get<1>(t) << "," << std::get<2>(t);
  // Another epoch or seed draws differently for most samples.
  int same_epoch = 0, same_seed = 0;
  for (std::int64_t sample = 0; sample < 200; ++sample) {
    std::vector<float> base = in, other_epoch = in, other_seed = in;
    augment_image(a, 42, 3, sample, c, h, w, base.data(), scratch.data());
    augment_image(a, 42, 4, sample, c, h, w, other_epoch.data(), scratch.data());
    augment_image(a, 43, 3, sample, c, h, w, other_seed.data(), scratch.data());
    same_epoch += base == other_epoch;
    same_seed += base == other_seed;
  }
  EXPECT_LT(same_epoch, 20);  // 1 in 50 by chance
  EXPECT_LT(same_seed, 20);
}

TEST(Augmentation, FlipOnlyAndNone) {
  const int c = 1, h = 3, w = 4;
  const std::vector<float> in = distinct_image(c, h, w);
  std::vector<float> scratch(static_cast<std::size_t>(h * w));
  int flipped = 0;
  for (std::int64_t sample = 0; sample < 400; ++sample) {
    std::vector<float> img = in;
    augment_image(parse_augmentation("flip"), 1, 0, sample, c, h, w, img.data(), scratch.data());
    const auto [dy, dx, flip] = transform_of(in, img, c, h, w, 0);
    EXPECT_EQ(dy, 0);
    EXPECT_EQ(dx, 0);
    flipped += flip;
    std::vector<float> untouched = in;
    augment_image(parse_augmentation("none"), 1, 0, sample, c, h, w, untouched.data(), scratch.data());
    EXPECT_EQ(untouched, in);
  }
  EXPECT_GT(flipped, 150);  // about half of 400
  EXPECT_LT(flipped, 250);
}

// The loader's batches hold, for every sample, the same augmented image whatever the layout:
// one worker with one tower, or two workers with two towers each.
TEST(Augmentation, LoaderBatchesDoNotDependOnWorkersOrTowers) {
  const Dataset data = make_synthetic(40, 3, 5, 5, 10, 7);
  auto source = make_memory_source(data);
  const auto images_by_sample = [&](int workers, int towers) {
    std::map<int, std::vector<float>> by_sample;
    for (int w = 0; w < workers; ++w) {
      LoaderConfig config;
      config.global_batch = 8;
      config.workers = workers;
      config.worker = w;
      config.towers = towers;
      config.seed = 5;
      config.total_steps = 10;  // two epochs of 5 steps
      config.augment = parse_augmentation("crop:1,flip");
      config.normalize = parse_normalization("0.5,0.4,0.3/0.2,0.25,0.5", 3, {}, {}, "synthetic");
      BatchLoader loader(*source, config);
      for (int s = 0; s < 10; ++s) {
        const WorkerBatch batch = loader.next();
        for (int t = 0; t < towers; ++t) {
          const EpochPlan plan(40, 8, workers, towers, 5, batch.epoch);
          const std::vector<int> samples = plan.samples(batch.step_in_epoch, w, t);
          const TowerBatch& tb = batch.towers[static_cast<std::size_t>(t)];
          for (std::size_t i = 0; i < samples.size(); ++i)
            by_sample[batch.epoch * 1000 + samples[i]] =
                std::vector<float>(tb.images.begin() + static_cast<std::ptrdiff_t>(i * 75),
                                   tb.images.begin() + static_cast<std::ptrdiff_t>((i + 1) * 75));
        }
      }
    }
    return by_sample;
  };
  const auto one = images_by_sample(1, 1), four = images_by_sample(2, 2);
  EXPECT_EQ(one.size(), 80u);
  EXPECT_EQ(one, four);
  // And the normalisation was applied: channel 2 of a pixel that stayed inside is (x - 0.3) / 0.5.
  bool changed = false;
  for (const auto& [key, img] : one) changed = changed || img != std::vector<float>(75, 0.0f);
  EXPECT_TRUE(changed);
}

TEST(Normalization, AppliesPerChannel) {
  const Normalization n = parse_normalization("1,2/2,4", 2, {}, {}, "x");
  std::vector<float> img = {3, 5, 10, 2};  // 2 channels of 2 values
  normalize_images(n, 2, 2, img.data(), 1);
  EXPECT_EQ(img, (std::vector<float>{1.0f, 2.0f, 2.0f, 0.0f}));
  const Normalization stored = parse_normalization("stored", 1, {0.25f}, {0.5f}, "x");
  EXPECT_EQ(stored.text(), "0.25/0.5");
  EXPECT_FALSE(parse_normalization("none", 3, {}, {}, "x").any());
}

TEST(Normalization, BadValuesNameTheFlagAndTheFix) {
  EXPECT_NE(config_error_of([] { parse_normalization("stored", 1, {}, {}, "data.h5:/train"); })
                .find("--normalize stored: data.h5:/train holds no mean and std; make them with drtrain-data convert "
                      "--normalize"),
            std::string::npos);
  EXPECT_NE(config_error_of([] {
              parse_normalization("0.5/0.2", 3, {}, {}, "d");
            }).find("1 means and 1 standard deviations for 3 channel(s) of d"),
            std::string::npos);
  EXPECT_NE(config_error_of([] { parse_normalization("0.5/0", 1, {}, {}, "d"); }).find("must be > 0"),
            std::string::npos);
  EXPECT_NE(config_error_of([] { parse_normalization("0.5/x", 1, {}, {}, "d"); }).find("'x'"), std::string::npos);
  EXPECT_NE(config_error_of([] { parse_normalization("0.5", 1, {}, {}, "d"); }).find("use none, stored, or"),
            std::string::npos);
}

TEST(Augmentation, ParserAcceptsTheDocumentedFormsOnly) {
  EXPECT_EQ(parse_augmentation("crop:4,flip").text(), "crop:4,flip");
  EXPECT_EQ(parse_augmentation("flip, crop:2").text(), "crop:2,flip");
  EXPECT_EQ(parse_augmentation("none").text(), "none");
  for (const char* bad : {"crop", "crop:0", "crop:65", "crop:x", "rotate", "crop:4,shear"})
    EXPECT_NE(config_error_of([&] { parse_augmentation(bad); }).find("--augment '"), std::string::npos) << bad;
  EXPECT_NE(config_error_of([] { parse_augmentation("rotate"); }).find("unknown augmentation 'rotate'"),
            std::string::npos);
}

}  // namespace
}  // namespace drt::data
