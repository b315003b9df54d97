// drtrain-data: make, inspect and check data sets in drtrain's HDF5 format (docs/DATA_FORMAT.md).
//   drtrain-data convert --idx DIR OUT.h5 [options]            MNIST-style IDX pairs (train-*, t10k-*)
//   drtrain-data convert --npy X.npy Y.npy [--test-npy X Y] [--layout NCHW|NHWC] OUT.h5 [options]
//       options: --classes K, --class-names A,B,..., --normalize, --compress LEVEL, --chunk-kib K
//   drtrain-data info FILE                                     header, storage, samples per class
//   drtrain-data verify FILE                                   reads every chunk and label back
//   drtrain-data synth OUT.h5 --count N --shape C,H,W [...]    a synthetic set of any size
//   drtrain-data bench FILE [--batch B] [...]                  random-batch read throughput
// Exit status: 0 fine, 1 a bad or unreadable file (verify: a problem found), 2 bad usage.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/data/hdf5_convert.hpp"
#include "drtrain/data/hdf5_format.hpp"
#include "drtrain/data/hdf5_source.hpp"
#include "drtrain/data/synthetic_hdf5.hpp"

namespace {

using namespace drt::data;  // NOLINT(google-build-using-namespace): a program over this one library

constexpr const char* kUsage =
    "usage: drtrain-data convert --idx DIR OUT.h5 [options]\n"
    "       drtrain-data convert --npy TRAIN_X.npy TRAIN_Y.npy [--test-npy X.npy Y.npy] [--layout NCHW|NHWC] OUT.h5 "
    "[options]\n"
    "           options: --classes K (default: largest label + 1), --class-names A,B,...,\n"
    "                    --normalize (store the train split's per-channel mean/std), --compress LEVEL (gzip 1-9),\n"
    "                    --chunk-kib K (image chunks of about K KiB, default 32)\n"
    "       drtrain-data info FILE\n"
    "       drtrain-data verify FILE\n"
    "       drtrain-data synth OUT.h5 --count N --shape C,H,W [--classes K] [--test-count M] [--dtype uint8|float32]\n"
    "                          [--layout NCHW|NHWC] [--seed S] [--normalize] [--compress LEVEL] [--chunk-kib K]\n"
    "       drtrain-data bench FILE [--split train|test] [--batch B] [--seconds S] [--cache-mib M] [--cold] [--seed "
    "S]\n"
    "The format: docs/DATA_FORMAT.md. Exit status: 0 fine, 1 a bad file, 2 bad usage.\n";

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Positional arguments and --options, each option taking a fixed number of values.
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
      for (int v = 0; v < spec->second; ++v) {
        if (i + 1 >= argc) throw UsageError(drt::str(arg, " needs ", spec->second, " value(s)"));
        values.emplace_back(argv[++i]);
      }
      options[arg] = values;
    }
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
  for (const std::string& split : list_splits(file)) {
    const SplitHeader h = read_split_header(file, split);
    std::printf("wrote %s:/%s: %lld samples of %dx%dx%d %s (%s), %lld classes%s\n", file.c_str(), split.c_str(),
                static_cast<long long>(h.count), h.channels, h.height, h.width, pixel_type_name(h.pixel_type),
                layout_name(h.layout), static_cast<long long>(h.classes),
                h.mean.empty() ? "" : drt::str(", mean ", floats_text(h.mean), " std ", floats_text(h.stddev)).c_str());
  }
  return 0;
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
                {"--chunk-kib", 1}});
  if (a.has("--idx") == a.has("--npy")) throw UsageError("convert takes --idx DIR or --npy X.npy Y.npy");
  if (a.positional.size() != 1) throw UsageError("convert writes one file: give OUT.h5 once");
  const std::string out = a.positional[0];
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

int info(int argc, char** argv) {
  const Args a(argc, argv, 2, {});
  if (a.positional.size() != 1) throw UsageError("info takes one FILE");
  const std::string file = a.positional[0];
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
               {{"--split", 1}, {"--batch", 1}, {"--seconds", 1}, {"--cache-mib", 1}, {"--cold", 0}, {"--seed", 1}});
  if (a.positional.size() != 1) throw UsageError("bench takes one FILE");
  const std::string file = a.positional[0];
  const std::string split = a.value("--split", "train");
  const auto batch = static_cast<std::size_t>(a.number("--batch", 64, 1, 1 << 20));
  const double seconds = static_cast<double>(a.number("--seconds", 5, 1, 3600));
  const auto cache = static_cast<std::size_t>(a.number("--cache-mib", 64, 0, 1 << 20)) << 20;
  if (a.has("--cold")) {  // drop this file's pages from the page cache (only this file's)
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      ::fdatasync(fd);
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      ::close(fd);
    }
  }
  const SplitHeader h = read_split_header(file, split);
  auto source = open_hdf5_source(file, split, cache);
  const std::size_t floats = source->info().sample_floats();
  std::vector<float> images(batch * floats);
  std::vector<std::int32_t> labels(batch);
  std::vector<std::int64_t> indices(batch);
  std::mt19937_64 rng(static_cast<std::uint64_t>(a.number("--seed", 1, 0, std::numeric_limits<long long>::max())));
  const auto count = static_cast<std::uint64_t>(h.count);
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
  const double stored = static_cast<double>(floats * pixel_bytes(h.pixel_type));
  std::printf("%s:/%s: %lld samples of %dx%dx%d %s, chunks %s, cache %s%s\n", file.c_str(), split.c_str(),
              static_cast<long long>(h.count), h.channels, h.height, h.width, pixel_type_name(h.pixel_type),
              h.images.chunk.empty() ? "none (contiguous)" : shape_text(h.images.chunk).c_str(),
              drt::human_bytes(static_cast<double>(cache)).c_str(),
              a.has("--cold") ? ", page cache dropped first" : "");
  std::printf("%lld random batches of %zu in %.2f s: %.0f samples/s, %.1f MB/s of pixels as stored, %.1f MB/s of "
              "float output; per batch median %.3f ms, p99 %.3f ms, first %.3f ms\n",
              static_cast<long long>(batches), batch, elapsed, samples / elapsed, samples * stored / elapsed / 1e6,
              samples * static_cast<double>(floats) * 4 / elapsed / 1e6, times[times.size() / 2] * 1e3,
              times[std::min(times.size() - 1, times.size() * 99 / 100)] * 1e3, first_batch * 1e3);
  return 0;
}

int run(int argc, char** argv) {
  if (argc < 2) throw UsageError("missing command");
  const std::string command = argv[1];
  if (command == "-h" || command == "--help" || command == "help") {
    std::printf("%s", kUsage);
    return 0;
  }
  if (command == "convert") return convert(argc, argv);
  if (command == "info") return info(argc, argv);
  if (command == "verify") return verify(argc, argv);
  if (command == "synth") return synth(argc, argv);
  if (command == "bench") return bench(argc, argv);
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
