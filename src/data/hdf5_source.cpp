#include "drtrain/data/hdf5_source.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>
#include <utility>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "hdf5_split.hpp"

namespace drt::data {

namespace {

using io::H5Id;

// At most this many bytes of images a read (the run buffer); at least one sample.
constexpr std::size_t kRunBytes = std::size_t{4} << 20;

inline float to_float(std::uint8_t v, const std::array<float, 256>& scale) { return scale[v]; }
inline float to_float(float v, const std::array<float, 256>&) { return v; }

// One sample of `channels` x `plane` values from `src` (in `layout`) to float CHW at `dst`.
template <typename T>
void convert_sample(const T* src, float* dst, Layout layout, std::size_t channels, std::size_t plane) {
  const auto& scale = byte_pixel_values();
  if (layout == Layout::kNCHW) {
    const std::size_t n = channels * plane;
    if constexpr (std::is_same_v<T, float>) {
      std::memcpy(dst, src, n * sizeof(float));
    } else {
      for (std::size_t i = 0; i < n; ++i) dst[i] = to_float(src[i], scale);
    }
    return;
  }
  for (std::size_t p = 0; p < plane; ++p)
    for (std::size_t c = 0; c < channels; ++c) dst[c * plane + p] = to_float(src[p * channels + c], scale);
}

class Hdf5Source final : public SampleSource {
 public:
  explicit Hdf5Source(h5::Split split) : split_(std::move(split)) {
    const SplitHeader& h = split_.header;
    info_.name = str(h.file, ":/", h.split);
    info_.count = h.count;
    info_.channels = h.channels;
    info_.height = h.height;
    info_.width = h.width;
    info_.classes = static_cast<int>(h.classes);
    sample_bytes_ = info_.sample_floats() * pixel_bytes(h.pixel_type);
    max_run_ = static_cast<std::int64_t>(std::max<std::size_t>(1, kRunBytes / sample_bytes_));
    image_space_ = H5Id(DRT_H5_CHECK(H5Dget_space(split_.images), "H5Dget_space"));
    label_space_ = H5Id(DRT_H5_CHECK(H5Dget_space(split_.labels), "H5Dget_space"));
    // Labels are read in their own type's native form and widened here: an H5Dread that converts
    // types allocates and clears a 1 MiB conversion buffer every call, which cost more than the
    // read of a cached chunk.
    H5Id file_type(DRT_H5_CHECK(H5Dget_type(split_.labels), "H5Dget_type"));
    label_type_ = H5Id(DRT_H5_CHECK(H5Tget_native_type(file_type, H5T_DIR_ASCEND), "H5Tget_native_type"));
    label_bytes_ = H5Tget_size(label_type_);
    label_signed_ = H5Tget_sign(label_type_) != H5T_SGN_NONE;
    DRT_ASSERT(label_bytes_ == 1 || label_bytes_ == 2 || label_bytes_ == 4 || label_bytes_ == 8,
               str(info_.name, ": labels of ", label_bytes_, " bytes"));
  }
  ~Hdf5Source() override {
    std::lock_guard<std::recursive_mutex> lock(h5::hdf5_mutex());
    image_space_.reset();
    label_space_.reset();
    label_type_.reset();
    split_.close();
  }
  Hdf5Source(const Hdf5Source&) = delete;
  Hdf5Source& operator=(const Hdf5Source&) = delete;

  const SourceInfo& info() const override { return info_; }
  std::vector<float> mean() const override { return split_.header.mean; }
  std::vector<float> stddev() const override { return split_.header.stddev; }

