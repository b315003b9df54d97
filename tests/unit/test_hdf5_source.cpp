// HDF5 data sets (docs/DATA_FORMAT.md): the writer and the reader round trip in every pixel type
// and layout, random index lists (unsorted, repeated) read exactly, files written with raw HDF5
// calls as h5py writes them, Fashion-MNIST converted from IDX reads back exactly what the IDX
// loader gives, .npy conversion, the synthetic generator, and every bad file with its message.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "drtrain/core/error.hpp"
#include "drtrain/data/batch_loader.hpp"
#include "drtrain/data/dataset.hpp"
#include "drtrain/data/hdf5_convert.hpp"
#include "drtrain/data/hdf5_format.hpp"
#include "drtrain/data/hdf5_source.hpp"
#include "drtrain/data/hdf5_writer.hpp"
#include "drtrain/data/memory_source.hpp"
#include "drtrain/data/npy_file.hpp"
#include "drtrain/data/synthetic_hdf5.hpp"
#include "io/hdf5.hpp"
#include "support/expect_errors.hpp"

namespace drt::data {
namespace {

namespace fs = std::filesystem;
using io::H5Id;

using testing_support::config_error_of;

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "drtrain_test_hdf5_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

// ---------------------------------------------------------------------------------------------
// A small set with known values: sample i, channel c, row y, column x.

double pixel(std::int64_t i, std::int64_t c, std::int64_t y, std::int64_t x) {
  return static_cast<double>((i * 7 + c * 31 + y * 5 + x * 3) % 256);
}

struct Known {
  std::int64_t count;
  int c, h, w;
  PixelType type;
  Layout layout;
  int classes = 7;
  std::int64_t label(std::int64_t i) const { return (i * 3 + 1) % classes; }
  float value(std::int64_t i, int ch, int y, int x) const {  // what the reader must return
    const double v = pixel(i, ch, y, x);
    return type == PixelType::kUint8 ? static_cast<float>(static_cast<std::uint8_t>(v)) / 255.0f
                                     : static_cast<float>(v / 8.0 - 3.0);
  }
  // Samples [first, first + n) as stored (layout, type).
  std::vector<unsigned char> stored(std::int64_t first, std::int64_t n) const {
    std::vector<unsigned char> out(static_cast<std::size_t>(n * c * h * w) * pixel_bytes(type));
    std::size_t k = 0;
    for (std::int64_t i = first; i < first + n; ++i) {
      auto put = [&](int ch, int y, int x) {
        const double v = pixel(i, ch, y, x);
        if (type == PixelType::kUint8) {
          out[k++] = static_cast<unsigned char>(v);
        } else {
          const float f = static_cast<float>(v / 8.0 - 3.0);
          std::memcpy(out.data() + 4 * k++, &f, 4);
        }
      };
      if (layout == Layout::kNCHW) {
        for (int ch = 0; ch < c; ++ch)
          for (int y = 0; y < h; ++y)
            for (int x = 0; x < w; ++x) put(ch, y, x);
      } else {
        for (int y = 0; y < h; ++y)
          for (int x = 0; x < w; ++x)
            for (int ch = 0; ch < c; ++ch) put(ch, y, x);
      }
    }
    return out;
  }
  // Writes the set with Hdf5Writer in pieces of `pieces` samples (cycled).
  void write(const std::string& file, std::size_t chunk_bytes, const std::vector<std::int64_t>& pieces,
             bool normalize = false) const {
    WriterOptions o;
    o.classes = classes;
    o.chunk_bytes = chunk_bytes;
    o.normalize = normalize;
    Hdf5Writer writer(file, o);
    writer.begin_split("train", SplitShape{count, c, h, w, type, layout});
    std::int64_t first = 0;
    for (std::size_t p = 0; first < count; ++p) {
      const std::int64_t n = std::min(pieces[p % pieces.size()], count - first);
      std::vector<std::int64_t> labels;
      for (std::int64_t i = first; i < first + n; ++i) labels.push_back(label(i));
      writer.append(stored(first, n).data(), labels.data(), n);
      first += n;
    }
    writer.commit();
  }
  void check(SampleSource& source, const std::vector<std::int64_t>& indices) const {
    const std::size_t floats = source.info().sample_floats();
    std::vector<float> images(indices.size() * floats, -1.0f);
    std::vector<std::int32_t> labels(indices.size(), -1);
    source.read(indices, images.data(), labels.data());
    for (std::size_t k = 0; k < indices.size(); ++k) {
      const std::int64_t i = indices[k];
      ASSERT_EQ(labels[k], label(i)) << "position " << k << ", sample " << i;
      std::size_t at = k * floats;
      for (int ch = 0; ch < c; ++ch)
        for (int y = 0; y < h; ++y)
          for (int x = 0; x < w; ++x)
            ASSERT_EQ(images[at++], value(i, ch, y, x))
                << "position " << k << ", sample " << i << " (" << ch << ", " << y << ", " << x << ")";
    }
  }
};

std::vector<std::int64_t> random_indices(std::int64_t count, std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> out(n);
  for (auto& i : out) i = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(count));
  return out;
}

struct RoundTripCase {
  PixelType type;
  Layout layout;
};

class RoundTrip : public TempDir, public ::testing::WithParamInterface<RoundTripCase> {};

TEST_P(RoundTrip, WriterThenReaderGivesEveryRequestedSampleExactly) {
  const Known k{41, 3, 5, 4, GetParam().type, GetParam().layout};
  const std::string file = path("set.h5");
  // 3 samples a chunk; pieces that straddle chunks
  k.write(file, std::size_t{180} * pixel_bytes(k.type), {10, 1, 30});
  EXPECT_FALSE(fs::exists(file + ".tmp"));

  const SplitHeader h = read_split_header(file, "train");
  EXPECT_EQ(h.count, 41);
  EXPECT_EQ(h.images.chunk, (std::vector<std::int64_t>{3, h.images.shape[1], h.images.shape[2], h.images.shape[3]}));
  EXPECT_EQ(h.images.filters, std::vector<std::string>{"fletcher32"});
  EXPECT_EQ(h.labels.type, "uint8");

  for (std::size_t cache : {std::size_t{64} << 20, std::size_t{0}}) {
    SCOPED_TRACE(::testing::Message() << "cache " << cache);
    auto source = open_hdf5_source(file, "train", cache);
    const SourceInfo& info = source->info();
    EXPECT_EQ(info.name, file + ":/train");
    EXPECT_EQ(info.count, 41);
    EXPECT_EQ(info.channels, 3);
    EXPECT_EQ(info.height, 5);
    EXPECT_EQ(info.width, 4);
    EXPECT_EQ(info.classes, 7);
    EXPECT_EQ(info.sample_floats(), 60u);
    EXPECT_TRUE(source->mean().empty());
    std::vector<std::int64_t> all(41);
    for (std::int64_t i = 0; i < 41; ++i) all[static_cast<std::size_t>(i)] = i;
    k.check(*source, all);
    std::reverse(all.begin(), all.end());
    k.check(*source, all);
    k.check(*source, random_indices(41, 200, 5));  // unsorted, with repeats
    k.check(*source, {40});
    k.check(*source, {7, 7, 7, 8, 6, 40, 0, 0});
    source->read({}, nullptr, nullptr);  // nothing asked, nothing read
  }
}

INSTANTIATE_TEST_SUITE_P(Types, RoundTrip,
                         ::testing::Values(RoundTripCase{PixelType::kUint8, Layout::kNCHW},
                                           RoundTripCase{PixelType::kUint8, Layout::kNHWC},
                                           RoundTripCase{PixelType::kFloat32, Layout::kNCHW},
                                           RoundTripCase{PixelType::kFloat32, Layout::kNHWC}),
                         [](const auto& test) {
                           return std::string(pixel_type_name(test.param.type)) + layout_name(test.param.layout);
                         });

TEST_F(TempDir, RunsLongerThanTheRunBufferAreSplit) {
  // Samples of 256 KiB: a read takes at most 16 of them (4 MiB); reading all 40 takes three.
  const Known k{40, 1, 256, 256, PixelType::kFloat32, Layout::kNCHW};
  const std::string file = path("big.h5");
  k.write(file, std::size_t{256} << 10, {40});
  auto source = open_hdf5_source(file, "train", 0);
  std::vector<std::int64_t> all(40);
  for (std::int64_t i = 0; i < 40; ++i) all[static_cast<std::size_t>(i)] = 39 - i;
  k.check(*source, all);
}

TEST_F(TempDir, IndexOutsideTheSetIsTheCallersBug) {
  const Known k{5, 1, 2, 2, PixelType::kUint8, Layout::kNCHW};
  k.write(path("s.h5"), 256 << 10, {5});
  auto source = open_hdf5_source(path("s.h5"), "train");
  std::vector<float> images(8);
  std::vector<std::int32_t> labels(2);
  for (std::int64_t bad : {std::int64_t{5}, std::int64_t{-1}}) {
    try {
      source->read({0, bad}, images.data(), labels.data());
      ADD_FAILURE() << "no error for index " << bad;
    } catch (const ConfigError& e) {
      ADD_FAILURE() << "a ConfigError for a caller's bug: " << e.what();
    } catch (const Error& e) {
      EXPECT_CONTAINS(std::string(e.what()), "sample index " + std::to_string(bad) + " (position 1 of the request)");
    }
  }
}

TEST_F(TempDir, TwoSourcesOnTwoThreads) {
  const Known k{60, 2, 3, 3, PixelType::kUint8, Layout::kNHWC};
  k.write(path("s.h5"), std::size_t{90}, {60});
  auto a = open_hdf5_source(path("s.h5"), "train", 1 << 10);
  auto b = open_hdf5_source(path("s.h5"), "train", 1 << 10);
  auto work = [&](SampleSource* s, std::uint64_t seed) {
    for (int r = 0; r < 50; ++r) k.check(*s, random_indices(60, 16, seed + static_cast<std::uint64_t>(r)));
  };
  std::thread t1(work, a.get(), 1), t2(work, b.get(), 1000);
  t1.join();
  t2.join();
}

TEST_F(TempDir, WriterLeavesNothingUnlessCommitted) {
  const std::string file = path("w.h5");
  {
    WriterOptions o;
    o.classes = 3;
    Hdf5Writer writer(file, o);
    writer.begin_split("train", SplitShape{4, 1, 2, 2, PixelType::kUint8, Layout::kNCHW});
    EXPECT_TRUE(fs::exists(file + ".tmp"));
    const std::vector<std::uint8_t> px(8, 1);
    const std::vector<std::int64_t> labels{0, 1};
    writer.append(px.data(), labels.data(), 2);
    // a label outside [0, classes) is refused with the sample's index
    const std::vector<std::int64_t> bad{2, 3};
    EXPECT_CONTAINS(config_error_of([&] { writer.append(px.data(), bad.data(), 2); }),
                    "w.h5.tmp: /train/labels: sample 3 has label 3, outside [0, 3)");
    EXPECT_CONTAINS(config_error_of([&] { writer.commit(); }), "/train: holds 2 of its 4 samples");
  }
  EXPECT_FALSE(fs::exists(file));
  EXPECT_FALSE(fs::exists(file + ".tmp"));
}

TEST_F(TempDir, NormalisationStatisticsAreThoseOfTheTrainSplit) {
  for (PixelType type : {PixelType::kUint8, PixelType::kFloat32}) {
    for (Layout layout : {Layout::kNCHW, Layout::kNHWC}) {
      const Known k{23, 3, 4, 5, type, layout};
      const std::string file = path("n.h5");
      k.write(file, 200, {4, 9}, true);
      auto source = open_hdf5_source(file, "train");
      ASSERT_EQ(source->mean().size(), 3u);
      ASSERT_EQ(source->stddev().size(), 3u);
      EXPECT_EQ(read_split_header(file, "train").stats_from, "train");
      for (int ch = 0; ch < 3; ++ch) {
        double sum = 0, sq = 0;
        const double n = 23.0 * 20;
        for (std::int64_t i = 0; i < 23; ++i)
          for (int y = 0; y < 4; ++y)
            for (int x = 0; x < 5; ++x) sum += k.value(i, ch, y, x);
        const double mean = sum / n;
        for (std::int64_t i = 0; i < 23; ++i)
          for (int y = 0; y < 4; ++y)
            for (int x = 0; x < 5; ++x) sq += (k.value(i, ch, y, x) - mean) * (k.value(i, ch, y, x) - mean);
        EXPECT_NEAR(source->mean()[static_cast<std::size_t>(ch)], mean, 1e-6 * std::max(1.0, std::abs(mean)));
        EXPECT_NEAR(source->stddev()[static_cast<std::size_t>(ch)], std::sqrt(sq / n), 1e-6);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Files written with raw HDF5 calls: what h5py and other tools write, and broken variants.

struct RawFile {
  std::optional<std::int64_t> version = 1, classes = 10;
  std::optional<std::string> class_names;
  std::vector<hsize_t> image_dims = {10, 1, 4, 3};
  hid_t image_type = H5T_STD_U8LE;
  std::optional<std::string> layout = std::string("NCHW");
  bool variable_length_strings = true;  // as h5py writes str attributes
  std::vector<hsize_t> label_dims = {10};
  hid_t label_type = H5T_STD_I64LE;
  std::vector<std::int64_t> labels;  // default: i % 10
  std::optional<hsize_t> chunk;      // samples per image chunk; contiguous when absent
  std::optional<std::vector<float>> mean, stddev;
  bool images_is_group = false;
};

void string_attribute(hid_t object, const char* name, const std::string& value, bool variable) {
  H5Id type(H5Tcopy(H5T_C_S1));
  H5Id space(H5Screate(H5S_SCALAR));
  if (variable) {
    H5Tset_size(type, H5T_VARIABLE);
    H5Tset_cset(type, H5T_CSET_UTF8);
    H5Id attr(H5Acreate2(object, name, type, space, H5P_DEFAULT, H5P_DEFAULT));
    const char* text = value.c_str();
    ASSERT_GE(H5Awrite(attr, type, static_cast<const void*>(&text)), 0);
  } else {
    H5Tset_size(type, value.size());
    H5Id attr(H5Acreate2(object, name, type, space, H5P_DEFAULT, H5P_DEFAULT));
    ASSERT_GE(H5Awrite(attr, type, value.data()), 0);
  }
}

void int_attribute(hid_t object, const char* name, std::int64_t value) {
  H5Id space(H5Screate(H5S_SCALAR));
  H5Id attr(H5Acreate2(object, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT));
  ASSERT_GE(H5Awrite(attr, H5T_NATIVE_INT64, &value), 0);
}

void float_dataset(hid_t group, const char* name, const std::vector<float>& values) {
  const hsize_t n = values.size();
  H5Id space(H5Screate_simple(1, &n, nullptr));
  H5Id d(H5Dcreate2(group, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  ASSERT_GE(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
}

// Pixel k (in file order) is (k * 13) % 251, converted by HDF5 to the file's type.
void write_raw(const std::string& file, const RawFile& r) {
  H5Id f(H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  ASSERT_GE(f.get(), 0);
  if (r.version) int_attribute(f, "drtrain_dataset", *r.version);
  if (r.classes) int_attribute(f, "classes", *r.classes);
  if (r.class_names) string_attribute(f, "class_names", *r.class_names, r.variable_length_strings);
  H5Id g(H5Gcreate2(f, "train", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (r.images_is_group) {
    H5Id sub(H5Gcreate2(g, "images", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  } else {
    H5Id space(H5Screate_simple(static_cast<int>(r.image_dims.size()), r.image_dims.data(), nullptr));
    H5Id dcpl(H5Pcreate(H5P_DATASET_CREATE));
    if (r.chunk) {
      std::vector<hsize_t> chunk = r.image_dims;
      chunk[0] = *r.chunk;
      H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
      H5Pset_fletcher32(dcpl);
    }
    H5Id d(H5Dcreate2(g, "images", r.image_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT));
    ASSERT_GE(d.get(), 0);
    hsize_t total = 1;
    for (hsize_t n : r.image_dims) total *= n;
    std::vector<double> values(total);
    for (hsize_t k = 0; k < total; ++k) values[k] = static_cast<double>((k * 13) % 251);
    if (total > 0) {
      ASSERT_GE(H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
    }
    if (r.layout) string_attribute(d, "layout", *r.layout, r.variable_length_strings);
  }
  {
    H5Id space(H5Screate_simple(static_cast<int>(r.label_dims.size()), r.label_dims.data(), nullptr));
    H5Id d(H5Dcreate2(g, "labels", r.label_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    hsize_t total = 1;
    for (hsize_t n : r.label_dims) total *= n;
    std::vector<std::int64_t> labels = r.labels;
    for (hsize_t k = labels.size(); k < total; ++k) labels.push_back(static_cast<std::int64_t>(k % 10));
    if (total > 0) {
      ASSERT_GE(H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels.data()), 0);
    }
  }
  if (r.mean) float_dataset(g, "mean", *r.mean);
  if (r.stddev) float_dataset(g, "std", *r.stddev);
}

TEST_F(TempDir, FileAsH5pyWritesItIsRead) {
  // Contiguous float32 NHWC images, int64 labels, variable-length string attributes, mean/std.
  RawFile r;
  r.image_dims = {6, 3, 2, 2};  // N, H, W, C
  r.label_dims = {6};
  r.image_type = H5T_IEEE_F32LE;
  r.layout = "NHWC";
  r.labels = {9, 0, 3, 3, 1, 2};
  r.class_names = "a,b,c,d,e,f,g,h,i,j";
  r.mean = std::vector<float>{0.5f, 0.25f};
  r.stddev = std::vector<float>{2.0f, 3.0f};
  const std::string file = path("h5py.h5");
  write_raw(file, r);
  auto source = open_hdf5_source(file, "train");
  const SourceInfo& info = source->info();
  EXPECT_EQ(info.count, 6);
  EXPECT_EQ(info.channels, 2);
  EXPECT_EQ(info.height, 3);
  EXPECT_EQ(info.width, 2);
  EXPECT_EQ(source->mean(), (std::vector<float>{0.5f, 0.25f}));
  EXPECT_EQ(source->stddev(), (std::vector<float>{2.0f, 3.0f}));
  const SplitHeader h = read_split_header(file, "train");
  EXPECT_EQ(h.class_names, "a,b,c,d,e,f,g,h,i,j");
  EXPECT_TRUE(h.images.chunk.empty());
  EXPECT_EQ(h.labels.type, "int64");

  const std::vector<std::int64_t> indices{5, 1, 5};
  std::vector<float> images(std::size_t{36});
  std::vector<std::int32_t> labels(3);
  source->read(indices, images.data(), labels.data());
  EXPECT_EQ(labels, (std::vector<std::int32_t>{2, 0, 2}));
  for (std::size_t k = 0; k < indices.size(); ++k)
    for (int c = 0; c < 2; ++c)
      for (int p = 0; p < 6; ++p) {  // NHWC: file element (i, p, c) at i*12 + p*2 + c
        const auto flat = static_cast<std::uint64_t>(indices[k] * 12 + std::int64_t{p} * 2 + c);
        EXPECT_EQ(images[k * 12 + static_cast<std::size_t>(c * 6 + p)], static_cast<float>((flat * 13) % 251));
      }
  // Fixed-length strings (numpy bytes) work as well.
  r.variable_length_strings = false;
  write_raw(path("fixed.h5"), r);
  EXPECT_EQ(read_split_header(path("fixed.h5"), "train").layout, Layout::kNHWC);
  EXPECT_EQ(read_split_header(path("fixed.h5"), "train").class_names, "a,b,c,d,e,f,g,h,i,j");
}

TEST_F(TempDir, LabelsOfEveryIntegerType) {
  for (hid_t type : {H5T_STD_U8LE, H5T_STD_I8LE, H5T_STD_U16BE, H5T_STD_I32LE, H5T_STD_U64LE, H5T_STD_I64BE}) {
    RawFile r;
    r.labels = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0};
    r.label_type = type;
    write_raw(path("t.h5"), r);
    auto source = open_hdf5_source(path("t.h5"), "train");
    std::vector<float> images(std::size_t{36});
    std::vector<std::int32_t> labels(3);
    source->read({0, 9, 4}, images.data(), labels.data());
    EXPECT_EQ(labels, (std::vector<std::int32_t>{9, 0, 5}));
  }
}

// ---------------------------------------------------------------------------------------------
// Bad files: each fails with the file, the object and the problem named.

std::string open_error(const std::string& file, const std::string& split = "train") {
  return config_error_of([&] { open_hdf5_source(file, split); });
}

TEST_F(TempDir, BadHeaders) {
  const std::string file = path("bad.h5");
  struct Case {
    const char* what;
    RawFile file;
    std::string message;
  };
  std::vector<Case> cases;
  auto add = [&](const char* what, auto change, const std::string& message) {
    RawFile r;
    change(r);
    cases.push_back({what, r, message});
  };
  add(
      "rank 3",
      [](RawFile& r) {
        r.image_dims = {10, 4, 3};
      },
      ": /train/images: rank 3 [10, 4, 3]; expected rank 4, [N, C, H, W] or [N, H, W, C]");
  add(
      "float64", [](RawFile& r) { r.image_type = H5T_IEEE_F64LE; },
      ": /train/images: element type float64; images must be uint8 (pixels 0..255) or float32");
  add(
      "int16", [](RawFile& r) { r.image_type = H5T_STD_I16LE; }, ": /train/images: element type int16; images must be");
  add(
      "no layout", [](RawFile& r) { r.layout.reset(); },
      ": /train/images: attribute 'layout' is missing: set it to NCHW or NHWC");
  add(
      "bad layout", [](RawFile& r) { r.layout = "CHWN"; },
      ": /train/images: attribute 'layout' is 'CHWN'; expected NCHW or NHWC");
  add(
      "count mismatch", [](RawFile& r) { r.label_dims = {9}; },
      ": /train/labels: holds 9 labels but /train/images holds 10 samples; there must be one label per sample");
  add(
      "labels rank 2",
      [](RawFile& r) {
        r.label_dims = {10, 1};
      },
      ": /train/labels: rank 2 [10, 1]; expected rank 1, [N]");
  add(
      "float labels", [](RawFile& r) { r.label_type = H5T_IEEE_F32LE; },
      ": /train/labels: element type float32; labels must be integers");
  add(
      "no version", [](RawFile& r) { r.version.reset(); },
      ": /: attribute 'drtrain_dataset' is missing: not a drtrain data set; write the file with drtrain-data convert");
  add(
      "newer version", [](RawFile& r) { r.version = 2; },
      ": /: format version 2 (attribute 'drtrain_dataset'); this drtrain reads version 1: use a newer drtrain");
  add(
      "no classes", [](RawFile& r) { r.classes.reset(); },
      ": /: attribute 'classes' is missing: set it to the number of classes K");
  add(
      "zero classes", [](RawFile& r) { r.classes = 0; }, ": /: attribute 'classes' is 0; it must be in 1..");
  add(
      "class names", [](RawFile& r) { r.class_names = "a,b"; },
      ": /: attribute 'class_names' lists 2 name(s) but classes = 10");
  add(
      "no samples",
      [](RawFile& r) {
        r.image_dims = {0, 1, 4, 3}, r.label_dims = {0};
      },
      ": /train/images: shape [0, 1, 4, 3] holds no samples");
  add(
      "empty axis",
      [](RawFile& r) {
        r.image_dims = {10, 0, 4, 3};
      },
      ": /train/images: shape [10, 0, 4, 3] (NCHW) has an empty axis");
  add(
      "images a group", [](RawFile& r) { r.images_is_group = true; },
      ": /train/images: is a group, expected a dataset");
  add(
      "mean without std", [](RawFile& r) { r.mean = std::vector<float>{0.5f}; },
      ": /train: has 'mean' but no 'std'; store both (float32 [C]) or neither");
  add(
      "mean shape",
      [](RawFile& r) {
        r.mean = std::vector<float>{0.5f, 0.5f, 0.5f}, r.stddev = r.mean;
      },
      ": /train/mean: shape [3]; expected [C] = [1], one value per channel");
  add(
      "zero std", [](RawFile& r) { r.mean = std::vector<float>{0.5f}, r.stddev = std::vector<float>{0.0f}; },
      ": /train/std: channel 0 is 0; a standard deviation must be positive and finite");
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    write_raw(file, c.file);
    EXPECT_CONTAINS(open_error(file), file + c.message);
  }
}

TEST_F(TempDir, LabelOutOfRangeNamesTheSampleAndValue) {
  RawFile r;
  r.labels = {0, 1, 2, 10, 4, 5, 6, 7, 8, -1};
  write_raw(path("l.h5"), r);
  auto source = open_hdf5_source(path("l.h5"), "train");
  std::vector<float> images(std::size_t{36});
  std::vector<std::int32_t> labels(3);
  source->read({0, 1, 2}, images.data(), labels.data());  // fine so far
  EXPECT_CONTAINS(
      config_error_of([&] {
        source->read({5, 3, 1}, images.data(), labels.data());
      }),
      path("l.h5") + ": /train/labels: sample 3 has label 10, outside [0, 10) (root attribute classes = 10)");
  EXPECT_CONTAINS(config_error_of([&] { source->read({9}, images.data(), labels.data()); }),
                  "/train/labels: sample 9 has label -1, outside [0, 10)");
  EXPECT_CONTAINS(config_error_of([&] { count_classes(path("l.h5"), "train"); }), "sample 3 has label 10");

  // A uint64 label above 2^63 - 1 is named as the file holds it, not as a negative int64.
  RawFile u;
  u.label_type = H5T_STD_U64LE;
  write_raw(path("u.h5"), u);
  {
    H5Id file(H5Fopen(path("u.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
    H5Id dataset(H5Dopen2(file, "/train/labels", H5P_DEFAULT));
    std::vector<std::uint64_t> values = {0, 1, 2, 3, 4, 5, 6, 7, (std::uint64_t{1} << 63) + 5, 9};
    ASSERT_GE(H5Dwrite(dataset, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
  }
  auto big = open_hdf5_source(path("u.h5"), "train");
  EXPECT_CONTAINS(config_error_of([&] { big->read({8}, images.data(), labels.data()); }),
                  "/train/labels: sample 8 has label 9223372036854775813, outside [0, 10)");
  EXPECT_CONTAINS(config_error_of([&] { count_classes(path("u.h5"), "train"); }),
                  "sample 8 has label 9223372036854775813");
}

TEST_F(TempDir, MissingNotHdf5TruncatedAndMissingSplit) {
  EXPECT_CONTAINS(open_error(path("nowhere.h5")), path("nowhere.h5") + ": cannot open: No such file or directory");
  EXPECT_CONTAINS(open_error(dir_.string()), ": is a directory");
  { std::ofstream(path("text.h5")) << "images,labels\n1,2\n"; }
  EXPECT_CONTAINS(
      open_error(path("text.h5")),
      path("text.h5") + ": not an HDF5 file (no HDF5 signature); drtrain reads data sets in its HDF5 format");

  const Known k{300, 1, 8, 8, PixelType::kUint8, Layout::kNCHW};
  k.write(path("good.h5"), 1024, {300});
  EXPECT_CONTAINS(open_error(path("good.h5"), "test"),
                  path("good.h5") + ": has no group '/test' (it holds /train); each split is a group");
  EXPECT_CONTAINS(open_error(path("good.h5"), "validation"),
                  ": no split 'validation': a data set's splits are train and test");

  // Cut short: the superblock announces more than the file holds.
  fs::copy_file(path("good.h5"), path("cut.h5"));
  fs::resize_file(path("cut.h5"), fs::file_size(path("good.h5")) / 2);
  const std::string cut = open_error(path("cut.h5"));
  EXPECT_CONTAINS(cut, path("cut.h5") + ": cannot open as HDF5: ");
  EXPECT_CONTAINS(cut, "truncated file");
  EXPECT_CONTAINS(cut, "the file is damaged or cut short (an interrupted copy?): copy or convert it again");
}

// Flips bytes inside the data of one image chunk: fletcher32 catches it when that chunk is read.
TEST_F(TempDir, CorruptChunkIsDetectedAndNamed) {
  const Known k{100, 1, 16, 16, PixelType::kUint8, Layout::kNCHW};
  const std::string file = path("c.h5");
  k.write(file, std::size_t{2560}, {100});  // 10 samples a chunk
  haddr_t offset = 0;
  hsize_t size = 0;
  {
    H5Id f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
    H5Id d(H5Dopen2(f, "/train/images", H5P_DEFAULT));
    H5Id space(H5Dget_space(d));
    hsize_t coords[4];
    unsigned mask = 0;
    ASSERT_GE(H5Dget_chunk_info(d, space, 3, coords, &mask, &offset, &size), 0);  // samples 30..39
    ASSERT_EQ(coords[0], 30u);
  }
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(offset + 100));
    char bytes[16];
    f.read(bytes, sizeof bytes);
    for (char& b : bytes) b = static_cast<char>(b ^ 0x5A);
    f.seekp(static_cast<std::streamoff>(offset + 100));
    f.write(bytes, sizeof bytes);
  }
  auto source = open_hdf5_source(file, "train");
  k.check(*source, {0, 29, 40, 99});  // other chunks are fine
  std::vector<float> images(std::size_t{512});
  std::vector<std::int32_t> labels(2);
  const std::string message = config_error_of([&] { source->read({35, 36}, images.data(), labels.data()); });
  EXPECT_CONTAINS(message, file + ": /train/images: cannot read samples 35..36: ");
  EXPECT_CONTAINS(message, "data error detected by Fletcher32 checksum");
  EXPECT_CONTAINS(message, "the file is damaged (a chunk fails its checksum or cannot be decompressed)");
  // A read over many chunks names the bad one.
  std::vector<std::int64_t> all(100);
  for (std::int64_t i = 0; i < 100; ++i) all[static_cast<std::size_t>(i)] = i;
  images.resize(std::size_t{25600});
  labels.resize(100);
  EXPECT_CONTAINS(config_error_of([&] { source->read(all, images.data(), labels.data()); }),
                  file + ": /train/images: cannot read samples 0..99 (the chunk of samples 30..39 is bad): ");
}

// ---------------------------------------------------------------------------------------------
// Conversion from IDX: what the trainer's IDX path gives, bit for bit.

const char* const kFashionMnist = "/usr/share/datasets/fashion-mnist";

void expect_same_as_idx(const Dataset& idx, SampleSource& source, const std::vector<std::int64_t>& indices) {
  std::vector<int> samples(indices.begin(), indices.end());
  const auto idx_source = make_memory_source(idx);                     // what training reads from IDX files
  const TowerBatch expected = read_tower_batch(*idx_source, samples);  // x / 255
  std::vector<float> images(expected.images.size());
  std::vector<std::int32_t> labels(indices.size());
  source.read(indices, images.data(), labels.data());
  ASSERT_EQ(labels, expected.labels);
  ASSERT_TRUE(images == expected.images) << "pixels differ";
}

TEST_F(TempDir, FashionMnistConvertedFromIdxReadsLikeTheIdxLoader) {
  if (!fs::exists(fs::path(kFashionMnist) / "train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no " << kFashionMnist;
  const std::string file = path("fm.h5");
  ConvertOptions options;
  options.normalize = true;
  convert_idx(kFashionMnist, file, options);
  for (bool train : {true, false}) {
    SCOPED_TRACE(train ? "train" : "test");
    const Dataset idx = load_fashion_mnist(kFashionMnist, train);
    auto source = open_hdf5_source(file, train ? "train" : "test");
    EXPECT_EQ(source->info().count, idx.count);
    EXPECT_EQ(source->info().channels, 1);
    EXPECT_EQ(source->info().height, 28);
    EXPECT_EQ(source->info().classes, 10);
    expect_same_as_idx(idx, *source, random_indices(idx.count, train ? 3000 : 1000, 17));
    ASSERT_EQ(source->mean().size(), 1u);
    EXPECT_NEAR(source->mean()[0], 0.2860, 5e-4);  // Fashion-MNIST's published statistics
    EXPECT_NEAR(source->stddev()[0], 0.3530, 5e-4);
  }
  EXPECT_EQ(count_classes(file, "test"), std::vector<std::int64_t>(10, 1000));
}

TEST_F(TempDir, IdxSubsetWithPlainFileNames) {
  // A subset as uncompressed IDX files (the other naming MNIST copies use), train only.
  Dataset subset = make_synthetic(257, 5, 3, 10, 9);
  auto be32 = [](std::ofstream& out, std::uint32_t v) {
    const char b[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
                       static_cast<char>(v)};
    out.write(b, 4);
  };
  {
    std::ofstream images(path("train-images-idx3-ubyte"), std::ios::binary);
    for (std::uint32_t v : {0x803u, 257u, 5u, 3u}) be32(images, v);
    images.write(reinterpret_cast<const char*>(subset.pixels.data()),
                 static_cast<std::streamsize>(subset.pixels.size()));
    std::ofstream labels(path("train-labels-idx1-ubyte"), std::ios::binary);
    for (std::uint32_t v : {0x801u, 257u}) be32(labels, v);
    labels.write(reinterpret_cast<const char*>(subset.labels.data()),
                 static_cast<std::streamsize>(subset.labels.size()));
  }
  convert_idx(dir_.string(), path("sub.h5"), ConvertOptions{});
  EXPECT_EQ(list_splits(path("sub.h5")), std::vector<std::string>{"train"});
  auto source = open_hdf5_source(path("sub.h5"), "train");
  EXPECT_EQ(source->info().height, 5);
  EXPECT_EQ(source->info().width, 3);
  std::vector<std::int64_t> all(257);
  for (std::int64_t i = 0; i < 257; ++i) all[static_cast<std::size_t>(i)] = (i * 101) % 257;
  expect_same_as_idx(load_idx(path("train-images-idx3-ubyte"), path("train-labels-idx1-ubyte"), 10), *source, all);

  EXPECT_CONTAINS(config_error_of([&] { convert_idx(path("none"), path("x.h5"), ConvertOptions{}); }),
                  "none: no IDX files; looked for train-images-idx3-ubyte(.gz)");
}

// ---------------------------------------------------------------------------------------------
// .npy files

std::string npy_header(const std::string& dict, int version) {
  std::string header = dict;
  const std::size_t prefix = version == 1 ? 10 : 12;
  while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(version);
  out += '\0';
  const std::size_t n = header.size();
  for (std::size_t b = 0; b < (version == 1 ? 2u : 4u); ++b) out += static_cast<char>((n >> (8 * b)) & 0xFF);
  return out + header;
}

void write_npy(const std::string& file, const std::string& dict, const void* data, std::size_t bytes, int version = 1) {
  std::ofstream out(file, std::ios::binary);
  const std::string header = npy_header(dict, version);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
}

TEST(NpyHeader, ParsesWhatNumpyWrites) {
  const NpyHeader h = parse_npy_header("{'descr': '<f4', 'fortran_order': False, 'shape': (10, 28, 28), }", "x.npy");
  EXPECT_EQ(h.descr, "<f4");
  EXPECT_FALSE(h.fortran_order);
  EXPECT_EQ(h.shape, (std::vector<std::int64_t>{10, 28, 28}));
  EXPECT_EQ(parse_npy_header("{\"descr\":\"|u1\",\"fortran_order\":True,\"shape\":(7,)}", "x").shape,
            std::vector<std::int64_t>{7});
  EXPECT_TRUE(parse_npy_header("{'descr': '<i8', 'fortran_order': False, 'shape': (), }", "x").shape.empty());
  EXPECT_CONTAINS(
      config_error_of([] { parse_npy_header("{'descr': [('a', '<f4')], 'fortran_order': False}", "s.npy"); }),
      "s.npy: holds a structured array");
  EXPECT_CONTAINS(config_error_of([] { parse_npy_header("{'descr': '<f4', 'shape': (1,)}", "m.npy"); }),
                  "m.npy: bad .npy header");
  EXPECT_CONTAINS(config_error_of([] {
                    parse_npy_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 99999999999999999999)}",
                                     "b.npy");
                  }),
                  "a dimension is too large");
}

TEST_F(TempDir, NpyConversionNHWCFloatWithTestSplit) {
  // train: 13 samples of 4x3x2 (NHWC) float32; test: 5; labels int16 and uint8
  std::vector<float> train_x(std::size_t{312}), test_x(std::size_t{120});
  for (std::size_t i = 0; i < train_x.size(); ++i) train_x[i] = static_cast<float>(i) * 0.5f;
  for (std::size_t i = 0; i < test_x.size(); ++i) test_x[i] = -static_cast<float>(i);
  std::vector<std::int16_t> train_y(13);
  for (std::size_t i = 0; i < 13; ++i) train_y[i] = static_cast<std::int16_t>(i % 4);
  const std::vector<std::uint8_t> test_y{3, 2, 1, 0, 11};
  write_npy(path("x.npy"), "{'descr': '<f4', 'fortran_order': False, 'shape': (13, 4, 3, 2), }", train_x.data(),
            train_x.size() * 4);
  write_npy(path("y.npy"), "{'descr': '<i2', 'fortran_order': False, 'shape': (13,), }", train_y.data(), 26, 2);
  write_npy(path("tx.npy"), "{'descr': '<f4', 'fortran_order': False, 'shape': (5, 4, 3, 2), }", test_x.data(),
            test_x.size() * 4);
  write_npy(path("ty.npy"), "{'descr': '|u1', 'fortran_order': False, 'shape': (5,), }", test_y.data(), 5);
  const NpyPair train{path("x.npy"), path("y.npy")}, test{path("tx.npy"), path("ty.npy")};

  EXPECT_CONTAINS(config_error_of([&] { convert_npy(train, test, std::nullopt, path("o.h5"), ConvertOptions{}); }),
                  "x.npy: a 4-D image array [13, 4, 3, 2]: say how its axes are ordered with --layout NCHW or NHWC");
  ConvertOptions ten;
  ten.classes = 10;
  EXPECT_CONTAINS(config_error_of([&] { convert_npy(train, test, Layout::kNHWC, path("o.h5"), ten); }),
                  "ty.npy: label 11 at index 4 is not below the number of classes (--classes 10)");
  EXPECT_FALSE(fs::exists(path("o.h5")));

  convert_npy(train, test, Layout::kNHWC, path("o.h5"), ConvertOptions{});
  const SplitHeader h = read_split_header(path("o.h5"), "test");
  EXPECT_EQ(h.classes, 12);  // largest label + 1
  EXPECT_EQ(h.layout, Layout::kNHWC);
  EXPECT_EQ(h.images.shape, (std::vector<std::int64_t>{5, 4, 3, 2}));
  for (const char* split : {"train", "test"}) {
    auto source = open_hdf5_source(path("o.h5"), split);
    const bool is_train = std::string(split) == "train";
    const std::int64_t n = is_train ? 13 : 5;
    const std::vector<float>& x = is_train ? train_x : test_x;
    std::vector<std::int64_t> indices;
    for (std::int64_t i = n - 1; i >= 0; --i) indices.push_back(i);
    std::vector<float> images(static_cast<std::size_t>(n) * 24);
    std::vector<std::int32_t> labels(static_cast<std::size_t>(n));
    source->read(indices, images.data(), labels.data());
    for (std::size_t k = 0; k < indices.size(); ++k) {
      const auto i = static_cast<std::size_t>(indices[k]);
      EXPECT_EQ(labels[k], is_train ? train_y[i] : test_y[i]);
      for (std::size_t c = 0; c < 2; ++c)
        for (std::size_t p = 0; p < 12; ++p) ASSERT_EQ(images[k * 24 + c * 12 + p], x[i * 24 + p * 2 + c]);
    }
  }
}

TEST_F(TempDir, NpyConversionOneChannelUint8) {
  std::vector<std::uint8_t> x(std::size_t{54});
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<std::uint8_t>(i * 5);
  const std::vector<std::int64_t> y{0, 1, 2, 0, 1, 2, 0, 1, 2};
  write_npy(path("x.npy"), "{'descr': '|u1', 'fortran_order': False, 'shape': (9, 2, 3), }", x.data(), x.size());
  write_npy(path("y.npy"), "{'descr': '<i8', 'fortran_order': False, 'shape': (9,), }", y.data(), 72);
  ConvertOptions o;
  o.class_names = "cat,dog,bird";
  o.normalize = true;
  convert_npy({path("x.npy"), path("y.npy")}, std::nullopt, std::nullopt, path("o.h5"), o);
  const SplitHeader h = read_split_header(path("o.h5"), "train");
  EXPECT_EQ(h.images.shape, (std::vector<std::int64_t>{9, 1, 2, 3}));
  EXPECT_EQ(h.class_names, "cat,dog,bird");
  EXPECT_EQ(h.mean.size(), 1u);
  auto source = open_hdf5_source(path("o.h5"), "train");
  std::vector<float> images(6);
  std::vector<std::int32_t> labels(1);
  source->read({4}, images.data(), labels.data());
  for (std::size_t p = 0; p < 6; ++p) EXPECT_EQ(images[p], static_cast<float>(x[24 + p]) / 255.0f);
}

TEST_F(TempDir, BadNpyFiles) {
  const std::vector<float> x(std::size_t{24}, 1.0f);
  const std::vector<std::int64_t> y{0, 1, 0, 1};
  write_npy(path("y.npy"), "{'descr': '<i8', 'fortran_order': False, 'shape': (4,), }", y.data(), 32);
  auto error = [&](const std::string& dict, std::size_t bytes) {
    write_npy(path("x.npy"), dict, x.data(), bytes);
    return config_error_of([&] {
      convert_npy({path("x.npy"), path("y.npy")}, std::nullopt, Layout::kNCHW, path("o.h5"), ConvertOptions{});
    });
  };
  EXPECT_CONTAINS(error("{'descr': '<f4', 'fortran_order': True, 'shape': (4, 2, 3), }", 96),
                  "x.npy: is stored in Fortran order; save it in C order");
  EXPECT_CONTAINS(error("{'descr': '>f4', 'fortran_order': False, 'shape': (4, 2, 3), }", 96),
                  "x.npy: dtype '>f4' is big-endian");
  EXPECT_CONTAINS(error("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 2, 3), }", 90),
                  "x.npy: the header announces float32 (4, 2, 3): 96 bytes of data, but 90 follow the header; the file "
                  "is cut short");
  EXPECT_CONTAINS(error("{'descr': '<f8', 'fortran_order': False, 'shape': (4, 3), }", 96),
                  "x.npy: images of dtype float64; drtrain stores uint8 (pixels 0..255) or float32");
  EXPECT_CONTAINS(error("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 6), }", 96),
                  "x.npy: images of rank 2; expected [N, H, W]");
  EXPECT_CONTAINS(error("{'descr': '<U4', 'fortran_order': False, 'shape': (4, 6), }", 96),
                  "x.npy: dtype '<U4' is not supported");
  EXPECT_CONTAINS(error("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2, 4), }", 96), "y.npy: 4 labels, but ");
  { std::ofstream(path("x.npy")) << "not numpy at all"; }
  EXPECT_CONTAINS(config_error_of([&] { NpyFile f(path("x.npy")); }), "x.npy: not a .npy file (no \\x93NUMPY magic)");
  const std::vector<float> fy(4, 1.0f);
  write_npy(path("fy.npy"), "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", fy.data(), 16);
  write_npy(path("x.npy"), "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 2, 3), }", x.data(), 96);
  EXPECT_CONTAINS(config_error_of([&] {
                    convert_npy({path("x.npy"), path("fy.npy")}, std::nullopt, std::nullopt, path("o.h5"), {});
                  }),
                  "fy.npy: labels of dtype float32; labels must be integers");
  EXPECT_FALSE(fs::exists(path("o.h5")));
}

// ---------------------------------------------------------------------------------------------
// The synthetic generator

TEST_F(TempDir, SyntheticIsDeterministicAndValid) {
  SyntheticOptions o;
  o.count = 700;
  o.test_count = 50;
  o.channels = 3;
  o.height = 8;
  o.width = 8;
  o.classes = 5;
  o.seed = 42;
  auto read_all = [&](const std::string& file, const std::string& split) {
    auto source = open_hdf5_source(file, split);
    const std::int64_t n = source->info().count;
    std::vector<std::int64_t> indices(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) indices[static_cast<std::size_t>(i)] = i;
    std::vector<float> images(static_cast<std::size_t>(n) * source->info().sample_floats());
    std::vector<std::int32_t> labels(static_cast<std::size_t>(n));
    source->read(indices, images.data(), labels.data());
    return std::make_pair(images, labels);
  };
  for (PixelType type : {PixelType::kUint8, PixelType::kFloat32}) {
    o.pixel_type = type;
    o.seed = 42;
    write_synthetic_hdf5(path("a.h5"), o);
    write_synthetic_hdf5(path("b.h5"), o);
    o.seed = 43;
    write_synthetic_hdf5(path("c.h5"), o);
    EXPECT_EQ(read_all(path("a.h5"), "train"), read_all(path("b.h5"), "train"));
    EXPECT_EQ(read_all(path("a.h5"), "test"), read_all(path("b.h5"), "test"));
    EXPECT_NE(read_all(path("a.h5"), "train").first, read_all(path("c.h5"), "train").first);
    EXPECT_NE(read_all(path("a.h5"), "train").first, read_all(path("a.h5"), "test").first);
    const std::vector<std::int64_t> counts = count_classes(path("a.h5"), "train");
    for (std::int64_t c : counts) EXPECT_GT(c, 100);  // about 140 each
    const auto [images, labels] = read_all(path("a.h5"), "test");
    for (float v : images) ASSERT_TRUE(v >= 0.0f && v <= 1.0f);
  }
  o.count = 0;
  EXPECT_CONTAINS(config_error_of([&] { write_synthetic_hdf5(path("d.h5"), o); }),
                  "the train count must be at least 1");
}

}  // namespace
}  // namespace drt::data
