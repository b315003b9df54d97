#include "drtrain/data/synthetic_hdf5.hpp"

#include <algorithm>
#include <random>
#include <vector>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/data/hdf5_writer.hpp"

namespace drt::data {

namespace {

constexpr std::size_t kBlockBytes = std::size_t{16} << 20;
constexpr std::uint64_t kMaxPrototypeBytes = std::uint64_t{1} << 30;
constexpr std::uint64_t kTestSeedOffset = 0x9E3779B97F4A7C15ULL;

// A label uniform over [0, classes): rejects the lowest 2^64 mod classes draws (as make_synthetic).
std::int64_t draw_label(std::mt19937_64& rng, std::uint64_t classes) {
  const std::uint64_t threshold = (0 - classes) % classes;
  std::uint64_t r;
  do r = rng();
  while (r < threshold);
  return static_cast<std::int64_t>(r % classes);
}

// `n` bytes from the engine, least significant byte of each 64-bit draw first.
void draw_bytes(std::mt19937_64& rng, std::uint8_t* out, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const std::uint64_t word = rng();
    for (int b = 0; b < 8; ++b) out[i + static_cast<std::size_t>(b)] = static_cast<std::uint8_t>(word >> (8 * b));
  }
  if (i < n) {
    const std::uint64_t word = rng();
    for (int b = 0; i < n; ++i, ++b) out[i] = static_cast<std::uint8_t>(word >> (8 * b));
  }
}

// `n` floats uniform in [0, 1) (24 bits each, two per draw).
void draw_floats(std::mt19937_64& rng, float* out, std::size_t n) {
  constexpr float kScale = 1.0f / 16777216.0f;
  for (std::size_t i = 0; i < n; i += 2) {
    const std::uint64_t word = rng();
    out[i] = static_cast<float>(word >> 40) * kScale;
    if (i + 1 < n) out[i + 1] = static_cast<float>((word >> 8) & 0xFFFFFF) * kScale;
  }
}

}  // namespace

void write_synthetic_hdf5(const std::string& path, const SyntheticOptions& o) {
  if (o.count < 1) throw ConfigError(str("synthetic data: the train count must be at least 1 (got ", o.count, ")"));
  if (o.test_count < 0) throw ConfigError(str("synthetic data: the test count must be >= 0 (got ", o.test_count, ")"));
  if (o.channels < 1 || o.height < 1 || o.width < 1 || o.channels > 65536 || o.height > 65536 || o.width > 65536)
    throw ConfigError(str("synthetic data: samples of ", o.channels, "x", o.height, "x", o.width,
                          "; each of C, H and W must be in 1..65536"));
  if (o.classes < 1 || o.classes > 2147483647)
    throw ConfigError(str("synthetic data: the number of classes must be in 1..2147483647 (got ", o.classes, ")"));
  const std::size_t values =
      static_cast<std::size_t>(o.channels) * static_cast<std::size_t>(o.height) * static_cast<std::size_t>(o.width);
  if (values > (std::size_t{1} << 28))
    throw ConfigError(str("synthetic data: samples of ", values, " values; at most 2^28 (268435456)"));
  const std::size_t sample_bytes = values * pixel_bytes(o.pixel_type);
  if (static_cast<std::uint64_t>(o.classes) * sample_bytes > kMaxPrototypeBytes)
    throw ConfigError(str("synthetic data: ", o.classes, " class prototypes of ", sample_bytes,
                          " bytes would take more than 1 GiB; use fewer classes or smaller samples"));

  WriterOptions w;
  w.classes = o.classes;
  w.compress_level = o.compress_level;
  w.chunk_bytes = o.chunk_bytes;
  w.normalize = o.normalize;
  w.source = str("drtrain-data synth, seed ", o.seed);
  Hdf5Writer writer(path, w);

  // Prototypes: one random image per class, in the file's layout.
  std::mt19937_64 rng(o.seed);
  const auto k = static_cast<std::size_t>(o.classes);
  std::vector<std::uint8_t> proto_bytes;
  std::vector<float> proto_floats;
  if (o.pixel_type == PixelType::kUint8) {
    proto_bytes.resize(k * values);
    draw_bytes(rng, proto_bytes.data(), proto_bytes.size());
  } else {
    proto_floats.resize(k * values);
    draw_floats(rng, proto_floats.data(), proto_floats.size());
  }

  std::mt19937_64 test_rng(o.seed + kTestSeedOffset);
  for (const auto& [split, count] : {std::pair<const char*, std::int64_t>{"train", o.count}, {"test", o.test_count}}) {
    if (count == 0) continue;
    std::mt19937_64& r = std::string(split) == "train" ? rng : test_rng;
    writer.begin_split(split, SplitShape{count, o.channels, o.height, o.width, o.pixel_type, o.layout});
    const std::int64_t chunk = writer.chunk_samples();
    const std::int64_t block = chunk * static_cast<std::int64_t>(std::max<std::size_t>(
                                           1, kBlockBytes / (static_cast<std::size_t>(chunk) * sample_bytes)));
    const auto capacity = static_cast<std::size_t>(std::min(block, count));
    std::vector<std::int64_t> labels(capacity);
    std::vector<std::uint8_t> bytes(o.pixel_type == PixelType::kUint8 ? capacity * values : 0);
    std::vector<float> floats(o.pixel_type == PixelType::kFloat32 ? capacity * values : 0);
    for (std::int64_t first = 0; first < count; first += block) {
      const std::int64_t n = std::min(block, count - first);
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t label = draw_label(r, static_cast<std::uint64_t>(o.classes));
        labels[static_cast<std::size_t>(i)] = label;
        const std::size_t at = static_cast<std::size_t>(i) * values, from = static_cast<std::size_t>(label) * values;
        if (o.pixel_type == PixelType::kUint8) {
          std::uint8_t* out = bytes.data() + at;
          draw_bytes(r, out, values);
          const std::uint8_t* proto = proto_bytes.data() + from;
          for (std::size_t j = 0; j < values; ++j)
            out[j] = static_cast<std::uint8_t>((static_cast<unsigned>(out[j]) + proto[j]) >> 1);
        } else {
          float* out = floats.data() + at;
          draw_floats(r, out, values);
          const float* proto = proto_floats.data() + from;
          for (std::size_t j = 0; j < values; ++j) out[j] = 0.5f * (out[j] + proto[j]);
        }
      }
      if (o.pixel_type == PixelType::kUint8) writer.append(bytes.data(), labels.data(), n);
      else writer.append(floats.data(), labels.data(), n);
    }
  }
  writer.commit();
}

}  // namespace drt::data
