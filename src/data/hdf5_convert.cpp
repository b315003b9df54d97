#include "drtrain/data/hdf5_convert.hpp"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/data/dataset.hpp"
#include "drtrain/data/hdf5_writer.hpp"
#include "drtrain/data/npy_file.hpp"

namespace drt::data {

namespace {

namespace fs = std::filesystem;

// Bytes of images an append carries (a whole number of chunks, at least one).
constexpr std::size_t kBlockBytes = std::size_t{16} << 20;

std::int64_t block_samples(const Hdf5Writer& writer, std::size_t sample_bytes) {
  const std::int64_t chunk = writer.chunk_samples();
  const std::size_t chunk_bytes = static_cast<std::size_t>(chunk) * sample_bytes;
  return chunk * static_cast<std::int64_t>(std::max<std::size_t>(1, kBlockBytes / chunk_bytes));
}

// DIR/PREFIX-KIND-idxD-ubyte with or without .gz (or with a '.' before idx, as some copies
// name them); "" when none exists.
std::string find_idx(const std::string& dir, const std::string& prefix, const std::string& kind, int dims,
                     std::vector<std::string>& looked_for) {
  const std::string base = str(prefix, "-", kind, "-idx", dims, "-ubyte");
  const std::string dotted = str(prefix, "-", kind, ".idx", dims, "-ubyte");
  looked_for.push_back(base + "(.gz)");
  for (const std::string& name : {base + ".gz", base, dotted + ".gz", dotted}) {
    const fs::path path = fs::path(dir) / name;
    std::error_code ec;
    if (fs::is_regular_file(path, ec)) return path.string();
  }
  return "";
}

WriterOptions writer_options(const ConvertOptions& options, std::int64_t classes, const std::string& source) {
  WriterOptions w;
  w.classes = classes;
  w.class_names = options.class_names;
  w.source = source;
  w.compress_level = options.compress_level;
  w.chunk_bytes = options.chunk_bytes;
  w.normalize = options.normalize;
  return w;
}

struct NpySplit {
  std::string name;
  NpyPair paths;
  std::unique_ptr<NpyFile> images, labels;
  SplitShape shape;
  std::vector<std::int64_t> label_values;
};

void open_npy_split(NpySplit& s, std::optional<Layout> layout) {
  s.images = std::make_unique<NpyFile>(s.paths.images);
  s.labels = std::make_unique<NpyFile>(s.paths.labels);
  const NpyFile& x = *s.images;
  const std::string& xp = s.paths.images;
  if (x.kind() == 'u' && x.item_size() == 1) s.shape.pixel_type = PixelType::kUint8;
  else if (x.kind() == 'f' && x.item_size() == 4) s.shape.pixel_type = PixelType::kFloat32;
  else
    throw ConfigError(str(xp, ": images of dtype ", x.dtype_name(),
                          "; drtrain stores uint8 (pixels 0..255) or float32: save them as one of those (numpy: "
                          "np.save(path, x.astype('float32')))"));
  const std::vector<std::int64_t>& d = x.shape();
  if (d.size() == 3) {
    s.shape.channels = 1;
    s.shape.height = static_cast<int>(std::min<std::int64_t>(d[1], 1 << 30));
    s.shape.width = static_cast<int>(std::min<std::int64_t>(d[2], 1 << 30));
    s.shape.layout = Layout::kNCHW;
  } else if (d.size() == 4) {
    if (!layout)
      throw ConfigError(str(xp, ": a 4-D image array [", d[0], ", ", d[1], ", ", d[2], ", ", d[3],
                            "]: say how its axes are ordered with --layout NCHW or NHWC"));
    const bool nchw = *layout == Layout::kNCHW;
    s.shape.layout = *layout;
    s.shape.channels = static_cast<int>(std::min<std::int64_t>(nchw ? d[1] : d[3], 1 << 30));
    s.shape.height = static_cast<int>(std::min<std::int64_t>(nchw ? d[2] : d[1], 1 << 30));
    s.shape.width = static_cast<int>(std::min<std::int64_t>(nchw ? d[3] : d[2], 1 << 30));
  } else {
    throw ConfigError(str(xp, ": images of rank ", d.size(),
                          "; expected [N, H, W] (one channel) or [N, C, H, W] / [N, H, W, C] with --layout"));
  }
  s.shape.count = x.rows();
  if (s.shape.count < 1 || s.shape.channels < 1 || s.shape.height < 1 || s.shape.width < 1)
    throw ConfigError(str(xp, ": the image array is empty (a zero-sized axis)"));

  const NpyFile& y = *s.labels;
  const std::string& yp = s.paths.labels;
  if (y.kind() != 'u' && y.kind() != 'i')
    throw ConfigError(
        str(yp, ": labels of dtype ", y.dtype_name(), "; labels must be integers (numpy: y.astype('int64'))"));
  if (y.shape().size() != 1)
    throw ConfigError(str(yp, ": labels of rank ", y.shape().size(), "; expected [N] (numpy: y.reshape(-1))"));
  if (y.rows() != s.shape.count)
    throw ConfigError(str(yp, ": ", y.rows(), " labels, but ", xp, " holds ", s.shape.count,
                          " images; there must be one label per image"));
  s.label_values = y.read_integers(0, y.rows());
  for (std::size_t i = 0; i < s.label_values.size(); ++i)
    if (s.label_values[i] < 0)
      throw ConfigError(str(yp, ": label ", s.label_values[i], " at index ", i, " is negative; labels lie in [0, K)"));
}

}  // namespace

void convert_idx(const std::string& dir, const std::string& out, const ConvertOptions& options) {
  std::vector<std::string> looked_for;
  struct Pair {
    std::string split, images, labels;
  };
  std::vector<Pair> pairs;
  for (const auto& [split, prefix] : {std::pair<const char*, const char*>{"train", "train"}, {"test", "t10k"}}) {
    const std::string images = find_idx(dir, prefix, "images", 3, looked_for);
    const std::string labels = find_idx(dir, prefix, "labels", 1, looked_for);
    if (images.empty() != labels.empty())
      throw ConfigError(str(dir, ": found ", images.empty() ? labels : images, " but not its ",
                            images.empty() ? "images" : "labels", " (",
                            looked_for[looked_for.size() - (images.empty() ? 2 : 1)], ")"));
    if (!images.empty()) pairs.push_back({split, images, labels});
  }
  if (pairs.empty()) throw ConfigError(str(dir, ": no IDX files; looked for ", join(looked_for, ", ")));

  // Byte labels: load_idx checks them against the classes given (or 256).
  const int limit = options.classes > 0 ? static_cast<int>(std::min<std::int64_t>(options.classes, 256)) : 256;
  std::vector<Dataset> sets;
  std::int64_t classes = options.classes;
  for (const Pair& p : pairs) {
    sets.push_back(load_idx(p.images, p.labels, limit));
    if (options.classes == 0)
      for (std::uint8_t label : sets.back().labels) classes = std::max<std::int64_t>(classes, label + 1);
  }
  Hdf5Writer writer(out, writer_options(options, classes, "IDX files in " + dir));
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const Dataset& d = sets[i];
    writer.begin_split(pairs[i].split, SplitShape{d.count, 1, d.rows, d.cols, PixelType::kUint8, Layout::kNCHW});
    const std::int64_t block = block_samples(writer, d.image_size());
    std::vector<std::int64_t> labels;
    for (std::int64_t first = 0; first < d.count; first += block) {
      const std::int64_t n = std::min<std::int64_t>(block, d.count - first);
      labels.assign(d.labels.begin() + first, d.labels.begin() + first + n);
      writer.append(d.pixels.data() + static_cast<std::size_t>(first) * d.image_size(), labels.data(), n);
    }
  }
  writer.commit();
}

