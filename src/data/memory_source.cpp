#include "drtrain/data/memory_source.hpp"

#include <array>
#include <utility>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::data {
namespace {

class MemorySource final : public SampleSource {
 public:
  explicit MemorySource(Dataset d) : data_(std::move(d)) {
    const std::size_t size = data_.image_size();
    if (data_.count < 0 || data_.pixels.size() < static_cast<std::size_t>(data_.count) * size ||
        data_.labels.size() < static_cast<std::size_t>(data_.count))
      throw Error(str("dataset ", data_.name, " is inconsistent: ", data_.count, " images of ", data_.channels, "x",
                      data_.rows, "x", data_.cols, " but ", data_.pixels.size(), " pixel bytes and ",
                      data_.labels.size(), " labels"));
    info_.name = data_.name;
    info_.count = data_.count;
    info_.channels = data_.channels;
    info_.height = data_.rows;
    info_.width = data_.cols;
    info_.classes = data_.classes;
  }
  const SourceInfo& info() const override { return info_; }

  void read(const std::vector<std::int64_t>& indices, float* images, std::int32_t* labels) override {
    const std::array<float, 256>& scale = byte_pixel_values();
    const std::size_t size = data_.image_size();
    for (std::size_t i = 0; i < indices.size(); ++i) {
      const std::int64_t index = indices[i];
      if (index < 0 || index >= info_.count)
        throw Error(str("sample ", index, " is outside dataset ", data_.name, " of ", info_.count, " images"));
      const std::uint8_t* src = data_.pixels.data() + static_cast<std::size_t>(index) * size;
      float* dst = images + i * size;
      for (std::size_t p = 0; p < size; ++p) dst[p] = scale[src[p]];
      labels[i] = data_.labels[static_cast<std::size_t>(index)];
    }
  }

 private:
  Dataset data_;
  SourceInfo info_;
};

class PrefixSource final : public SampleSource {
 public:
  PrefixSource(std::unique_ptr<SampleSource> inner, std::int64_t count)
      : inner_(std::move(inner)), info_(inner_->info()) {
    info_.count = count;
  }
  const SourceInfo& info() const override { return info_; }
  void read(const std::vector<std::int64_t>& indices, float* images, std::int32_t* labels) override {
    for (std::int64_t index : indices)
      if (index < 0 || index >= info_.count)
        throw Error(str("sample ", index, " is outside the first ", info_.count, " samples of ", info_.name));
    inner_->read(indices, images, labels);
  }
  std::vector<float> mean() const override { return inner_->mean(); }
  std::vector<float> stddev() const override { return inner_->stddev(); }

 private:
  std::unique_ptr<SampleSource> inner_;
  SourceInfo info_;
};

}  // namespace

std::unique_ptr<SampleSource> make_memory_source(Dataset dataset) {
  return std::make_unique<MemorySource>(std::move(dataset));
}

std::unique_ptr<SampleSource> make_prefix_source(std::unique_ptr<SampleSource> source, std::int64_t count) {
  if (count <= 0 || count >= source->info().count) return source;
  return std::make_unique<PrefixSource>(std::move(source), count);
}

}  // namespace drt::data
