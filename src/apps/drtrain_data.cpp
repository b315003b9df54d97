// drtrain-data: make, inspect and check data sets in drtrain's HDF5 format (docs/DATA_FORMAT.md).
//   drtrain-data convert --idx DIR OUT.h5 [options]            MNIST-style IDX pairs (train-*, t10k-*)
//   drtrain-data convert --npy X.npy Y.npy [--test-npy X Y] [--layout NCHW|NHWC] OUT.h5 [options]
//       options: --classes K, --class-names A,B,..., --normalize, --compress LEVEL, --chunk-kib K
//   drtrain-data convert --text FILE|DIR|GLOB... [--test-text ... | --test-fraction F] OUT.h5
//   drtrain-data convert --llmc-bin 'train_*.bin' [--test-llmc-bin 'val_*.bin'] [--vocab-size V] OUT.h5
//   drtrain-data convert --uint16-bin train.bin [--test-uint16-bin val.bin] --vocab-size V OUT.h5
//                                                              token streams (byte-level text, llm.c, nanoGPT)
//   drtrain-data info FILE                                     header, storage, samples per class or tokens
//   drtrain-data verify FILE                                   reads every chunk, label and token back
//   drtrain-data synth OUT.h5 --count N --shape C,H,W [...]    a synthetic set of any size
//   drtrain-data bench FILE [--batch B] [...]                  random-batch read throughput
//   drtrain-data plan FILE|--count N --batch B [--seed S] [...]  which samples each training step takes
// Exit status: 0 fine, 1 a bad or unreadable file (verify: a problem found), 2 bad usage.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/data/epoch_plan.hpp"
#include "drtrain/data/hdf5_convert.hpp"
#include "drtrain/data/hdf5_format.hpp"
#include "drtrain/data/hdf5_source.hpp"
#include "drtrain/data/synthetic_hdf5.hpp"
#include "drtrain/data/token_convert.hpp"
#include "drtrain/data/token_format.hpp"
#include "drtrain/data/token_source.hpp"
#include "tool_flags.hpp"

namespace {

using namespace drt::data;  // NOLINT(google-build-using-namespace): a program over this one library

constexpr const char* kUsage =
    "usage: drtrain-data convert --idx DIR OUT.h5 [options]\n"
    "       drtrain-data convert --npy TRAIN_X.npy TRAIN_Y.npy [--test-npy X.npy Y.npy] [--layout NCHW|NHWC] OUT.h5 "
    "[options]\n"
    "           options: --classes K (default: largest label + 1), --class-names A,B,...,\n"
    "                    --normalize (store the train split's per-channel mean/std), --compress LEVEL (gzip 1-9),\n"
    "                    --chunk-kib K (image chunks of about K KiB, default 32)\n"
    "       drtrain-data convert --text FILE|DIR|'GLOB'... [--test-text FILE|DIR|'GLOB'... | --test-fraction F] "
    "OUT.h5\n"
    "       drtrain-data convert --llmc-bin 'train_*.bin'... [--test-llmc-bin 'val_*.bin'...] [--vocab-size V] OUT.h5\n"
    "       drtrain-data convert --uint16-bin train.bin... [--test-uint16-bin val.bin...] --vocab-size V OUT.h5\n"
    "           token streams (/train/tokens, /test/tokens): --text is byte-level (vocabulary 256, a 0 byte before\n"
    "           each file; directories: every file below, sorted); --llmc-bin: llm.c shards (default --vocab-size\n"
    "           50257, GPT-2), --uint16-bin: nanoGPT's train.bin; patterns in sorted order; a file list ends at the\n"
    "           next option or at OUT.h5 (.h5 or .hdf5); --test-fraction F: the last F of each file is /test;\n"
    "           also --compress LEVEL, --chunk-kib K (chunks of tokens, default 32)\n"
    "       drtrain-data info FILE            images: shapes, storage, samples per class; tokens: count, vocab_size\n"
    "       drtrain-data verify FILE          every chunk, label and token (each below vocab_size) read back\n"
    "       drtrain-data synth OUT.h5 --count N --shape C,H,W [--classes K] [--test-count M] [--dtype uint8|float32]\n"
    "                          [--layout NCHW|NHWC] [--seed S] [--normalize] [--compress LEVEL] [--chunk-kib K]\n"
    "       drtrain-data bench FILE [--split train|test] [--batch B] [--seconds S] [--cache-mib M] [--cold] [--seed "
    "S]\n"
    "                          [--context T (token files: windows of T tokens, default 256)]\n"
    "       drtrain-data plan FILE [--context T] [--split train|test] | --count N\n"
    "                         --batch B [--seed S] [--epoch E] [--steps K] [--workers W --towers T] [--json]\n"
    "           which samples (token windows) each training step takes, as drtrain --seed S --batch-size B: per\n"
    "           step, its global batch in part order (tower t of worker w takes part w*T+t); from epoch E's first\n"
    "           step, K steps (default: the rest of that epoch), into the next epochs when K is larger\n"
    "The format: docs/DATA_FORMAT.md. Exit status: 0 fine, 1 a bad file, 2 bad usage.\n";

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A list option (kList) takes one or more values: up to the next --option or up to an argument
// naming an HDF5 file (.h5, .hdf5), which is the output.
constexpr int kList = -1;

bool names_hdf5(const std::string& arg) {
  for (const char* ext : {".h5", ".hdf5"}) {
    const std::string e = ext;
    if (arg.size() > e.size() && arg.compare(arg.size() - e.size(), e.size(), e) == 0) return true;
  }
  return false;
}

// Positional arguments and --options, each option taking a fixed number of values (or a list).
struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::vector<std::string>> options;

