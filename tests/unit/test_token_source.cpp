// Token streams in HDF5 data sets (docs/DATA_FORMAT.md, "Token streams"): windows and targets
// exact against a known stream in every stored type, byte order and chunking (windows straddle
// chunks), runs longer than a read, every bad header and token with its message, the writer,
// the BatchLoader over token windows, and the converters (text, llm.c shards, raw uint16)
// against the bytes and tokens they were given.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "drtrain/core/error.hpp"
#include "drtrain/data/batch_loader.hpp"
#include "drtrain/data/dataset.hpp"
#include "drtrain/data/hdf5_source.hpp"
#include "drtrain/data/hdf5_writer.hpp"
#include "drtrain/data/memory_source.hpp"
#include "drtrain/data/token_bin_file.hpp"
#include "drtrain/data/token_convert.hpp"
#include "drtrain/data/token_format.hpp"
#include "drtrain/data/token_source.hpp"
#include "drtrain/data/token_writer.hpp"
#include "io/hdf5.hpp"
#include "support/expect_errors.hpp"

namespace drt::data {
namespace {

namespace fs = std::filesystem;
using io::H5Id;
using testing_support::config_error_of;

class TokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "drtrain_test_tokens_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

// The known stream: token i of a stream over a vocabulary of V.
std::uint64_t known(std::int64_t i, std::int64_t vocab) { return static_cast<std::uint64_t>((i * 7919 + 13) % vocab); }

// A token file written with raw HDF5 calls, as h5py would write it.
struct RawTokens {
  std::int64_t count = 103;
  hid_t type = H5T_STD_U16LE;
  hsize_t chunk = 0;  // 0: contiguous
  bool fletcher32 = false;
  std::optional<std::int64_t> vocab = 1000;
  std::optional<std::int64_t> classes;  // an image set's attribute, for the mixed case
  std::string split = "train";
  std::vector<hsize_t> dims;  // empty: {count}
  bool with_dataset = true;
  std::function<std::uint64_t(std::int64_t)> value;  // default: known(i, vocab)
};

void write_raw(const std::string& file, const RawTokens& r) {
  H5Id f(H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  ASSERT_GE(f.get(), 0);
  io::write_attribute(f, "drtrain_dataset", std::int64_t{1});
  if (r.vocab) io::write_attribute(f, "vocab_size", *r.vocab);
  if (r.classes) io::write_attribute(f, "classes", *r.classes);
  H5Id g(H5Gcreate2(f, r.split.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (!r.with_dataset) return;
  const std::vector<hsize_t> dims = r.dims.empty() ? std::vector<hsize_t>{static_cast<hsize_t>(r.count)} : r.dims;
  hsize_t n = 1;
  for (hsize_t d : dims) n *= d;
  std::vector<std::uint64_t> values(n);
  const std::int64_t vocab = std::max<std::int64_t>(1, r.vocab.value_or(256));
  for (hsize_t i = 0; i < n; ++i) {
    const auto at = static_cast<std::int64_t>(i);
    values[i] = r.value ? r.value(at) : known(at, vocab);
  }
  H5Id space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  H5Id dcpl(H5Pcreate(H5P_DATASET_CREATE));
  if (r.chunk > 0) {
    std::vector<hsize_t> chunk(dims.size(), 1);
    chunk[0] = r.chunk;
    H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
    if (r.fletcher32) H5Pset_fletcher32(dcpl);
  }
  H5Id d(H5Dcreate2(g, "tokens", r.type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT));
  ASSERT_GE(d.get(), 0);
  if (H5Tget_class(r.type) == H5T_FLOAT) {
    std::vector<double> doubles(values.begin(), values.end());
    ASSERT_GE(H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, doubles.data()), 0);
  } else {
    ASSERT_GE(H5Dwrite(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
  }
}

// FILE's /SPLIT/tokens as stored, read with raw HDF5 calls.
std::vector<std::uint64_t> read_raw(const std::string& file, const std::string& split) {
  H5Id f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  H5Id d(H5Dopen2(f, ("/" + split + "/tokens").c_str(), H5P_DEFAULT));
  H5Id space(H5Dget_space(d));
  std::vector<std::uint64_t> values(static_cast<std::size_t>(H5Sget_simple_extent_npoints(space)));
  EXPECT_GE(H5Dread(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
  return values;
}

// Reads `indices` of `source` and checks every input and target against `stream`.
void expect_windows(SampleSource& source, const std::vector<std::int64_t>& indices,
                    const std::function<std::uint64_t(std::int64_t)>& stream) {
  const auto t = static_cast<std::size_t>(source.info().width);
  std::vector<float> x(indices.size() * t, -1.0f);
  std::vector<std::int32_t> y(indices.size() * t, -1);
  source.read(indices, x.data(), y.data());
  for (std::size_t k = 0; k < indices.size(); ++k)
    for (std::size_t p = 0; p < t; ++p) {
      const std::int64_t at = indices[k] * static_cast<std::int64_t>(t) + static_cast<std::int64_t>(p);
      ASSERT_EQ(x[k * t + p], static_cast<float>(stream(at))) << "window " << indices[k] << ", position " << p;
      ASSERT_EQ(y[k * t + p], static_cast<std::int32_t>(stream(at + 1))) << "window " << indices[k] << ", target " << p;
    }
}

std::vector<std::int64_t> shuffled_with_repeats(std::int64_t count, std::uint64_t seed) {
  std::vector<std::int64_t> out;
  for (std::int64_t i = 0; i < count; ++i) out.push_back(i);
  std::mt19937_64 rng(seed);
  for (int r = 0; r < 5; ++r) out.push_back(static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(count)));
  std::shuffle(out.begin(), out.end(), rng);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Windows and targets

TEST(TokenWindows, CountIsFloorOfTokensMinusOneOverContext) {
  EXPECT_EQ(token_windows(103, 4), 25);
  EXPECT_EQ(token_windows(101, 4), 25);
  EXPECT_EQ(token_windows(100, 4), 24);  // 24 windows use tokens 0..96; window 25 would need 100
  EXPECT_EQ(token_windows(5, 4), 1);
  EXPECT_EQ(token_windows(4, 4), 0);
  EXPECT_EQ(token_windows(2, 1), 1);
  EXPECT_EQ(token_windows(1, 1), 0);
}

TEST_F(TokenTest, WindowsAndTargetsExactInEveryTypeByteOrderAndChunking) {
  struct Case {
    hid_t type;
    std::int64_t vocab;
  };
  for (const Case c : {Case{H5T_STD_U8LE, 256}, Case{H5T_STD_U16LE, 50257}, Case{H5T_STD_U16BE, 1000},
                       Case{H5T_STD_U32LE, 70000}, Case{H5T_STD_U32BE, 16777216}, Case{H5T_STD_U64LE, 300}})
    for (hsize_t chunk : {hsize_t{0}, hsize_t{5}, hsize_t{7}, hsize_t{103}}) {
      SCOPED_TRACE(testing::Message() << "type " << c.type << " vocab " << c.vocab << " chunk " << chunk);
      RawTokens r;
      r.type = c.type;
      r.vocab = c.vocab;
      r.chunk = chunk;
      r.fletcher32 = chunk == 7;
      write_raw(path("t.h5"), r);
      const auto stream = [&](std::int64_t i) { return known(i, c.vocab); };
      for (std::size_t cache : {std::size_t{0}, std::size_t{64} << 20}) {  // no chunk cache, and all cached
        auto source = open_token_source(path("t.h5"), "train", 4, cache);
        const SourceInfo& info = source->info();
        EXPECT_EQ(info.name, path("t.h5") + ":/train");
        EXPECT_EQ(info.count, 25);
        EXPECT_EQ(info.channels, 1);
        EXPECT_EQ(info.height, 1);
        EXPECT_EQ(info.width, 4);
        EXPECT_EQ(info.sample_floats(), 4u);
        EXPECT_EQ(info.classes, c.vocab);
        EXPECT_TRUE(info.tokens);
        EXPECT_EQ(info.targets, 4);
        expect_windows(*source, shuffled_with_repeats(25, 3), stream);
        expect_windows(*source, {24, 0, 24}, stream);  // the last window ends with the last usable token
      }
      // The stored type shows in the header; the count is the tokens'.
      const TokenSplitHeader h = read_token_header(path("t.h5"), "train");
      EXPECT_EQ(h.count, 103);
      EXPECT_EQ(h.vocab_size, c.vocab);
      EXPECT_EQ(check_tokens(path("t.h5"), "train"), 103);
    }
}

TEST_F(TokenTest, OtherContextsAndTheLastToken) {
  RawTokens r;
  r.count = 21;
  r.chunk = 4;
  write_raw(path("t.h5"), r);
  const auto stream = [](std::int64_t i) { return known(i, 1000); };
  for (int t : {1, 2, 3, 5, 10, 20}) {
    SCOPED_TRACE(t);
    auto source = open_token_source(path("t.h5"), "train", t);
    ASSERT_EQ(source->info().count, 20 / t);
    expect_windows(*source, shuffled_with_repeats(source->info().count, 7), stream);
  }
  // T = 20: one window, whose last target is token 20, the stream's last.
  auto one = open_token_source(path("t.h5"), "train", 20);
  std::vector<float> x(20);
  std::vector<std::int32_t> y(20);
  one->read({0}, x.data(), y.data());
  EXPECT_EQ(y[19], static_cast<std::int32_t>(known(20, 1000)));
}

TEST_F(TokenTest, RunsLongerThanOneReadAreSplit) {
  // 2.5M tokens at T = 1000: a read covers at most 2^20 tokens (1048 windows), so reading all
  // 2499 windows in order takes three reads.
  RawTokens r;
  r.count = 2'499'001;
  r.type = H5T_STD_U8LE;
  r.vocab = 256;
  r.chunk = 65536;
  write_raw(path("big.h5"), r);
  auto source = open_token_source(path("big.h5"), "train", 1000);
  ASSERT_EQ(source->info().count, 2499);
  std::vector<std::int64_t> all(2499);
  for (std::int64_t i = 0; i < 2499; ++i) all[static_cast<std::size_t>(i)] = i;
  expect_windows(*source, all, [](std::int64_t i) { return known(i, 256); });
}

TEST_F(TokenTest, IndexOutsideTheWindowsIsTheCallersBug) {
  write_raw(path("t.h5"), RawTokens{});
  auto source = open_token_source(path("t.h5"), "train", 4);
  std::vector<float> x(4);
  std::vector<std::int32_t> y(4);
  for (std::int64_t bad : {std::int64_t{-1}, std::int64_t{25}}) {
    try {
      source->read({bad}, x.data(), y.data());
      ADD_FAILURE() << "window " << bad << " was read";
    } catch (const ConfigError& e) {
      ADD_FAILURE() << "a ConfigError for the caller's bug: " << e.what();
    } catch (const Error& e) {
      EXPECT_CONTAINS(std::string(e.what()), "is outside [0, 25)");
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Bad files and contexts: each names the file, the object, the problem and the fix.

std::string token_error(const std::string& file, int context = 4, const std::string& split = "train") {
  return config_error_of([&] { open_token_source(file, split, context); });
}

TEST_F(TokenTest, BadHeadersAndContexts) {
  const std::string file = path("bad.h5");
  RawTokens r;
  r.vocab.reset();
  write_raw(file, r);
  EXPECT_CONTAINS(token_error(file), file +
                                         ": /: attribute 'vocab_size' is missing: /train/tokens is a token stream and "
                                         "needs it: set it to the vocabulary size V");
  // the same file through drtrain-data's header functions
  EXPECT_CONTAINS(config_error_of([&] { data_kind(file); }), "attribute 'vocab_size' is missing");

  r = RawTokens{};
  r.vocab = kMaxVocabulary + 1;
  write_raw(file, r);
  EXPECT_CONTAINS(token_error(file), file + ": /: attribute 'vocab_size' is 16777217; it must be in 1..16777216 "
                                            "(token ids reach the model as float32, exact below 2^24)");
  r.vocab = 0;
  write_raw(file, r);
  EXPECT_CONTAINS(token_error(file), "attribute 'vocab_size' is 0; it must be in 1..16777216");

  r = RawTokens{};
  r.dims = {25, 4};
  write_raw(file, r);
  EXPECT_CONTAINS(token_error(file), file + ": /train/tokens: rank 2 [25, 4]; expected rank 1, [N], one stream of "
                                            "token ids (numpy: tokens.reshape(-1))");

  for (hid_t type : {H5T_STD_I32LE, H5T_STD_I64LE, H5T_IEEE_F32LE}) {
    r = RawTokens{};
    r.type = type;
    write_raw(file, r);
    const std::string message = token_error(file);
    EXPECT_CONTAINS(message, file + ": /train/tokens: element type ");
    EXPECT_CONTAINS(message, "; token ids are stored as unsigned integers, uint8, uint16 or uint32 (numpy: "
                             "tokens.astype(np.uint16))");
  }

  // A type whose precision exceeds its size (found by fuzz_tokens): a 4-byte big-endian integer
  // claiming 40 bits. HDF5's API cannot make one, so the datatype message is patched in place:
  // version 1, fixed-point, big-endian, unsigned; size 4; offset 0, precision 32 -> 40.
  r = RawTokens{};
  r.type = H5T_STD_U32BE;
  write_raw(file, r);
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const std::string message("\x10\x01\x00\x00\x04\x00\x00\x00\x00\x00\x20\x00", 12);
    const std::size_t at = bytes.find(message);
    ASSERT_NE(at, std::string::npos);
    ASSERT_EQ(bytes.find(message, at + 1), std::string::npos);
    f.seekp(static_cast<std::streamoff>(at + 10));
    f.put('\x28');
  }
  EXPECT_CONTAINS(token_error(file), file + ": /train/tokens: element type uint32 (big-endian) is malformed (40 bits "
                                            "of precision at offset 0 in 4 bytes)");

  r = RawTokens{};
  r.classes = 10;
  write_raw(file, r);
  EXPECT_CONTAINS(token_error(file), file + ": /: has both 'classes' (an image data set) and 'vocab_size'");

  r = RawTokens{};
  r.with_dataset = false;
  write_raw(file, r);
  EXPECT_CONTAINS(token_error(file), file + ": /train: no dataset 'tokens'; a token data set holds /train/tokens");

  write_raw(file, RawTokens{});
  EXPECT_CONTAINS(token_error(file, 4, "test"), file + ": has no group '/test' (it holds /train); a token data set");
  EXPECT_CONTAINS(token_error(file, 4, "valid"), file + ": no split 'valid': a data set's splits are train and test");
  EXPECT_CONTAINS(token_error(file, 0), file + ": /train/tokens: --context 0: a window holds at least one token");
  EXPECT_CONTAINS(token_error(file, 103), file +
                                              ": /train/tokens: the corpus has 103 tokens, shorter than one window of "
                                              "--context 103 + 1 (T inputs and the next token as the last target): "
                                              "lower --context to at most 102 or give more text");
  EXPECT_EQ(open_token_source(file, "train", 102)->info().count, 1);
  // An image reader refuses a token file, and a token reader an image file.
  EXPECT_CONTAINS(config_error_of([&] { open_hdf5_source(file, "train"); }),
                  file + ": is a token data set (root attribute vocab_size = 1000), not images");
  EXPECT_EQ(data_kind(file), DataKind::kTokens);

  WriterOptions images;
  images.classes = 7;
  {
    Hdf5Writer w(path("images.h5"), images);
    w.begin_split("train", SplitShape{2, 1, 2, 2, PixelType::kUint8, Layout::kNCHW});
    const std::vector<std::uint8_t> pixels(8, 1);
    const std::vector<std::int64_t> labels{0, 6};
    w.append(pixels.data(), labels.data(), 2);
    w.commit();
  }
  EXPECT_CONTAINS(token_error(path("images.h5")),
                  path("images.h5") + ": is an image data set (root attribute classes = 7), not a token stream");
  EXPECT_EQ(data_kind(path("images.h5")), DataKind::kImages);
}

TEST_F(TokenTest, ImageSourcesKeepTheDefaults) {
  WriterOptions o;
  o.classes = 3;
  {
    Hdf5Writer w(path("images.h5"), o);
    w.begin_split("train", SplitShape{2, 1, 2, 2, PixelType::kUint8, Layout::kNCHW});
    const std::vector<std::uint8_t> pixels(8, 1);
    const std::vector<std::int64_t> labels{0, 2};
    w.append(pixels.data(), labels.data(), 2);
    w.commit();
  }
  const auto hdf5 = open_hdf5_source(path("images.h5"), "train");
  EXPECT_FALSE(hdf5->info().tokens);
  EXPECT_EQ(hdf5->info().targets, 1);
  const auto memory = make_memory_source(make_synthetic(4, 2, 2, 3, 1));
  EXPECT_FALSE(memory->info().tokens);
  EXPECT_EQ(memory->info().targets, 1);
}

TEST_F(TokenTest, TokenOutOfRangeNamesThePositionAndValue) {
  RawTokens r;
  r.vocab = 100;
  r.chunk = 10;
  r.value = [](std::int64_t i) -> std::uint64_t { return i == 57 ? 100 : known(i, 100); };
  write_raw(path("t.h5"), r);
  auto source = open_token_source(path("t.h5"), "train", 4);
  expect_windows(*source, {0, 13, 15, 24}, [](std::int64_t i) { return known(i, 100); });  // 57 is in window 14
  std::vector<float> x(8);
  std::vector<std::int32_t> y(8);
  const std::string expected = path("t.h5") + ": /train/tokens: token 57 is 100, not below vocab_size 100 (root "
                                              "attribute); every token id lies in [0, vocab_size)";
  EXPECT_CONTAINS(config_error_of([&] { source->read({14}, x.data(), y.data()); }), expected);
  // Token 56 is window 13's last target: reading window 13 checks it too.
  r.type = H5T_STD_U32LE;
  r.value = [](std::int64_t i) -> std::uint64_t { return i == 56 ? 4000000000u : known(i, 100); };
  write_raw(path("u.h5"), r);
  auto u = open_token_source(path("u.h5"), "train", 4);
  EXPECT_CONTAINS(config_error_of([&] { u->read({13}, x.data(), y.data()); }), "token 56 is 4000000000, not below");
  EXPECT_CONTAINS(config_error_of([&] { check_tokens(path("t.h5"), "train"); }), expected);
  // uint64 values beyond 32 bits are named as stored
  r.type = H5T_STD_U64LE;
  r.value = [](std::int64_t i) -> std::uint64_t { return i == 3 ? (std::uint64_t{1} << 40) : 1; };
  write_raw(path("v.h5"), r);
  EXPECT_CONTAINS(config_error_of([&] { check_tokens(path("v.h5"), "train"); }), "token 3 is 1099511627776, not below");
}

TEST_F(TokenTest, CorruptChunkIsDetectedAndNamed) {
  TokenWriterOptions o;
  o.vocab_size = 256;
  o.chunk_bytes = 100;  // 100 tokens a chunk
  std::vector<std::uint32_t> tokens(1000);
  for (std::size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<std::uint32_t>(known(static_cast<std::int64_t>(i), 256));
  {
    TokenWriter w(path("c.h5"), o);
    w.begin_split("train", 1000);
    w.append("train", tokens.data(), 1000);
    w.commit();
  }
  haddr_t offset = 0;
  {
    H5Id f(H5Fopen(path("c.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
    H5Id d(H5Dopen2(f, "/train/tokens", H5P_DEFAULT));
    H5Id space(H5Dget_space(d));
    hsize_t coords[1];
    unsigned mask = 0;
    hsize_t size = 0;
    ASSERT_GE(H5Dget_chunk_info(d, space, 3, coords, &mask, &offset, &size), 0);  // tokens 300..399
    ASSERT_EQ(coords[0], 300u);
  }
  {
    std::fstream f(path("c.h5"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(offset + 10));
    const char garbage[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    f.write(garbage, sizeof garbage);
  }
  auto source = open_token_source(path("c.h5"), "train", 10);
  expect_windows(*source, {0, 28, 40, 98}, [](std::int64_t i) { return known(i, 256); });  // other chunks read
  std::vector<float> x(std::size_t{10} * 99);
  std::vector<std::int32_t> y(std::size_t{10} * 99);
  const std::string one = config_error_of([&] { source->read({32}, x.data(), y.data()); });
  EXPECT_CONTAINS(one, path("c.h5") + ": /train/tokens: cannot read tokens 320..330: ");
  EXPECT_CONTAINS(one, "Fletcher32");
  EXPECT_CONTAINS(one, "check it with drtrain-data verify " + path("c.h5"));
  std::vector<std::int64_t> all(99);
  for (std::int64_t i = 0; i < 99; ++i) all[static_cast<std::size_t>(i)] = i;
  EXPECT_CONTAINS(config_error_of([&] { source->read(all, x.data(), y.data()); }),
                  ": /train/tokens: cannot read tokens 0..990 (the chunk of tokens 300..399 is bad): ");
  EXPECT_CONTAINS(config_error_of([&] { check_tokens(path("c.h5"), "train"); }),
                  "(the chunk of tokens 300..399 is bad)");
}

// ---------------------------------------------------------------------------------------------
// The writer, the sources of a run, the loader

TEST_F(TokenTest, WriterStoresTheSmallestTypeAndTheTokensGiven) {
  struct Case {
    std::int64_t vocab;
    const char* type;
  };
  for (const Case c : {Case{256, "uint8"}, Case{257, "uint16"}, Case{65536, "uint16"}, Case{65537, "uint32"},
                       Case{kMaxVocabulary, "uint32"}}) {
    SCOPED_TRACE(c.vocab);
    EXPECT_STREQ(token_type_name(c.vocab), c.type);
    TokenWriterOptions o;
    o.vocab_size = c.vocab;
    o.chunk_bytes = 64;
    o.source = "test";
    std::vector<std::uint32_t> train(300), test(50);
    for (std::size_t i = 0; i < train.size(); ++i)
      train[i] = static_cast<std::uint32_t>(known(static_cast<std::int64_t>(i), c.vocab));
    for (std::size_t i = 0; i < test.size(); ++i)
      test[i] = static_cast<std::uint32_t>(c.vocab - 1 - static_cast<std::int64_t>(i) % 3);
    {
      TokenWriter w(path("w.h5"), o);
      w.begin_split("train", 300);
      w.begin_split("test", 50);
      // alternating pieces of both splits
      w.append("train", train.data(), 7);
      w.append("test", test.data(), 20);
      w.append("train", train.data() + 7, 293);
      w.append("test", test.data() + 20, 30);
      w.commit();
    }
    EXPECT_FALSE(fs::exists(path("w.h5.tmp")));
    const TokenSplitHeader h = read_token_header(path("w.h5"), "train");
    EXPECT_EQ(h.storage.type, c.type);
    EXPECT_EQ(h.storage.chunk, (std::vector<std::int64_t>{64 / static_cast<std::int64_t>(token_bytes(c.vocab))}));
    EXPECT_EQ(h.storage.filters, (std::vector<std::string>{"fletcher32"}));
    EXPECT_EQ(h.source, "test");
    EXPECT_EQ(read_raw(path("w.h5"), "train"), std::vector<std::uint64_t>(train.begin(), train.end()));
    EXPECT_EQ(read_raw(path("w.h5"), "test"), std::vector<std::uint64_t>(test.begin(), test.end()));
  }
}

TEST_F(TokenTest, WriterRefusesBadTokensAndLeavesNothingUncommitted) {
  TokenWriterOptions o;
  o.vocab_size = 10;
  {
    TokenWriter w(path("w.h5"), o);
    w.begin_split("train", 5);
    const std::vector<std::uint32_t> tokens{1, 2, 10, 3, 4};
    EXPECT_CONTAINS(config_error_of([&] { w.append("train", tokens.data(), 5); }),
                    path("w.h5.tmp") + ": /train/tokens: token 2 is 10, not below the vocabulary size 10");
    w.append("train", tokens.data(), 2);
    EXPECT_CONTAINS(config_error_of([&] { w.commit(); }), "holds 2 of its 5 tokens");
    EXPECT_TRUE(fs::exists(path("w.h5.tmp")));
  }
  EXPECT_FALSE(fs::exists(path("w.h5.tmp")));
  EXPECT_FALSE(fs::exists(path("w.h5")));
  o.vocab_size = kMaxVocabulary + 1;
  EXPECT_CONTAINS(config_error_of([&] { TokenWriter w(path("w.h5"), o); }),
                  "the vocabulary size must be in 1..16777216");
}

TEST_F(TokenTest, SourcesOfARunFromOneFileOrTwo) {
  TokenWriterOptions o;
  o.vocab_size = 500;
  std::vector<std::uint32_t> tokens(200);
  for (std::size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<std::uint32_t>(known(static_cast<std::int64_t>(i), 500));
  const auto write = [&](const std::string& file, std::int64_t vocab, bool test) {
    o.vocab_size = vocab;
    TokenWriter w(file, o);
    w.begin_split("train", 200);
    w.append("train", tokens.data(), 200);
    if (test) {
      w.begin_split("test", 41);
      w.append("test", tokens.data(), 41);
    }
    w.commit();
  };
  write(path("both.h5"), 500, true);
  write(path("train.h5"), 500, false);
  write(path("other_vocab.h5"), 600, true);
  TokenSources s = open_token_sources(path("both.h5"), "", 8, true);
  EXPECT_EQ(s.train->info().count, 24);
  EXPECT_EQ(s.test->info().count, 5);
  EXPECT_EQ(s.test->info().name, path("both.h5") + ":/test");
  s = open_token_sources(path("train.h5"), path("both.h5"), 8, true);
  EXPECT_EQ(s.test->info().name, path("both.h5") + ":/test");
  s = open_token_sources(path("train.h5"), "", 8, false);
  EXPECT_EQ(s.test, nullptr);
  EXPECT_CONTAINS(config_error_of([&] { open_token_sources(path("train.h5"), "", 8, true); }),
                  path("train.h5") + ": has no group '/test' (it holds /train)");
  EXPECT_CONTAINS(config_error_of([&] { open_token_sources(path("both.h5"), path("other_vocab.h5"), 8, true); }),
                  path("other_vocab.h5") + ":/test has vocab_size 600 but " + path("both.h5") +
                      ":/train 500; train and test must come from one tokenizer");
  EXPECT_CONTAINS(
      config_error_of([&] { open_token_sources(path("both.h5"), "", 41, true); }),
      path("both.h5") + ": /test/tokens: the corpus has 41 tokens, shorter than one window of --context 41");
}

TEST_F(TokenTest, BatchLoaderCarriesTTargetsPerWindow) {
  RawTokens r;
  r.count = 401;
  r.chunk = 16;
  write_raw(path("t.h5"), r);
  auto source = open_token_source(path("t.h5"), "train", 8);  // 50 windows
  LoaderConfig c;
  c.global_batch = 12;
  c.workers = 2;
  c.worker = 1;
  c.towers = 2;
  c.seed = 5;
  c.total_steps = 6;  // past the first epoch (5 steps)
  std::vector<WorkerBatch> batches;
  {
    BatchLoader loader(*source, c);
    for (int s = 0; s < 6; ++s) batches.push_back(loader.next());
  }
  // (only the loader reads the source while it lives)
  for (const WorkerBatch& b : batches) {
    const EpochPlan plan(50, 12, 2, 2, 5, b.epoch);
    for (int t = 0; t < 2; ++t) {
      const TowerBatch& tb = b.towers[static_cast<std::size_t>(t)];
      const std::vector<int> samples = plan.samples(b.step_in_epoch, 1, t);
      ASSERT_EQ(tb.count, static_cast<int>(samples.size()));
      ASSERT_EQ(tb.images.size(), samples.size() * 8);
      ASSERT_EQ(tb.labels.size(), samples.size() * 8);
      for (std::size_t k = 0; k < samples.size(); ++k)
        for (std::size_t p = 0; p < 8; ++p) {
          const std::int64_t at = std::int64_t{samples[k]} * 8 + static_cast<std::int64_t>(p);
          ASSERT_EQ(tb.images[k * 8 + p], static_cast<float>(known(at, 1000)));
          ASSERT_EQ(tb.labels[k * 8 + p], static_cast<std::int32_t>(known(at + 1, 1000)));
        }
      const TowerBatch direct = read_tower_batch(*source, samples);
      EXPECT_EQ(direct.images, tb.images);
      EXPECT_EQ(direct.labels, tb.labels);
    }
  }
  EXPECT_EQ(batches.back().epoch, 1);
  c.augment.flip = true;
  EXPECT_CONTAINS(config_error_of([&] { BatchLoader loader(*source, c); }),
                  ":/train holds windows of tokens: --augment and --normalize apply to images only");
}

// ---------------------------------------------------------------------------------------------
// Converters

void write_bytes(const std::string& file, const std::string& bytes) {
  std::ofstream f(file, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::vector<std::uint64_t> bytes_of(const std::string& text) {
  std::vector<std::uint64_t> out;
  for (unsigned char c : text) out.push_back(c);
  return out;
}

std::vector<std::uint64_t> concat(std::initializer_list<std::vector<std::uint64_t>> parts) {
  std::vector<std::uint64_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

const std::vector<std::uint64_t> kSep{kTextDocumentSeparator};

TEST_F(TokenTest, TextBecomesItsBytesInSortedOrder) {
  fs::create_directories(path("docs/sub"));
  fs::create_directories(path("docs/.git"));
  write_bytes(path("docs/b.txt"), "Beta\n");
  write_bytes(path("docs/a.txt"), "alpha \xe2\x9c\x93\n");  // UTF-8 stays bytes
  write_bytes(path("docs/sub/c.rst"), "gamma");
  write_bytes(path("docs/.hidden"), "not me");
  write_bytes(path("docs/.git/config"), "nor me");
  write_bytes(path("docs/empty.txt"), "");
  EXPECT_EQ(expand_inputs({path("docs")}, "--text", true),
            (std::vector<std::string>{path("docs/a.txt"), path("docs/b.txt"), path("docs/empty.txt"),
                                      path("docs/sub/c.rst")}));
  EXPECT_EQ(expand_inputs({path("docs/*.txt"), path("docs/sub/c.rst")}, "--text", true),
            (std::vector<std::string>{path("docs/a.txt"), path("docs/b.txt"), path("docs/empty.txt"),
                                      path("docs/sub/c.rst")}));
  EXPECT_EQ(expand_inputs({path("docs/b.txt"), path("docs/a.txt")}, "--text", true),
            (std::vector<std::string>{path("docs/b.txt"), path("docs/a.txt")}));  // files in the order given

  convert_text({path("docs")}, {}, path("t.h5"), {});
  EXPECT_EQ(read_raw(path("t.h5"), "train"),
            concat({kSep, bytes_of("alpha \xe2\x9c\x93\n"), kSep, bytes_of("Beta\n"), kSep, bytes_of("gamma")}));
  const TokenSplitHeader h = read_token_header(path("t.h5"), "train");
  EXPECT_EQ(h.vocab_size, 256);
  EXPECT_EQ(h.storage.type, "uint8");
  EXPECT_CONTAINS(h.source, "byte-level text");
  EXPECT_THROW(read_token_header(path("t.h5"), "test"), ConfigError);

  // A test split from other files
  convert_text({path("docs/a.txt")}, {path("docs/sub")}, path("t2.h5"), {});
  EXPECT_EQ(read_raw(path("t2.h5"), "train"), concat({kSep, bytes_of("alpha \xe2\x9c\x93\n")}));
  EXPECT_EQ(read_raw(path("t2.h5"), "test"), concat({kSep, bytes_of("gamma")}));

  // The last fraction of each file: 10 bytes at 0.25 keep floor(7.5) = 7 in /train.
  write_bytes(path("ten.txt"), "0123456789");
  write_bytes(path("four.txt"), "abcd");
  TokenConvertOptions o;
  o.test_fraction = 0.25;
  convert_text({path("ten.txt"), path("four.txt")}, {}, path("f.h5"), o);
  EXPECT_EQ(read_raw(path("f.h5"), "train"), concat({kSep, bytes_of("0123456"), kSep, bytes_of("abc")}));
  EXPECT_EQ(read_raw(path("f.h5"), "test"), concat({kSep, bytes_of("789"), kSep, bytes_of("d")}));
  // The source reads them as windows
  auto source = open_token_source(path("f.h5"), "train", 3);
  expect_windows(*source, {0, 1, 2},
                 [&](std::int64_t i) { return read_raw(path("f.h5"), "train")[static_cast<std::size_t>(i)]; });
}

TEST_F(TokenTest, TextInputErrors) {
  write_bytes(path("a.txt"), "abc");
  fs::create_directories(path("empty"));
  TokenConvertOptions o;
  const std::string out = path("o.h5");
  EXPECT_CONTAINS(config_error_of([&] { convert_text({path("nope.txt")}, {}, out, o); }),
                  "--text " + path("nope.txt") + ": no such file or directory");
  EXPECT_CONTAINS(config_error_of([&] { convert_text({path("*.md")}, {}, out, o); }),
                  "--text '" + path("*.md") + "': the pattern matches no file");
  EXPECT_CONTAINS(config_error_of([&] { convert_text({path("empty")}, {}, out, o); }),
                  "--text " + path("empty") + ": the directory holds no files");
  EXPECT_CONTAINS(config_error_of([&] { convert_text({path("a.txt")}, {path("a.txt")}, out, o); }),
                  "--test-text " + path("a.txt") + ": given twice (a test input also among the training inputs)");
  fs::create_directories(path("od"));
  write_bytes(path("od/a.txt"), "abc");
  write_bytes(path("od/o.h5"), "an earlier output");
  EXPECT_CONTAINS(config_error_of([&] { convert_text({path("od")}, {}, path("od/o.h5"), o); }),
                  "--text " + path("od/o.h5") + ": is the output file; write OUT.h5 elsewhere");
  o.test_fraction = 1e-18;  // 1 - F rounds to 1: nothing held out
  EXPECT_CONTAINS(config_error_of([&] { convert_text({path("a.txt")}, {}, path("x.h5"), o); }),
                  "--test-fraction 1e-18 holds out no token of these inputs; raise it");
  o.test_fraction = 1.5;
  EXPECT_CONTAINS(config_error_of([&] { convert_text({path("a.txt")}, {}, path("x.h5"), o); }),
                  "--test-fraction 1.5: must be in (0, 1)");
  o.test_fraction = 0;
  o.vocab_size = 300;
  EXPECT_CONTAINS(config_error_of([&] { convert_text({path("a.txt")}, {}, path("x.h5"), o); }),
                  "--vocab-size 300: text is byte-level, its vocabulary is 256");
  EXPECT_FALSE(fs::exists(path("x.h5")));
  EXPECT_FALSE(fs::exists(path("x.h5.tmp")));
}

// An llm.c shard: 256 little-endian int32 (magic, version, count), then the tokens.
void write_llmc(const std::string& file, const std::vector<std::uint32_t>& tokens, std::int32_t magic = kLlmcMagicGpt2,
                std::int32_t version = 1, std::optional<std::int32_t> count = std::nullopt) {
  std::string bytes(kLlmcHeaderBytes, '\0');
  const std::int32_t header[3] = {magic, version, count.value_or(static_cast<std::int32_t>(tokens.size()))};
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t b = 0; b < 4; ++b)
      bytes[4 * i + b] = static_cast<char>((static_cast<std::uint32_t>(header[i]) >> (8 * b)) & 0xFF);
  const int width = magic == kLlmcMagicLlama3 ? 4 : 2;
  for (std::uint32_t t : tokens)
    for (int b = 0; b < width; ++b) bytes.push_back(static_cast<char>((t >> (8 * b)) & 0xFF));
  write_bytes(file, bytes);
}

void write_uint16(const std::string& file, const std::vector<std::uint32_t>& tokens) {
  std::string bytes;
  for (std::uint32_t t : tokens) {
    bytes.push_back(static_cast<char>(t & 0xFF));
    bytes.push_back(static_cast<char>(t >> 8));
  }
  write_bytes(file, bytes);
}

TEST_F(TokenTest, LlmcShardsAndRawUint16GiveTheSameTokens) {
  std::vector<std::uint32_t> a, b;
  for (std::uint32_t i = 0; i < 3000; ++i) a.push_back((i * 7919) % 50257);
  for (std::uint32_t i = 0; i < 500; ++i) b.push_back(50256 - i);
  // written in reverse order: the pattern's matches are sorted
  write_llmc(path("train_000001.bin"), b);
  write_llmc(path("train_000000.bin"), a);
  write_llmc(path("val_000000.bin"), b);
  std::vector<std::uint32_t> ab(a);
  ab.insert(ab.end(), b.begin(), b.end());
  write_uint16(path("train.bin"), ab);
  write_uint16(path("val.bin"), b);

  TokenConvertOptions o;
  convert_token_files(TokenBinKind::kLlmc, {path("train_*.bin")}, {path("val_*.bin")}, path("llmc.h5"), o);
  o.vocab_size = 50257;
  convert_token_files(TokenBinKind::kUint16, {path("train.bin")}, {path("val.bin")}, path("raw.h5"), o);
  const std::vector<std::uint64_t> expected(ab.begin(), ab.end());
  for (const char* file : {"llmc.h5", "raw.h5"}) {
    SCOPED_TRACE(file);
    EXPECT_EQ(read_raw(path(file), "train"), expected);
    EXPECT_EQ(read_raw(path(file), "test"), std::vector<std::uint64_t>(b.begin(), b.end()));
    const TokenSplitHeader h = read_token_header(path(file), "train");
    EXPECT_EQ(h.vocab_size, 50257);
    EXPECT_EQ(h.storage.type, "uint16");
  }
  // --test-fraction works on shards too: the last 0.1 of each
  o = TokenConvertOptions{};
  o.test_fraction = 0.1;
  convert_token_files(TokenBinKind::kLlmc, {path("train_000000.bin")}, {}, path("frac.h5"), o);
  EXPECT_EQ(read_raw(path("frac.h5"), "train"), std::vector<std::uint64_t>(a.begin(), a.begin() + 2700));
  EXPECT_EQ(read_raw(path("frac.h5"), "test"), std::vector<std::uint64_t>(a.begin() + 2700, a.end()));

  // LLaMA 3 shards: uint32 tokens, vocabulary 128256
  write_llmc(path("llama.bin"), {0, 128255, 70000}, kLlmcMagicLlama3, 7);
  convert_token_files(TokenBinKind::kLlmc, {path("llama.bin")}, {}, path("llama.h5"), {});
  EXPECT_EQ(read_raw(path("llama.h5"), "train"), (std::vector<std::uint64_t>{0, 128255, 70000}));
  EXPECT_EQ(read_token_header(path("llama.h5"), "train").storage.type, "uint32");
  EXPECT_EQ(read_token_header(path("llama.h5"), "train").vocab_size, 128256);
}

TEST_F(TokenTest, BadShardsAndRawFiles) {
  const auto error = [&](TokenBinKind kind, const std::string& file, std::int64_t vocab = 0) {
    TokenConvertOptions o;
    o.vocab_size = vocab;
    return config_error_of([&] { convert_token_files(kind, {file}, {}, path("o.h5"), o); });
  };
  const std::vector<std::uint32_t> tokens{1, 2, 3, 50300, 5};
  write_llmc(path("magic.bin"), tokens, 12345);
  EXPECT_CONTAINS(error(TokenBinKind::kLlmc, path("magic.bin")),
                  path("magic.bin") + ": magic number 12345 (header[0]), expected 20240520: not an llm.c token shard");
  write_llmc(path("version.bin"), tokens, kLlmcMagicGpt2, 2);
  EXPECT_CONTAINS(
      error(TokenBinKind::kLlmc, path("version.bin")),
      path("version.bin") + ": llm.c shard of version 2 (header[1]); drtrain reads version 1 (uint16 tokens)");
  write_llmc(path("short.bin"), tokens, kLlmcMagicGpt2, 1, 6);
  EXPECT_CONTAINS(error(TokenBinKind::kLlmc, path("short.bin")),
                  path("short.bin") + ": 1034 bytes, but its header announces 6 tokens of 2 bytes after 1024 header "
                                      "bytes: 1036 bytes; the file is cut short");
  write_llmc(path("long.bin"), tokens, kLlmcMagicGpt2, 1, 4);
  EXPECT_CONTAINS(error(TokenBinKind::kLlmc, path("long.bin")), "longer than its header says: not an llm.c shard");
  write_llmc(path("negative.bin"), {}, kLlmcMagicGpt2, 1, -3);
  EXPECT_CONTAINS(error(TokenBinKind::kLlmc, path("negative.bin")), "token count -3 (header[2]) is negative");
  write_bytes(path("tiny.bin"), "abc");
  EXPECT_CONTAINS(error(TokenBinKind::kLlmc, path("tiny.bin")),
                  path("tiny.bin") + ": 3 bytes, shorter than llm.c's header of 1024 bytes");
  write_llmc(path("big_token.bin"), tokens);
  EXPECT_CONTAINS(error(TokenBinKind::kLlmc, path("big_token.bin")),
                  path("big_token.bin") + ": token 3 is 50300, not below the vocabulary size 50257 (the default of "
                                          "these files): give the tokenizer's vocabulary with --vocab-size V");
  TokenConvertOptions wider;
  wider.vocab_size = 50301;
  EXPECT_NO_THROW(convert_token_files(TokenBinKind::kLlmc, {path("big_token.bin")}, {}, path("wide.h5"), wider));
  write_llmc(path("llama.bin"), {1}, kLlmcMagicLlama3, 7);
  EXPECT_CONTAINS(
      config_error_of([&] {
        convert_token_files(TokenBinKind::kLlmc, {path("big_token.bin"), path("llama.bin")}, {}, path("o.h5"), {});
      }),
      path("llama.bin") + ": an llm.c shard of another tokenizer (128256 tokens) than the first (50257)");

  write_uint16(path("raw.bin"), tokens);
  EXPECT_CONTAINS(error(TokenBinKind::kUint16, path("raw.bin")), "--uint16-bin needs --vocab-size V");
  EXPECT_CONTAINS(error(TokenBinKind::kUint16, path("raw.bin"), 1000),
                  path("raw.bin") + ": token 3 is 50300, not below the vocabulary size 1000 (--vocab-size)");
  write_bytes(path("odd.bin"), "abc");
  EXPECT_CONTAINS(error(TokenBinKind::kUint16, path("odd.bin"), 1000),
                  path("odd.bin") + ": 3 bytes, an odd number: not a stream of uint16 tokens");
  EXPECT_CONTAINS(error(TokenBinKind::kUint16, path("."), 1000), "is a directory; give the files, or a pattern");
  EXPECT_FALSE(fs::exists(path("o.h5.tmp")));
}

}  // namespace
}  // namespace drt::data
