#include "drtrain/data/hdf5_format.hpp"

#include <algorithm>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "hdf5_split.hpp"

namespace drt::data {

const char* pixel_type_name(PixelType type) { return type == PixelType::kUint8 ? "uint8" : "float32"; }

std::size_t pixel_bytes(PixelType type) { return type == PixelType::kUint8 ? 1 : 4; }

const char* layout_name(Layout layout) { return layout == Layout::kNCHW ? "NCHW" : "NHWC"; }

PixelType parse_pixel_type(const std::string& text, const std::string& what) {
  if (text == "uint8") return PixelType::kUint8;
  if (text == "float32") return PixelType::kFloat32;
  throw ConfigError(str(what, ": unknown pixel type '", text, "'; choices: uint8, float32"));
}

Layout parse_layout(const std::string& text, const std::string& what) {
  if (text == "NCHW") return Layout::kNCHW;
  if (text == "NHWC") return Layout::kNHWC;
  throw ConfigError(str(what, ": unknown layout '", text, "'; choices: NCHW, NHWC"));
}

std::vector<std::string> list_splits(const std::string& file) {
  std::lock_guard<std::recursive_mutex> lock(h5::hdf5_mutex());
  const h5::DataFile data = h5::open_data_file(file);
  std::vector<std::string> splits;
  for (const char* name : {"train", "test"})
    if (h5::has_split(data, name)) splits.emplace_back(name);
  if (splits.empty())
    h5::fail(file, "", "holds neither /train nor /test; a data set has at least one split (docs/DATA_FORMAT.md)");
  return splits;
}

SplitHeader read_split_header(const std::string& file, const std::string& split) {
  std::lock_guard<std::recursive_mutex> lock(h5::hdf5_mutex());
  h5::Split s = h5::open_split(h5::open_data_file(file), split, std::size_t{1} << 20);
  SplitHeader header = s.header;
  s.close();
  return header;
}

std::vector<std::int64_t> count_classes(const std::string& file, const std::string& split) {
  std::lock_guard<std::recursive_mutex> lock(h5::hdf5_mutex());
  h5::Split s = h5::open_split(h5::open_data_file(file), split, std::size_t{1} << 20);
  const std::int64_t count = s.header.count, classes = s.header.classes;
  std::vector<std::int64_t> counts(static_cast<std::size_t>(classes), 0);
  io::H5Id space(DRT_H5_CHECK(H5Dget_space(s.labels), "H5Dget_space"));
  constexpr std::int64_t kBlock = 1 << 20;
  std::vector<std::int64_t> labels(static_cast<std::size_t>(std::min(count, kBlock)));
  // uint64 labels are read as such: converted to int64, those above 2^63 - 1 would be clamped.
  io::H5Id file_type(DRT_H5_CHECK(H5Dget_type(s.labels), "H5Dget_type"));
  const bool uint64 = H5Tget_size(file_type) == 8 && H5Tget_sign(file_type) == H5T_SGN_NONE;
  for (std::int64_t first = 0; first < count; first += kBlock) {
    const hsize_t start = static_cast<hsize_t>(first), n = static_cast<hsize_t>(std::min(kBlock, count - first));
    DRT_H5_CHECK(H5Sselect_hyperslab(space, H5S_SELECT_SET, &start, nullptr, &n, nullptr), "H5Sselect_hyperslab");
    io::H5Id memory(DRT_H5_CHECK(H5Screate_simple(1, &n, nullptr), "H5Screate_simple"));
    if (H5Dread(s.labels, uint64 ? H5T_NATIVE_UINT64 : H5T_NATIVE_INT64, memory, space, H5P_DEFAULT, labels.data()) < 0)
      h5::fail(file, "/" + split + "/labels",
               str("cannot read labels ", first, "..", first + static_cast<std::int64_t>(n) - 1, ": ",
                   io::hdf5_error_stack(), "; the file is damaged: copy or convert it again"));
    for (hsize_t i = 0; i < n; ++i) {
      const std::int64_t label = labels[i];
      if (label < 0 || label >= classes)
        h5::fail_label(s.header, first + static_cast<std::int64_t>(i),
                       uint64 ? std::to_string(static_cast<std::uint64_t>(label)) : std::to_string(label));
      ++counts[static_cast<std::size_t>(label)];
    }
  }
  s.close();
  return counts;
}

}  // namespace drt::data