  Args(int argc, char** argv, int first, const std::map<std::string, int>& arity) {
    for (int i = first; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg.rfind("--", 0) != 0) {
        positional.push_back(arg);
        continue;
      }
      const auto spec = arity.find(arg);
      if (spec == arity.end()) throw UsageError("unknown option '" + arg + "' for " + argv[1]);
      if (options.count(arg)) throw UsageError(arg + " given twice");
      std::vector<std::string> values;
      if (spec->second == kList) {
        while (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0 && !names_hdf5(argv[i + 1]))
          values.emplace_back(argv[++i]);
        if (values.empty()) throw UsageError(arg + " needs at least one file");
      }
      for (int v = 0; v < spec->second; ++v) {
        if (i + 1 >= argc) throw UsageError(drt::str(arg, " needs ", spec->second, " value(s)"));
        values.emplace_back(argv[++i]);
      }
      options[arg] = values;
    }
  }
  const std::vector<std::string>& list(const std::string& name) const {
    static const std::vector<std::string> none;
    const auto it = options.find(name);
    return it == options.end() ? none : it->second;
  }
  bool has(const std::string& name) const { return options.count(name) > 0; }
  std::string value(const std::string& name, const std::string& fallback = "") const {
    const auto it = options.find(name);
    return it == options.end() ? fallback : it->second.at(0);
  }
  long long number(const std::string& name, long long fallback, long long min, long long max) const {
    if (!has(name)) return fallback;
    const std::string text = value(name);
    long long parsed = -1;
    try {
      parsed = drt::parse_count(text, name);
    } catch (const drt::ConfigError&) {
      throw UsageError(drt::str(name, " ", text, ": expected a whole number"));
    }
    if (parsed < min || parsed > max) throw UsageError(drt::str(name, " ", text, ": must be in ", min, "..", max));
    return parsed;
  }
};

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::vector<std::string> parts;
  parts.reserve(shape.size());
  for (std::int64_t d : shape) parts.push_back(std::to_string(d));
  return "[" + drt::join(parts, ", ") + "]";
}

std::string floats_text(const std::vector<float>& values) {
  std::vector<std::string> parts;
  parts.reserve(values.size());
  for (float v : values) parts.push_back(drt::fixed(v, 4));
  return drt::join(parts, " ");
}

ConvertOptions convert_options(const Args& a) {
  ConvertOptions o;
  o.classes = a.number("--classes", 0, 1, 2147483647);
  o.class_names = a.value("--class-names");
  o.normalize = a.has("--normalize");
  o.compress_level = static_cast<int>(a.number("--compress", 0, 0, 9));
  o.chunk_bytes = static_cast<std::size_t>(a.number("--chunk-kib", 32, 1, 1 << 20)) << 10;
  return o;
}

