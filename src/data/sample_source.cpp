#include "drtrain/data/sample_source.hpp"

namespace drt::data {

const std::array<float, 256>& byte_pixel_values() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int v = 0; v < 256; ++v) t[static_cast<std::size_t>(v)] = static_cast<float>(v) / 255.0f;
    return t;
  }();
  return table;
}

}  // namespace drt::data