  void read(const std::vector<std::int64_t>& indices, float* images, std::int32_t* labels) override {
    if (indices.empty()) return;
    DRT_ASSERT(images && labels, "SampleSource::read needs image and label buffers");
    sort_request(info_, indices, "sample", order_);

    std::lock_guard<std::recursive_mutex> lock(h5::hdf5_mutex());
    const std::size_t floats = info_.sample_floats();
    std::size_t i = 0;
    while (i < order_.size()) {
      // A run: consecutive (or repeated) indices, at most max_run_ samples.
      const std::int64_t first = order_[i].first;
      std::size_t j = i + 1;
      while (j < order_.size() && order_[j].first - order_[j - 1].first <= 1 && order_[j].first - first < max_run_) ++j;
      const std::int64_t count = order_[j - 1].first - first + 1;
      read_run(first, count);
      for (std::size_t k = i; k < j; ++k) {
        const auto [index, position] = order_[k];
        const std::size_t offset = static_cast<std::size_t>(index - first);
        float* dst = images + static_cast<std::size_t>(position) * floats;
        if (split_.header.pixel_type == PixelType::kUint8)
          convert_sample(run_.data() + offset * sample_bytes_, dst, split_.header.layout,
                         static_cast<std::size_t>(info_.channels), floats / static_cast<std::size_t>(info_.channels));
        else
          convert_sample(reinterpret_cast<const float*>(run_.data()) + offset * floats, dst, split_.header.layout,
                         static_cast<std::size_t>(info_.channels), floats / static_cast<std::size_t>(info_.channels));
        const std::int64_t label = run_label(offset);
        if (label < 0 || label >= info_.classes) h5::fail_label(split_.header, index, label_text(offset));
        labels[position] = static_cast<std::int32_t>(label);
      }
      i = j;
    }
  }

 private:
  // Samples [first, first + count) into run_ (file layout and type) and their labels into
  // run_labels_. The caller holds the HDF5 lock.
  void read_run(std::int64_t first, std::int64_t count) {
    const SplitHeader& h = split_.header;
    run_.resize(static_cast<std::size_t>(count) * sample_bytes_);
    run_labels_.resize(static_cast<std::size_t>(count) * label_bytes_);
    const std::vector<std::int64_t>& dims = h.images.shape;
    const hsize_t start[4] = {static_cast<hsize_t>(first), 0, 0, 0};
    const hsize_t size[4] = {static_cast<hsize_t>(count), static_cast<hsize_t>(dims[1]), static_cast<hsize_t>(dims[2]),
                             static_cast<hsize_t>(dims[3])};
    const auto samples = [&] {
      return count == 1 ? str("sample ", first) : str("samples ", first, "..", first + count - 1);
    };
    DRT_H5_CHECK(H5Sselect_hyperslab(image_space_, H5S_SELECT_SET, start, nullptr, size, nullptr),
                 "H5Sselect_hyperslab");
    H5Id memory(DRT_H5_CHECK(H5Screate_simple(4, size, nullptr), "H5Screate_simple"));
    const hid_t type = h.pixel_type == PixelType::kUint8 ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT;
    if (H5Dread(split_.images, type, memory, image_space_, H5P_DEFAULT, run_.data()) < 0) {
      const std::string stack = io::hdf5_error_stack();
      h5::fail(h.file, "/" + h.split + "/images",
               str("cannot read ", samples(), bad_chunk(first, count), ": ", stack, damaged()));
    }
    H5Id label_memory(DRT_H5_CHECK(H5Screate_simple(1, size, nullptr), "H5Screate_simple"));
    DRT_H5_CHECK(H5Sselect_hyperslab(label_space_, H5S_SELECT_SET, start, nullptr, size, nullptr),
                 "H5Sselect_hyperslab");
    if (H5Dread(split_.labels, label_type_, label_memory, label_space_, H5P_DEFAULT, run_labels_.data()) < 0)
      h5::fail(h.file, "/" + h.split + "/labels",
               str("cannot read the labels of ", samples(), ": ", io::hdf5_error_stack(), damaged()));
  }