int print_summary(const std::string& file) {
  if (data_kind(file) == DataKind::kTokens) {
    for (const std::string& split : list_splits(file)) {
      const TokenSplitHeader h = read_token_header(file, split);
      std::printf("wrote %s:/%s: %lld tokens (%s), vocab_size %lld\n", file.c_str(), split.c_str(),
                  static_cast<long long>(h.count), h.storage.type.c_str(), static_cast<long long>(h.vocab_size));
    }
    return 0;
  }
  std::string statistics;  // the train split's, stored for every split (drtrain --normalize stored)
  for (const std::string& split : list_splits(file)) {
    const SplitHeader h = read_split_header(file, split);
    std::printf("wrote %s:/%s: %lld samples of %dx%dx%d %s (%s), %lld classes\n", file.c_str(), split.c_str(),
                static_cast<long long>(h.count), h.channels, h.height, h.width, pixel_type_name(h.pixel_type),
                layout_name(h.layout), static_cast<long long>(h.classes));
    if (!h.mean.empty()) statistics = drt::str("mean ", floats_text(h.mean), " std ", floats_text(h.stddev));
  }
  if (!statistics.empty())
    std::printf("per-channel statistics of the train split (drtrain --normalize stored uses them for both splits): "
                "%s\n",
                statistics.c_str());
  return 0;
}

double parse_fraction(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !(value > 0.0 && value < 1.0))
    throw UsageError("--test-fraction " + text + ": expected a number between 0 and 1 (e.g. 0.05)");
  return value;
}

// convert --text / --llmc-bin / --uint16-bin: token streams.
int convert_tokens(const Args& a, const std::string& out) {
  for (const char* image_option :
       {"--idx", "--npy", "--test-npy", "--layout", "--classes", "--class-names", "--normalize"})
    if (a.has(image_option)) throw UsageError(drt::str(image_option, " goes with images (--idx, --npy), not tokens"));
  TokenConvertOptions o;
  o.vocab_size = a.number("--vocab-size", 0, 1, kMaxVocabulary);
  if (a.has("--test-fraction")) o.test_fraction = parse_fraction(a.value("--test-fraction"));
  o.compress_level = static_cast<int>(a.number("--compress", 0, 0, 9));
  o.chunk_bytes = static_cast<std::size_t>(a.number("--chunk-kib", 32, 1, 1 << 20)) << 10;
  const bool text = a.has("--text"), llmc = a.has("--llmc-bin");
  const std::string train = text ? "--text" : llmc ? "--llmc-bin" : "--uint16-bin";
  const std::string test = "--test-" + train.substr(2);
  for (const char* option : {"--test-text", "--test-llmc-bin", "--test-uint16-bin"})
    if (a.has(option) && option != test)
      throw UsageError(drt::str(option, " goes with --", std::string(option).substr(7)));
  if (a.has("--test-fraction") && a.has(test))
    throw UsageError("--test-fraction and " + test + " both make the test split: give one of them");
  if (text && a.has("--vocab-size")) throw UsageError("--vocab-size: --text is byte-level, its vocabulary is 256");
  if (text) convert_text(a.list("--text"), a.list("--test-text"), out, o);
  else convert_token_files(llmc ? TokenBinKind::kLlmc : TokenBinKind::kUint16, a.list(train), a.list(test), out, o);
  return print_summary(out);
}

