#include "drtrain/data/hdf5_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <optional>
#include <vector>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/data/channel_stats.hpp"
#include "hdf5_split.hpp"
#include "publish_file.hpp"

namespace drt::data {

using io::H5Id;

namespace {

constexpr hsize_t kLabelChunk = 65536;

std::size_t count_names(const std::string& names) {
  return static_cast<std::size_t>(std::count(names.begin(), names.end(), ',')) + 1;
}

}  // namespace

struct Hdf5Writer::Impl {
  struct Split {
    std::string name;
    SplitShape shape;
    std::int64_t chunk = 1;  // samples per image chunk
    std::int64_t written = 0;
    H5Id group, images, labels;
  };

  std::string path, temp;
  WriterOptions options;
  H5Id file;
  std::vector<Split> splits;
  std::optional<ChannelStats> stats;  // of the train split, with normalize
  bool committed = false;

  [[noreturn]] void fail(const std::string& object, const std::string& problem) const {
    h5::fail(temp, object, problem);
  }
  Split& current() {
    DRT_ASSERT(!splits.empty(), "Hdf5Writer: append before begin_split");
    return splits.back();
  }
  void check_complete() const {
    if (!splits.empty() && splits.back().written != splits.back().shape.count)
      fail("/" + splits.back().name, str("holds ", splits.back().written, " of its ", splits.back().shape.count,
                                         " samples; append them all before the next split or commit()"));
  }
  void close_checked() {
    for (Split& s : splits)
      for (H5Id* id : {&s.images, &s.labels, &s.group}) {
        const hid_t raw = id->release();
        if (raw >= 0 && H5Oclose(raw) < 0) fail("/" + s.name, str("cannot close: ", io::hdf5_error_stack()));
      }
    const hid_t raw = file.release();
    if (raw >= 0 && H5Fclose(raw) < 0) fail("", str("cannot close (is the disk full?): ", io::hdf5_error_stack()));
  }
};

Hdf5Writer::Hdf5Writer(const std::string& path, const WriterOptions& options) : impl_(std::make_unique<Impl>()) {
  std::lock_guard<std::recursive_mutex> lock(h5::hdf5_mutex());
  io::quiet_hdf5_errors();
  Impl& w = *impl_;
  w.path = path;
  w.temp = path + ".tmp";
  w.options = options;
  if (options.classes < 1 || options.classes > 2147483647)
    throw ConfigError(str(path, ": the number of classes must be in 1..2147483647 (got ", options.classes, ")"));
  if (!options.class_names.empty() && static_cast<std::int64_t>(count_names(options.class_names)) != options.classes)
    throw ConfigError(str(path, ": the class names '", options.class_names, "' are ", count_names(options.class_names),
                          " but there are ", options.classes, " classes; give one comma-separated name per class"));
  if (options.compress_level < 0 || options.compress_level > 9)
    throw ConfigError(str(path, ": the gzip level must be in 0..9 (0: no compression), got ", options.compress_level));
  if (options.chunk_bytes < 1) throw ConfigError(str(path, ": the chunk size must be at least 1 byte"));

  w.file = create_temp_hdf5(w.temp, [&](hid_t file) {
    io::write_attribute(file, "drtrain_dataset", kDataFormatVersion);
    io::write_attribute(file, "classes", options.classes);
    if (!options.class_names.empty()) io::write_attribute(file, "class_names", options.class_names);
    if (!options.source.empty()) io::write_attribute(file, "source", options.source);
  });
}

Hdf5Writer::~Hdf5Writer() {
  if (!impl_ || impl_->committed) return;
  std::lock_guard<std::recursive_mutex> lock(h5::hdf5_mutex());
  impl_->splits.clear();
  impl_->file.reset();
  std::remove(impl_->temp.c_str());
}

const std::string& Hdf5Writer::path() const { return impl_->path; }

void Hdf5Writer::begin_split(const std::string& split, const SplitShape& shape) {
  std::lock_guard<std::recursive_mutex> lock(h5::hdf5_mutex());
  Impl& w = *impl_;
  DRT_ASSERT(!w.committed, "Hdf5Writer: begin_split after commit");
  if (split != "train" && split != "test")
    throw ConfigError(str(w.path, ": no split '", split, "': a data set's splits are train and test"));
  for (const auto& s : w.splits)
    if (s.name == split) throw ConfigError(str(w.path, ": the split ", split, " was written already"));
  w.check_complete();
  if (shape.count < 1 || shape.channels < 1 || shape.height < 1 || shape.width < 1)
    throw ConfigError(str(w.path, ": /", split, ": ", shape.count, " samples of ", shape.channels, "x", shape.height,
                          "x", shape.width, "; every size must be at least 1"));

  Impl::Split s;
  s.name = split;
  s.shape = shape;
  const std::size_t sample_bytes = static_cast<std::size_t>(shape.channels) * static_cast<std::size_t>(shape.height) *
                                   static_cast<std::size_t>(shape.width) * pixel_bytes(shape.pixel_type);
  s.chunk = std::min<std::int64_t>(
      shape.count, std::max<std::int64_t>(1, static_cast<std::int64_t>(w.options.chunk_bytes / sample_bytes)));
  const auto c = static_cast<hsize_t>(shape.channels), h = static_cast<hsize_t>(shape.height),
             wd = static_cast<hsize_t>(shape.width), n = static_cast<hsize_t>(shape.count),
             k = static_cast<hsize_t>(s.chunk);
  const bool nchw = shape.layout == Layout::kNCHW;
  const hsize_t dims[4] = {n, nchw ? c : h, nchw ? h : wd, nchw ? wd : c};
  const hsize_t chunk[4] = {k, dims[1], dims[2], dims[3]};

  s.group = H5Id(DRT_H5_CHECK(H5Gcreate2(w.file, split.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                              "creating group /" + split));
  auto filters = [&](hid_t dcpl) {
    if (w.options.compress_level > 0)
      DRT_H5_CHECK(H5Pset_deflate(dcpl, static_cast<unsigned>(w.options.compress_level)), "H5Pset_deflate");
    DRT_H5_CHECK(H5Pset_fletcher32(dcpl), "H5Pset_fletcher32");  // after gzip: checks the bytes on disk
    DRT_H5_CHECK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER), "H5Pset_fill_time");
  };
  {
    H5Id space(DRT_H5_CHECK(H5Screate_simple(4, dims, nullptr), "H5Screate_simple"));
    H5Id dcpl(DRT_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate"));
    DRT_H5_CHECK(H5Pset_chunk(dcpl, 4, chunk), "H5Pset_chunk");
    filters(dcpl);
    // Room for a few chunks, so that a chunk filled by several appends is written once.
    H5Id dapl(DRT_H5_CHECK(H5Pcreate(H5P_DATASET_ACCESS), "H5Pcreate"));
    DRT_H5_CHECK(H5Pset_chunk_cache(dapl, 521, std::max<std::size_t>(std::size_t{1} << 20, 4 * sample_bytes * k), 1.0),
                 "H5Pset_chunk_cache");
    const hid_t type = shape.pixel_type == PixelType::kUint8 ? H5T_STD_U8LE : H5T_IEEE_F32LE;
    s.images = H5Id(DRT_H5_CHECK(H5Dcreate2(s.group, "images", type, space, H5P_DEFAULT, dcpl, dapl),
                                 "creating /" + split + "/images"));
    io::write_attribute(s.images, "layout", std::string(layout_name(shape.layout)));
  }
  {
    const hsize_t label_chunk = std::min(n, kLabelChunk);
    H5Id space(DRT_H5_CHECK(H5Screate_simple(1, &n, nullptr), "H5Screate_simple"));
    H5Id dcpl(DRT_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate"));
    DRT_H5_CHECK(H5Pset_chunk(dcpl, 1, &label_chunk), "H5Pset_chunk");
    filters(dcpl);
    const hid_t type = w.options.classes <= 256     ? H5T_STD_U8LE
                       : w.options.classes <= 65536 ? H5T_STD_U16LE
                                                    : H5T_STD_I32LE;
    s.labels = H5Id(DRT_H5_CHECK(H5Dcreate2(s.group, "labels", type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT),
                                 "creating /" + split + "/labels"));
  }
  if (w.options.normalize && split == "train") w.stats.emplace(shape.channels);
  w.splits.push_back(std::move(s));
}

std::int64_t Hdf5Writer::chunk_samples() const { return impl_->current().chunk; }

void Hdf5Writer::append(const void* images, const std::int64_t* labels, std::int64_t count) {
  std::lock_guard<std::recursive_mutex> lock(h5::hdf5_mutex());
  Impl& w = *impl_;
  Impl::Split& s = w.current();
  if (count <= 0) return;
  const std::string g = "/" + s.name;
  if (s.written + count > s.shape.count)
    w.fail(g, str("appending ", count, " samples to the ", s.written, " written would exceed the ", s.shape.count,
                  " announced"));
  for (std::int64_t i = 0; i < count; ++i)
    if (labels[i] < 0 || labels[i] >= w.options.classes)
      w.fail(g + "/labels", str("sample ", s.written + i, " has label ", labels[i], ", outside [0, ", w.options.classes,
                                "); pass the right number of classes"));

  const std::size_t plane = static_cast<std::size_t>(s.shape.height) * static_cast<std::size_t>(s.shape.width);
  H5Id space(DRT_H5_CHECK(H5Dget_space(s.images), "H5Dget_space"));
  hsize_t dims[4];
  DRT_H5_CHECK(H5Sget_simple_extent_dims(space, dims, nullptr), "H5Sget_simple_extent_dims");
  const hsize_t start[4] = {static_cast<hsize_t>(s.written), 0, 0, 0};
  const hsize_t size[4] = {static_cast<hsize_t>(count), dims[1], dims[2], dims[3]};
  DRT_H5_CHECK(H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, size, nullptr), "H5Sselect_hyperslab");
  H5Id memory(DRT_H5_CHECK(H5Screate_simple(4, size, nullptr), "H5Screate_simple"));
  const hid_t type = s.shape.pixel_type == PixelType::kUint8 ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT;
  const std::string range = str("samples ", s.written, "..", s.written + count - 1);
  if (H5Dwrite(s.images, type, memory, space, H5P_DEFAULT, images) < 0)
    w.fail(g + "/images", str("cannot write ", range, ": ", io::hdf5_error_stack(), "; is the disk full?"));

  H5Id label_space(DRT_H5_CHECK(H5Dget_space(s.labels), "H5Dget_space"));
  DRT_H5_CHECK(H5Sselect_hyperslab(label_space, H5S_SELECT_SET, start, nullptr, size, nullptr), "H5Sselect_hyperslab");
  H5Id label_memory(DRT_H5_CHECK(H5Screate_simple(1, size, nullptr), "H5Screate_simple"));
  if (H5Dwrite(s.labels, H5T_NATIVE_INT64, label_memory, label_space, H5P_DEFAULT, labels) < 0)
    w.fail(g + "/labels", str("cannot write ", range, ": ", io::hdf5_error_stack(), "; is the disk full?"));

  if (w.stats && s.name == "train") {
    if (s.shape.pixel_type == PixelType::kUint8)
      w.stats->add(static_cast<const std::uint8_t*>(images), count, plane, s.shape.layout);
    else w.stats->add(static_cast<const float*>(images), count, plane, s.shape.layout);
  }
  s.written += count;
}

void Hdf5Writer::commit() {
  std::lock_guard<std::recursive_mutex> lock(h5::hdf5_mutex());
  Impl& w = *impl_;
  DRT_ASSERT(!w.committed, "Hdf5Writer: commit twice");
  if (w.splits.empty()) throw ConfigError(str(w.path, ": no split was written; a data set needs train or test"));
  w.check_complete();
  if (w.options.normalize) {
    if (!w.stats)
      throw ConfigError(str(w.path, ": normalisation statistics are computed from the train split, and there is none"));
    const std::vector<float> mean = w.stats->mean(), stddev = w.stats->stddev();
    for (const auto& s : w.splits) {
      const auto c = static_cast<hsize_t>(s.shape.channels);
      H5Id space(DRT_H5_CHECK(H5Screate_simple(1, &c, nullptr), "H5Screate_simple"));
      for (const auto& [name, values] :
           {std::pair<const char*, const std::vector<float>*>{"mean", &mean}, {"std", &stddev}}) {
        H5Id dataset(
            DRT_H5_CHECK(H5Dcreate2(s.group, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                         str("creating /", s.name, "/", name)));
        DRT_H5_CHECK(H5Dwrite(dataset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values->data()),
                     str("writing /", s.name, "/", name));
        io::write_attribute(dataset, "computed_from", std::string("train"));
      }
    }
  }
  w.close_checked();
  publish_file(w.temp, w.path);
  w.committed = true;
}

}  // namespace drt::data