void convert_npy(const NpyPair& train, const std::optional<NpyPair>& test, std::optional<Layout> layout,
                 const std::string& out, const ConvertOptions& options) {
  std::vector<NpySplit> splits(test ? 2 : 1);
  splits[0].name = "train";
  splits[0].paths = train;
  if (test) {
    splits[1].name = "test";
    splits[1].paths = *test;
  }
  std::int64_t classes = options.classes;
  for (NpySplit& s : splits) {
    open_npy_split(s, layout);
    if (options.classes == 0) {
      for (std::int64_t label : s.label_values) classes = std::max(classes, label + 1);
    } else {
      for (std::size_t i = 0; i < s.label_values.size(); ++i)
        if (s.label_values[i] >= options.classes)
          throw ConfigError(str(s.paths.labels, ": label ", s.label_values[i], " at index ", i,
                                " is not below the number of classes (--classes ", options.classes, ")"));
    }
  }
  if (test) {
    const SplitShape &a = splits[0].shape, &b = splits[1].shape;
    if (a.channels != b.channels || a.height != b.height || a.width != b.width || a.pixel_type != b.pixel_type)
      throw ConfigError(str(test->images, ": test samples of ", b.channels, "x", b.height, "x", b.width, " ",
                            pixel_type_name(b.pixel_type), ", but the train samples (", train.images, ") are ",
                            a.channels, "x", a.height, "x", a.width, " ", pixel_type_name(a.pixel_type),
                            "; both splits must have one sample shape and type"));
  }
  Hdf5Writer writer(out, writer_options(options, classes, "NumPy arrays " + train.images));
  for (NpySplit& s : splits) {
    writer.begin_split(s.name, s.shape);
    const std::size_t sample_bytes = s.images->row_bytes();
    const std::int64_t block = block_samples(writer, sample_bytes);
    std::vector<unsigned char> buffer(static_cast<std::size_t>(std::min(block, s.shape.count)) * sample_bytes);
    for (std::int64_t first = 0; first < s.shape.count; first += block) {
      const std::int64_t n = std::min(block, s.shape.count - first);
      s.images->read_rows(first, n, buffer.data());
      writer.append(buffer.data(), s.label_values.data() + first, n);
    }
  }
  writer.commit();
}

}  // namespace drt::data