int convert(int argc, char** argv) {
  const Args a(argc, argv, 2,
               {{"--idx", 1},
                {"--npy", 2},
                {"--test-npy", 2},
                {"--layout", 1},
                {"--classes", 1},
                {"--class-names", 1},
                {"--normalize", 0},
                {"--compress", 1},
                {"--chunk-kib", 1},
                {"--text", kList},
                {"--test-text", kList},
                {"--test-fraction", 1},
                {"--llmc-bin", kList},
                {"--test-llmc-bin", kList},
                {"--uint16-bin", kList},
                {"--test-uint16-bin", kList},
                {"--vocab-size", 1}});
  const int inputs = static_cast<int>(a.has("--idx")) + static_cast<int>(a.has("--npy")) +
                     static_cast<int>(a.has("--text")) + static_cast<int>(a.has("--llmc-bin")) +
                     static_cast<int>(a.has("--uint16-bin"));
  if (inputs != 1)
    throw UsageError("convert takes one kind of input: --idx DIR, --npy X.npy Y.npy, --text FILE..., --llmc-bin "
                     "FILE... or --uint16-bin FILE...");
  if (a.positional.size() != 1)
    throw UsageError("convert writes one file: give OUT.h5 once (after a list of files, OUT must end in .h5 or .hdf5)");
  const std::string out = a.positional[0];
  if (a.has("--text") || a.has("--llmc-bin") || a.has("--uint16-bin")) return convert_tokens(a, out);
  for (const char* token_option :
       {"--test-text", "--test-fraction", "--test-llmc-bin", "--test-uint16-bin", "--vocab-size"})
    if (a.has(token_option))
      throw UsageError(drt::str(token_option, " goes with token streams (--text, --llmc-bin, --uint16-bin)"));
  const ConvertOptions options = convert_options(a);
  if (a.has("--idx")) {
    if (a.has("--test-npy") || a.has("--layout")) throw UsageError("--test-npy and --layout go with --npy");
    convert_idx(a.value("--idx"), out, options);
  } else {
    std::optional<Layout> layout;
    if (a.has("--layout")) {
      try {
        layout = parse_layout(a.value("--layout"), "--layout");
      } catch (const drt::ConfigError& e) {
        throw UsageError(e.what());
      }
    }
    const auto& npy = a.options.at("--npy");
    std::optional<NpyPair> test;
    if (a.has("--test-npy")) test = NpyPair{a.options.at("--test-npy")[0], a.options.at("--test-npy")[1]};
    convert_npy(NpyPair{npy[0], npy[1]}, test, layout, out, options);
  }
  return print_summary(out);
}

std::string storage_text(const DatasetStorage& s) {
  std::string text = drt::str(s.type, " ", shape_text(s.shape));
  text += s.chunk.empty() ? ", contiguous" : ", chunks " + shape_text(s.chunk);
  text += s.filters.empty() ? ", no filters" : ", filters " + drt::join(s.filters, " ");
  return text + drt::str(", ", drt::human_bytes(static_cast<double>(s.storage_bytes)), " in the file");
}

// info of a token file: the root attributes, each split's count and storage.
int token_info(const std::string& file) {
  const std::vector<std::string> splits = list_splits(file);
  for (std::size_t i = 0; i < splits.size(); ++i) {
    const TokenSplitHeader h = read_token_header(file, splits[i]);
    if (i == 0) {
      std::printf("%s: drtrain token data set, format version %lld, vocab_size %lld\n", file.c_str(),
                  static_cast<long long>(kDataFormatVersion), static_cast<long long>(h.vocab_size));
      if (!h.source.empty()) std::printf("  source: %s\n", h.source.c_str());
    }
    std::printf("/%s: %lld tokens\n", h.split.c_str(), static_cast<long long>(h.count));
    std::printf("  tokens  %s\n", storage_text(h.storage).c_str());
  }
  return 0;
}

int info(int argc, char** argv) {
  const Args a(argc, argv, 2, {});
  if (a.positional.size() != 1) throw UsageError("info takes one FILE");
  const std::string file = a.positional[0];
  if (data_kind(file) == DataKind::kTokens) return token_info(file);
  const std::vector<std::string> splits = list_splits(file);
  for (std::size_t i = 0; i < splits.size(); ++i) {
    const SplitHeader h = read_split_header(file, splits[i]);
    if (i == 0) {
      std::printf("%s: drtrain data set, format version %lld, %lld classes\n", file.c_str(),
                  static_cast<long long>(kDataFormatVersion), static_cast<long long>(h.classes));
      if (!h.class_names.empty()) std::printf("  class names: %s\n", h.class_names.c_str());
      if (!h.source.empty()) std::printf("  source: %s\n", h.source.c_str());
    }
    std::printf("/%s: %lld samples of %dx%dx%d (CxHxW) %s, layout %s\n", h.split.c_str(),
                static_cast<long long>(h.count), h.channels, h.height, h.width, pixel_type_name(h.pixel_type),
                layout_name(h.layout));
    std::printf("  images  %s\n", storage_text(h.images).c_str());
    std::printf("  labels  %s\n", storage_text(h.labels).c_str());
    if (!h.mean.empty())
      std::printf("  mean    %s\n  std     %s%s\n", floats_text(h.mean).c_str(), floats_text(h.stddev).c_str(),
                  h.stats_from.empty() ? "" : (" (computed from " + h.stats_from + ")").c_str());
    else std::printf("  mean/std: none stored\n");
    const std::vector<std::int64_t> counts = count_classes(file, splits[i]);
    std::vector<std::string> parts;
    if (counts.size() <= 32) {
      for (std::size_t c = 0; c < counts.size(); ++c) parts.push_back(drt::str(c, ": ", counts[c]));
      std::printf("  samples per class  %s\n", drt::join(parts, ", ").c_str());
    } else {
      const auto [lo, hi] = std::minmax_element(counts.begin(), counts.end());
      const auto empty = std::count(counts.begin(), counts.end(), 0);
      std::printf("  samples per class  %lld to %lld (class %lld and %lld); %lld classes without samples\n",
                  static_cast<long long>(*lo), static_cast<long long>(*hi), static_cast<long long>(lo - counts.begin()),
                  static_cast<long long>(hi - counts.begin()), static_cast<long long>(empty));
    }
  }
  return 0;
}

