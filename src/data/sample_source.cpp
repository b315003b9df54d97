#include "drtrain/data/sample_source.hpp"

#include <algorithm>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::data {

void sort_request(const SourceInfo& info, const std::vector<std::int64_t>& indices, const char* unit,
                  std::vector<std::pair<std::int64_t, std::int64_t>>& order) {
  order.resize(indices.size());
  for (std::size_t i = 0; i < indices.size(); ++i) {
    const std::int64_t index = indices[i];
    if (index < 0 || index >= info.count)
      throw Error(str(info.name, ": ", unit, " index ", index, " (position ", i, " of the request) is outside [0, ",
                      info.count, ")"));
    order[i] = {index, static_cast<std::int64_t>(i)};
  }
  std::sort(order.begin(), order.end());
}

const std::array<float, 256>& byte_pixel_values() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int v = 0; v < 256; ++v) t[static_cast<std::size_t>(v)] = static_cast<float>(v) / 255.0f;
    return t;
  }();
  return table;
}

}  // namespace drt::data
