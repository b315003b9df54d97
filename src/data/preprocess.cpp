#include "drtrain/data/preprocess.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "drtrain/core/error.hpp"
#include "drtrain/core/hash.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::data {
namespace {

std::vector<float> parse_floats(const std::string& text, const std::string& what) {
  std::vector<float> out;
  for (const std::string& part : split_list(text, ',')) {
    std::size_t used = 0;
    float v = 0.0f;
    try {
      v = std::stof(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != part.size() || !std::isfinite(v))
      throw ConfigError(str("--normalize: '", part, "' in the ", what, " is not a number"));
    out.push_back(v);
  }
  return out;
}

std::string floats_text(const std::vector<float>& v) {
  std::vector<std::string> parts;
  parts.reserve(v.size());
  for (float x : v) parts.push_back(str(x));
  return join(parts, ",");
}

}  // namespace

std::string Augmentation::text() const {
  std::vector<std::string> parts;
  if (crop_pad > 0) parts.push_back(str("crop:", crop_pad));
  if (flip) parts.emplace_back("flip");
  return parts.empty() ? "none" : join(parts, ",");
}

Augmentation parse_augmentation(const std::string& text) {
  Augmentation a;
  if (text == "none" || text.empty()) return a;
  const auto bad = [&](const std::string& why) {
    return ConfigError(
        str("--augment '", text, "': ", why,
            "; use none, or a comma-separated list of crop:PAD (PAD in 1..64) and flip, e.g. crop:4,flip"));
  };
  for (const std::string& part : split_list(text, ',')) {
    if (part == "flip") {
      a.flip = true;
    } else if (part.rfind("crop:", 0) == 0) {
      const std::string n = part.substr(5);
      if (n.empty() || n.size() > 2 || n.find_first_not_of("0123456789") != std::string::npos)
        throw bad(str("'", part, "' has no padding in 1..64"));
      a.crop_pad = std::stoi(n);
      if (a.crop_pad < 1 || a.crop_pad > 64) throw bad(str("'", part, "' has no padding in 1..64"));
    } else {
      throw bad(str("unknown augmentation '", part, "'"));
    }
  }
  return a;
}

void augment_image(const Augmentation& a, std::uint64_t seed, int epoch, std::int64_t sample, int channels, int height,
                   int width, float* image, float* scratch) {
  if (!a.any()) return;
  const std::uint64_t r =
      splitmix64(splitmix64(seed ^ 0x6175676d656e74ULL) ^ splitmix64(static_cast<std::uint64_t>(epoch) + 1) ^
                 splitmix64(static_cast<std::uint64_t>(sample) * 0xD1B54A32D192ED03ULL));
  const int span = 2 * a.crop_pad + 1;
  const int dy = a.crop_pad > 0 ? static_cast<int>((r & 0xFFFF) % static_cast<std::uint64_t>(span)) - a.crop_pad : 0;
  const int dx =
      a.crop_pad > 0 ? static_cast<int>(((r >> 16) & 0xFFFF) % static_cast<std::uint64_t>(span)) - a.crop_pad : 0;
  const bool flip = a.flip && ((r >> 32) & 1) != 0;
  if (dy == 0 && dx == 0 && !flip) return;
  const auto plane = static_cast<std::size_t>(height) * static_cast<std::size_t>(width);
  for (int c = 0; c < channels; ++c) {
    float* img = image + static_cast<std::size_t>(c) * plane;
    std::memcpy(scratch, img, plane * sizeof(float));
    for (int y = 0; y < height; ++y) {
      float* out = img + static_cast<std::size_t>(y) * width;
      const int sy = y + dy;
      if (sy < 0 || sy >= height) {
        std::fill(out, out + width, 0.0f);
        continue;
      }
      const float* in = scratch + static_cast<std::size_t>(sy) * width;
      for (int x = 0; x < width; ++x) {
        const int sx = (flip ? width - 1 - x : x) + dx;  // flip the cropped window
        out[x] = sx >= 0 && sx < width ? in[sx] : 0.0f;
      }
    }
  }
}

std::string Normalization::text() const { return any() ? str(floats_text(mean), "/", floats_text(stddev)) : "none"; }

Normalization parse_normalization(const std::string& text, int channels, const std::vector<float>& stored_mean,
                                  const std::vector<float>& stored_std, const std::string& source_name) {
  Normalization n;
  if (text == "none") return n;
  if (text == "stored") {
    if (stored_mean.empty())
      throw ConfigError(str("--normalize stored: ", source_name,
                            " holds no mean and std; make them with drtrain-data convert --normalize, or give them "
                            "as --normalize MEAN,.../STD,..."));
    n.mean = stored_mean;
    n.stddev = stored_std;
  } else {
    const std::size_t slash = text.find('/');
    if (slash == std::string::npos || text.find('/', slash + 1) != std::string::npos)
      throw ConfigError(
          str("--normalize '", text, "': use none, stored, or MEAN,.../STD,... (one of each per channel)"));
    n.mean = parse_floats(text.substr(0, slash), "means");
    n.stddev = parse_floats(text.substr(slash + 1), "standard deviations");
  }
  if (n.mean.size() != static_cast<std::size_t>(channels) || n.stddev.size() != static_cast<std::size_t>(channels))
    throw ConfigError(str("--normalize ", text, ": ", n.mean.size(), " means and ", n.stddev.size(),
                          " standard deviations for ", channels, " channel(s) of ", source_name,
                          "; give one of each per channel"));
  for (float s : n.stddev)
    if (!(s > 0.0f)) throw ConfigError(str("--normalize ", text, ": every standard deviation must be > 0"));
  return n;
}

void normalize_images(const Normalization& n, int channels, std::size_t plane, float* images, std::size_t count) {
  if (!n.any()) return;
  for (std::size_t i = 0; i < count; ++i)
    for (int c = 0; c < channels; ++c) {
      const float m = n.mean[static_cast<std::size_t>(c)], k = 1.0f / n.stddev[static_cast<std::size_t>(c)];
      float* x = images + (i * static_cast<std::size_t>(channels) + static_cast<std::size_t>(c)) * plane;
      for (std::size_t p = 0; p < plane; ++p) x[p] = (x[p] - m) * k;
    }
}

}  // namespace drt::data