// Reads every sample of every split in order (every chunk through its checksum, every label
// range-checked) and checks float pixels for NaN and infinity.
int verify(int argc, char** argv) {
  const Args a(argc, argv, 2, {});
  if (a.positional.size() != 1) throw UsageError("verify takes one FILE");
  const std::string file = a.positional[0];
  try {
    if (data_kind(file) == DataKind::kTokens) {
      for (const std::string& split : list_splits(file)) {
        const std::int64_t count = check_tokens(file, split);
        std::printf("%s:/%s: %lld tokens read back, each below vocab_size %lld\n", file.c_str(), split.c_str(),
                    static_cast<long long>(count), static_cast<long long>(read_token_header(file, split).vocab_size));
      }
      std::printf("OK: %s\n", file.c_str());
      return 0;
    }
    std::optional<SplitHeader> first;
    for (const std::string& split : list_splits(file)) {
      const SplitHeader h = read_split_header(file, split);
      if (first && (first->channels != h.channels || first->height != h.height || first->width != h.width))
        throw drt::ConfigError(drt::str(file, ": /", split, "/images: samples of ", h.channels, "x", h.height, "x",
                                        h.width, " but /", first->split, " has ", first->channels, "x", first->height,
                                        "x", first->width, "; both splits must have one sample shape"));
      if (!first) first = h;
      const auto source = open_hdf5_source(file, split);
      const std::size_t floats = source->info().sample_floats();
      const auto batch = static_cast<std::int64_t>(std::max<std::size_t>(1, (std::size_t{4} << 20) / (floats * 4)));
      std::vector<float> images(static_cast<std::size_t>(std::min(batch, h.count)) * floats);
      std::vector<std::int32_t> labels(static_cast<std::size_t>(std::min(batch, h.count)));
      std::vector<std::int64_t> indices;
      for (std::int64_t begin = 0; begin < h.count; begin += batch) {
        const std::int64_t n = std::min(batch, h.count - begin);
        indices.resize(static_cast<std::size_t>(n));
        for (std::int64_t i = 0; i < n; ++i) indices[static_cast<std::size_t>(i)] = begin + i;
        source->read(indices, images.data(), labels.data());
        if (h.pixel_type == PixelType::kFloat32) {
          const auto end = images.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(n) * floats);
          const auto bad = std::find_if(images.begin(), end, [](float v) { return !std::isfinite(v); });
          if (bad != end)
            throw drt::ConfigError(drt::str(file, ": /", split, "/images: sample ",
                                            begin + (bad - images.begin()) / static_cast<std::ptrdiff_t>(floats),
                                            " holds ", *bad, "; pixels must be finite numbers"));
        }
      }
      std::printf("%s:/%s: %lld samples of %dx%dx%d %s and their labels read back\n", file.c_str(), split.c_str(),
                  static_cast<long long>(h.count), h.channels, h.height, h.width, pixel_type_name(h.pixel_type));
    }
  } catch (const drt::Error& e) {
    std::fprintf(stderr, "drtrain-data: verify FAILED: %s\n", e.what());
    return 1;
  }
  std::printf("OK: %s\n", file.c_str());
  return 0;
}

