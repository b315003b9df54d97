#include "im2col.hpp"

#include <algorithm>
#include <cstring>

namespace drt::backend {

void im2col(const Conv2dShape& s, const float* x, float* col, int columns, int first_column) {
  const int oh = s.out_height(), ow = s.out_width();
  for (int c = 0; c < s.in_channels; ++c)
    for (int ki = 0; ki < s.kernel; ++ki)
      for (int kj = 0; kj < s.kernel; ++kj) {
        const std::size_t row = (static_cast<std::size_t>(c) * s.kernel + ki) * s.kernel + kj;
        float* out = col + row * static_cast<std::size_t>(columns) + first_column;
        const float* plane = x + static_cast<std::size_t>(c) * s.height * s.width;
        for (int r = 0; r < oh; ++r) {
          const int in_r = r * s.stride - s.pad + ki;
          float* dst = out + static_cast<std::size_t>(r) * ow;
          if (in_r < 0 || in_r >= s.height) {
            std::fill(dst, dst + ow, 0.0f);
            continue;
          }
          const float* src = plane + static_cast<std::size_t>(in_r) * s.width;
          if (s.stride == 1) {
            // Columns q with 0 <= q - pad + kj < width are copied in one run; the rest are zero.
            const int q0 = std::clamp(s.pad - kj, 0, ow), q1 = std::clamp(s.width + s.pad - kj, q0, ow);
            std::fill(dst, dst + q0, 0.0f);
            std::memcpy(dst + q0, src + q0 - s.pad + kj, sizeof(float) * static_cast<std::size_t>(q1 - q0));
            std::fill(dst + q1, dst + ow, 0.0f);
          } else {
            for (int q = 0; q < ow; ++q) {
              const int in_q = q * s.stride - s.pad + kj;
              dst[q] = in_q >= 0 && in_q < s.width ? src[in_q] : 0.0f;
            }
          }
        }
      }
}

void col2im_add(const Conv2dShape& s, const float* col, int columns, int first_column, float* dx) {
  const int oh = s.out_height(), ow = s.out_width();
  for (int c = 0; c < s.in_channels; ++c)
    for (int ki = 0; ki < s.kernel; ++ki)
      for (int kj = 0; kj < s.kernel; ++kj) {
        const std::size_t row = (static_cast<std::size_t>(c) * s.kernel + ki) * s.kernel + kj;
        const float* in = col + row * static_cast<std::size_t>(columns) + first_column;
        float* plane = dx + static_cast<std::size_t>(c) * s.height * s.width;
        for (int r = 0; r < oh; ++r) {
          const int in_r = r * s.stride - s.pad + ki;
          if (in_r < 0 || in_r >= s.height) continue;
          const float* src = in + static_cast<std::size_t>(r) * ow;
          float* dst = plane + static_cast<std::size_t>(in_r) * s.width;
          for (int q = 0; q < ow; ++q) {
            const int in_q = q * s.stride - s.pad + kj;
            if (in_q >= 0 && in_q < s.width) dst[in_q] += src[q];
          }
        }
      }
}

}  // namespace drt::backend