  // After a failed read of samples [first, first + count) that spans several chunks: reads them
  // chunk by chunk and names the first chunk that fails, " (the chunk of samples A..B)"; "" when
  // the run lies in one chunk or no single chunk fails.
  std::string bad_chunk(std::int64_t first, std::int64_t count) {
    const SplitHeader& h = split_.header;
    if (h.images.chunk.empty()) return "";
    const std::int64_t k = std::max<std::int64_t>(1, h.images.chunk[0]);
    if (first / k == (first + count - 1) / k) return "";
    const std::vector<std::int64_t>& dims = h.images.shape;
    const hid_t type = h.pixel_type == PixelType::kUint8 ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT;
    for (std::int64_t c = first / k * k; c < first + count; c += k) {
      const std::int64_t begin = std::max(c, first), end = std::min(c + k, first + count);
      const hsize_t start[4] = {static_cast<hsize_t>(begin), 0, 0, 0};
      const hsize_t size[4] = {static_cast<hsize_t>(end - begin), static_cast<hsize_t>(dims[1]),
                               static_cast<hsize_t>(dims[2]), static_cast<hsize_t>(dims[3])};
      H5Sselect_hyperslab(image_space_, H5S_SELECT_SET, start, nullptr, size, nullptr);
      H5Id memory(H5Screate_simple(4, size, nullptr));
      if (H5Dread(split_.images, type, memory, image_space_, H5P_DEFAULT, run_.data()) < 0) {
        H5Eclear2(H5E_DEFAULT);
        return str(" (the chunk of samples ", c, "..", std::min(c + k, h.count) - 1, " is bad)");
      }
    }
    return "";
  }

  // Label `offset` of the run as the file holds it, for an error message.
  std::string label_text(std::size_t offset) const {
    if (label_bytes_ == 8 && !label_signed_)
      return std::to_string(load<std::uint64_t>(run_labels_.data() + offset * label_bytes_));
    return std::to_string(run_label(offset));
  }

  // Label `offset` of the run, widened to int64 (a uint64 above 2^63 - 1 becomes negative and
  // fails the range check).
  std::int64_t run_label(std::size_t offset) const {
    const unsigned char* p = run_labels_.data() + offset * label_bytes_;
    switch (label_bytes_) {
      case 1: return label_signed_ ? std::int64_t{load<std::int8_t>(p)} : std::int64_t{load<std::uint8_t>(p)};
      case 2: return label_signed_ ? std::int64_t{load<std::int16_t>(p)} : std::int64_t{load<std::uint16_t>(p)};
      case 4: return label_signed_ ? std::int64_t{load<std::int32_t>(p)} : std::int64_t{load<std::uint32_t>(p)};
      default: return label_signed_ ? load<std::int64_t>(p) : static_cast<std::int64_t>(load<std::uint64_t>(p));
    }
  }
  template <typename T>
  static T load(const unsigned char* p) {
    T value;
    std::memcpy(&value, p, sizeof value);
    return value;
  }

  std::string damaged() const {
    return str("; the file is damaged (a chunk fails its checksum or cannot be decompressed): check it with "
               "drtrain-data verify ",
               split_.header.file, ", then copy or convert it again");
  }

  h5::Split split_;
  SourceInfo info_;
  std::size_t sample_bytes_ = 0;
  std::int64_t max_run_ = 1;
  H5Id image_space_, label_space_;
  std::vector<std::pair<std::int64_t, std::int64_t>> order_;  // (sample index, position in the request)
  H5Id label_type_;                                           // the labels' native type
  std::size_t label_bytes_ = 8;
  bool label_signed_ = true;
  std::vector<unsigned char> run_;
  std::vector<unsigned char> run_labels_;  // label_bytes_ each
};

}  // namespace

std::unique_ptr<SampleSource> open_hdf5_source(const std::string& file, const std::string& split,
                                               std::size_t cache_bytes) {
  std::lock_guard<std::recursive_mutex> lock(h5::hdf5_mutex());
  return std::make_unique<Hdf5Source>(h5::open_split(h5::open_data_file(file), split, cache_bytes));
}

}  // namespace drt::data