std::vector<int> parse_shape(const std::string& text) {
  std::vector<int> dims;
  std::string item;
  for (char c : text + ",") {
    if (c != ',') {
      item += c;
      continue;
    }
    long long v = 0;
    try {
      v = drt::parse_count(item, "--shape");
    } catch (const drt::ConfigError&) {
      v = 0;
    }
    if (v < 1 || v > 65536) throw UsageError("--shape " + text + ": expected C,H,W, each in 1..65536");
    dims.push_back(static_cast<int>(v));
    item.clear();
  }
  if (dims.size() != 3) throw UsageError("--shape " + text + ": expected three sizes C,H,W");
  return dims;
}

int synth(int argc, char** argv) {
  const Args a(argc, argv, 2,
               {{"--count", 1},
                {"--shape", 1},
                {"--classes", 1},
                {"--test-count", 1},
                {"--dtype", 1},
                {"--layout", 1},
                {"--seed", 1},
                {"--normalize", 0},
                {"--compress", 1},
                {"--chunk-kib", 1}});
  if (a.positional.size() != 1) throw UsageError("synth writes one file: give OUT.h5 once");
  if (!a.has("--count") || !a.has("--shape")) throw UsageError("synth needs --count N and --shape C,H,W");
  SyntheticOptions o;
  o.count = a.number("--count", 0, 1, std::int64_t{1} << 40);
  o.test_count = a.number("--test-count", 0, 0, std::int64_t{1} << 40);
  const std::vector<int> shape = parse_shape(a.value("--shape"));
  o.channels = shape[0];
  o.height = shape[1];
  o.width = shape[2];
  o.classes = a.number("--classes", 10, 1, 2147483647);
  o.seed = static_cast<std::uint64_t>(a.number("--seed", 1, 0, std::numeric_limits<long long>::max()));
  o.compress_level = static_cast<int>(a.number("--compress", 0, 0, 9));
  o.chunk_bytes = static_cast<std::size_t>(a.number("--chunk-kib", 32, 1, 1 << 20)) << 10;
  o.normalize = a.has("--normalize");
  try {
    o.pixel_type = parse_pixel_type(a.value("--dtype", "uint8"), "--dtype");
    o.layout = parse_layout(a.value("--layout", "NCHW"), "--layout");
  } catch (const drt::ConfigError& e) {
    throw UsageError(e.what());
  }
  const auto start = std::chrono::steady_clock::now();
  write_synthetic_hdf5(a.positional[0], o);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double bytes = static_cast<double>(o.count + o.test_count) * o.channels * o.height * o.width *
                       static_cast<double>(pixel_bytes(o.pixel_type));
  print_summary(a.positional[0]);
  std::printf("%s of images in %.1f s (%.0f MB/s)\n", drt::human_bytes(bytes).c_str(), seconds, bytes / seconds / 1e6);
  return 0;
}

// Random batches (uniform, with replacement) read through a SampleSource, as training would.
int bench(int argc, char** argv) {
  const Args a(argc, argv, 2,
               {{"--split", 1},
                {"--batch", 1},
                {"--seconds", 1},
                {"--cache-mib", 1},
                {"--cold", 0},
                {"--seed", 1},
                {"--context", 1}});
  if (a.positional.size() != 1) throw UsageError("bench takes one FILE");
  const std::string file = a.positional[0];
  const std::string split = a.value("--split", "train");
  const auto batch = static_cast<std::size_t>(a.number("--batch", 64, 1, 1 << 20));
  const double seconds = static_cast<double>(a.number("--seconds", 5, 1, 3600));
  const auto cache = static_cast<std::size_t>(a.number("--cache-mib", 64, 0, 1 << 20)) << 20;
  const int context = static_cast<int>(a.number("--context", 256, 1, 1 << 24));
  if (a.has("--cold")) {  // drop this file's pages from the page cache (only this file's)
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      ::fdatasync(fd);
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      ::close(fd);
    }
  }
  const bool tokens = data_kind(file) == DataKind::kTokens;
  if (!tokens && a.has("--context")) throw UsageError("--context goes with token files; " + file + " holds images");
  std::string what;   // the set, for the report
  double stored = 0;  // bytes a sample occupies as stored
  std::unique_ptr<SampleSource> source;
  if (tokens) {
    const TokenSplitHeader h = read_token_header(file, split);
    source = open_token_source(file, split, context, cache);
    what = drt::str(h.count, " tokens (", h.storage.type, "), windows of ", context, ", chunks ",
                    h.storage.chunk.empty() ? "none (contiguous)" : shape_text(h.storage.chunk));
    stored = static_cast<double>(context) * static_cast<double>(h.storage.storage_bytes) / static_cast<double>(h.count);
  } else {
    const SplitHeader h = read_split_header(file, split);
    source = open_hdf5_source(file, split, cache);
    what =
        drt::str(h.count, " samples of ", h.channels, "x", h.height, "x", h.width, " ", pixel_type_name(h.pixel_type),
                 ", chunks ", h.images.chunk.empty() ? "none (contiguous)" : shape_text(h.images.chunk));
    stored = static_cast<double>(source->info().sample_floats() * pixel_bytes(h.pixel_type));
  }
  const SourceInfo& info = source->info();
  const std::size_t floats = info.sample_floats();
  std::vector<float> images(batch * floats);
  std::vector<std::int32_t> labels(batch * static_cast<std::size_t>(info.targets));
  std::vector<std::int64_t> indices(batch);
  std::mt19937_64 rng(static_cast<std::uint64_t>(a.number("--seed", 1, 0, std::numeric_limits<long long>::max())));
  const auto count = static_cast<std::uint64_t>(info.count);
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  double elapsed = 0, first_batch = 0;
  std::int64_t batches = 0;
  std::vector<double> times;
  while (elapsed < seconds) {
    for (auto& i : indices) i = static_cast<std::int64_t>(rng() % count);
    const auto t0 = Clock::now();
    source->read(indices, images.data(), labels.data());
    const double t = std::chrono::duration<double>(Clock::now() - t0).count();
    if (batches == 0) first_batch = t;
    times.push_back(t);
    ++batches;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  }
  std::sort(times.begin(), times.end());
  const double samples = static_cast<double>(batches) * static_cast<double>(batch);
  std::printf("%s:/%s: %s, cache %s%s\n", file.c_str(), split.c_str(), what.c_str(),
              drt::human_bytes(static_cast<double>(cache)).c_str(),
              a.has("--cold") ? ", page cache dropped first" : "");
  std::printf("%lld random batches of %zu in %.2f s: %.0f samples/s, %.1f MB/s %s, %.1f MB/s of "
              "float output; per batch median %.3f ms, p99 %.3f ms, first %.3f ms\n",
              static_cast<long long>(batches), batch, elapsed, samples / elapsed, samples * stored / elapsed / 1e6,
              tokens ? "of tokens as stored (with filters)" : "of pixels as stored",
              samples * static_cast<double>(floats) * 4 / elapsed / 1e6, times[times.size() / 2] * 1e3,
              times[std::min(times.size() - 1, times.size() * 99 / 100)] * 1e3, first_batch * 1e3);
  return 0;
}

// The samples of every step of a training run (EpochPlan, as drtrain's data loader takes them).
int plan(int argc, char** argv) {
  const Args a(argc, argv, 2,
               {{"--count", 1},
                {"--context", 1},
                {"--split", 1},
                {"--batch", 1},
                {"--seed", 1},
                {"--epoch", 1},
                {"--steps", 1},
                {"--workers", 1},
                {"--towers", 1},
                {"--json", 0}});
  const int kMaxCount = std::numeric_limits<int>::max();
  std::int64_t count = 0;
  std::string what;
  if (a.has("--count")) {
    if (!a.positional.empty()) throw UsageError("plan takes FILE or --count N, not both");
    if (a.has("--context") || a.has("--split")) throw UsageError("--context and --split go with FILE, not --count");
    count = a.number("--count", 0, 1, kMaxCount);
    what = drt::str(count, " samples");
  } else {
    if (a.positional.size() != 1) throw UsageError("plan takes one FILE (or --count N)");
    const std::string file = a.positional[0];
    const std::string split = a.value("--split", "train");
    if (data_kind(file) == DataKind::kTokens) {
      if (!a.has("--context")) throw UsageError(file + " holds a token stream: pass --context T (drtrain's --context)");
      const int context = static_cast<int>(a.number("--context", 0, 1, 1 << 24));
      count = open_token_source(file, split, context, 0)->info().count;
      what = drt::str(count, " windows of ", context, " tokens in ", file, ":/", split);
    } else {
      if (a.has("--context")) throw UsageError("--context goes with token files; " + file + " holds images");
      count = read_split_header(file, split).count;
      what = drt::str(count, " samples in ", file, ":/", split);
    }
    if (count > kMaxCount) throw UsageError(drt::str(what, ": more than ", kMaxCount, " samples"));
  }
  if (!a.has("--batch")) throw UsageError("plan needs --batch B (drtrain's --batch-size)");
  const int batch = static_cast<int>(a.number("--batch", 0, 1, kMaxCount));
  const auto seed = static_cast<std::uint64_t>(a.number("--seed", 1, 0, std::numeric_limits<long long>::max()));
  const int first_epoch = static_cast<int>(a.number("--epoch", 0, 0, kMaxCount));
  const int workers = static_cast<int>(a.number("--workers", 1, 1, 1 << 20));
  const int towers = static_cast<int>(a.number("--towers", 1, 1, 1 << 20));
  const bool json = a.has("--json");
  std::optional<EpochPlan> epoch_plan;
  try {
    epoch_plan.emplace(static_cast<int>(count), batch, workers, towers, seed, first_epoch);
  } catch (const drt::ConfigError& e) {
    throw UsageError(e.what());
  }
  const std::int64_t per_epoch = epoch_plan->steps();
  const std::int64_t steps = a.number("--steps", per_epoch, 0, std::numeric_limits<long long>::max());
  if (!json)
    std::printf("# %s, global batch %d (%d worker(s) x %d tower(s)), seed %llu: %lld steps per epoch; per step: the "
                "global step, epoch, step in the epoch, the samples in part order%s\n",
                what.c_str(), batch, workers, towers, static_cast<unsigned long long>(seed),
                static_cast<long long>(per_epoch), workers * towers > 1 ? " (parts separated by |)" : "");
  std::string line;
  for (std::int64_t k = 0; k < steps; ++k) {
    const std::int64_t in_epoch = k % per_epoch;
    const int epoch = static_cast<int>(first_epoch + k / per_epoch);
    if (k > 0 && in_epoch == 0) epoch_plan.emplace(static_cast<int>(count), batch, workers, towers, seed, epoch);
    const int step = static_cast<int>(in_epoch);
    const std::int64_t global = static_cast<std::int64_t>(epoch) * per_epoch + in_epoch;
    line = json ? drt::str("{\"step\":", global, ",\"epoch\":", epoch, ",\"step_in_epoch\":", step, ",\"samples\":[")
                : drt::str("step ", global, " epoch ", epoch, " step_in_epoch ", step, ":");
    const std::vector<int> samples = epoch_plan->global_samples(step);
    std::size_t at = 0;
    for (int w = 0; w < workers; ++w)
      for (int t = 0; t < towers; ++t) {
        const std::size_t part = epoch_plan->samples(step, w, t).size();
        if (!json && (w > 0 || t > 0)) line += " |";
        for (std::size_t i = 0; i < part; ++i, ++at) {
          if (json) line += at > 0 ? "," : "";
          else line += " ";
          line += std::to_string(samples[at]);
        }
      }
    line += json ? "]}\n" : "\n";
    std::fputs(line.c_str(), stdout);
  }
  return 0;
}

int run(int argc, char** argv) {
  if (drt::apps::answer_help_or_version(argc, argv, "drtrain-data", kUsage)) return 0;  // also convert --help
  if (argc < 2) throw UsageError("missing command");
  const std::string command = argv[1];
  if (command == "convert") return convert(argc, argv);
  if (command == "info") return info(argc, argv);
  if (command == "verify") return verify(argc, argv);
  if (command == "synth") return synth(argc, argv);
  if (command == "bench") return bench(argc, argv);
  if (command == "plan") return plan(argc, argv);
  throw UsageError("unknown command '" + command + "'");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "drtrain-data: %s\n%s", e.what(), kUsage);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "drtrain-data: error: %s\n", e.what());
    return 1;
  }
}
