#include "cpu_pooling.hpp"

#include <algorithm>

namespace drt::backend::cpu {
namespace {

// The input cells [begin, end) of one window along one axis: output index o's window starts at
// o * stride - pad; the padded cells outside [0, size) are cut off. Pool2dShape's pad <= window / 2
// leaves every window at least one real cell.
struct Span {
  int begin, end;
};
Span window_span(int o, int stride, int pad, int window, int size) {
  const int start = o * stride - pad;
  return {std::max(start, 0), std::min(start + window, size)};
}

std::size_t planes_of(const Pool2dShape& s) { return static_cast<std::size_t>(s.batch) * s.channels; }
std::size_t in_plane(const Pool2dShape& s) { return static_cast<std::size_t>(s.height) * s.width; }
std::size_t out_plane(const Pool2dShape& s) { return static_cast<std::size_t>(s.out_height()) * s.out_width(); }

// The common 2x2 window, stride 2, no padding: branch-free selects (random data would defeat the
// branch predictor). The first maximum in row-major window order wins, as in torch.
void maxpool_2x2(const Pool2dShape& s, const float* in, float* out, std::int32_t* arg, std::int32_t base) {
  const int oh = s.out_height(), ow = s.out_width(), w = s.width;
  for (int r = 0; r < oh; ++r) {
    const float* top = in + static_cast<std::size_t>(2 * r) * w;
    const float* bottom = top + w;
    const std::int32_t row = base + 2 * r * w;
    float* o = out + static_cast<std::size_t>(r) * ow;
    std::int32_t* a = arg + static_cast<std::size_t>(r) * ow;
    for (int c = 0; c < ow; ++c) {
      const int left = 2 * c;  // the window's left column
      const float t0 = top[left], t1 = top[left + 1], b0 = bottom[left], b1 = bottom[left + 1];
      const bool right_top = t1 > t0, right_bottom = b1 > b0;
      const float upper = right_top ? t1 : t0, lower = right_bottom ? b1 : b0;
      const std::int32_t upper_at = left + (right_top ? 1 : 0);
      const std::int32_t lower_at = w + left + (right_bottom ? 1 : 0);
      const bool take_lower = lower > upper;
      o[c] = take_lower ? lower : upper;
      a[c] = row + (take_lower ? lower_at : upper_at);
    }
  }
}

// Any window, stride and padding: the search starts at the window's first real cell, so a padded
// cell never wins (not even over -inf).
void maxpool_any(const Pool2dShape& s, const float* in, float* out, std::int32_t* arg, std::int32_t base) {
  const int oh = s.out_height(), ow = s.out_width();
  for (int r = 0; r < oh; ++r) {
    const Span rows = window_span(r, s.stride, s.pad, s.window, s.height);
    for (int q = 0; q < ow; ++q) {
      const Span cols = window_span(q, s.stride, s.pad, s.window, s.width);
      int at = rows.begin * s.width + cols.begin;
      float best = in[at];
      for (int i = rows.begin; i < rows.end; ++i)
        for (int j = cols.begin; j < cols.end; ++j) {
          const int idx = i * s.width + j;
          if (in[idx] > best) {
            best = in[idx];
            at = idx;
          }
        }
      out[r * ow + q] = best;
      arg[r * ow + q] = base + at;
    }
  }
}

}  // namespace

void maxpool2d_forward(const Pool2dShape& s, const float* x, float* y, std::int32_t* argmax) {
  const bool fast = s.window == 2 && s.stride == 2 && s.pad == 0;
  for (std::size_t pl = 0; pl < planes_of(s); ++pl) {
    const float* in = x + pl * in_plane(s);
    float* out = y + pl * out_plane(s);
    std::int32_t* arg = argmax + pl * out_plane(s);
    const auto base = static_cast<std::int32_t>(pl * in_plane(s));
    if (fast) maxpool_2x2(s, in, out, arg, base);
    else maxpool_any(s, in, out, arg, base);
  }
}

void maxpool2d_backward(const Pool2dShape& s, const float* dy, const std::int32_t* argmax, float* dx) {
  const std::size_t inputs = planes_of(s) * in_plane(s), outputs = planes_of(s) * out_plane(s);
  std::fill(dx, dx + inputs, 0.0f);
  for (std::size_t o = 0; o < outputs; ++o) dx[argmax[o]] += dy[o];
}

// count_include_pad: every window divides by window * window, however many real cells it has.
void avgpool2d_forward(const Pool2dShape& s, const float* x, float* y) {
  const int oh = s.out_height(), ow = s.out_width();
  const float area = static_cast<float>(s.window * s.window);
  for (std::size_t pl = 0; pl < planes_of(s); ++pl) {
    const float* in = x + pl * in_plane(s);
    float* out = y + pl * out_plane(s);
    for (int r = 0; r < oh; ++r) {
      const Span rows = window_span(r, s.stride, s.pad, s.window, s.height);
      for (int q = 0; q < ow; ++q) {
        const Span cols = window_span(q, s.stride, s.pad, s.window, s.width);
        float sum = 0.0f;
        for (int i = rows.begin; i < rows.end; ++i)
          for (int j = cols.begin; j < cols.end; ++j) sum += in[i * s.width + j];
        out[r * ow + q] = sum / area;
      }
    }
  }
}

void avgpool2d_backward(const Pool2dShape& s, const float* dy, float* dx) {
  const int oh = s.out_height(), ow = s.out_width();
  const float area = static_cast<float>(s.window * s.window);
  std::fill(dx, dx + planes_of(s) * in_plane(s), 0.0f);
  for (std::size_t pl = 0; pl < planes_of(s); ++pl) {
    const float* grad = dy + pl * out_plane(s);
    float* in = dx + pl * in_plane(s);
    for (int r = 0; r < oh; ++r) {
      const Span rows = window_span(r, s.stride, s.pad, s.window, s.height);
      for (int q = 0; q < ow; ++q) {
        const Span cols = window_span(q, s.stride, s.pad, s.window, s.width);
        const float g = grad[r * ow + q] / area;
        for (int i = rows.begin; i < rows.end; ++i)
          for (int j = cols.begin; j < cols.end; ++j) in[i * s.width + j] += g;
      }
    }
  }
}

// The plane's sum in double: a plane may hold thousands of values.
void global_avgpool_forward(const float* x, float* y, std::size_t planes, std::size_t plane_size) {
  for (std::size_t p = 0; p < planes; ++p) {
    const float* in = x + p * plane_size;
    double sum = 0.0;
    for (std::size_t i = 0; i < plane_size; ++i) sum += in[i];
    y[p] = static_cast<float>(sum / static_cast<double>(plane_size));
  }
}

void global_avgpool_backward(const float* dy, float* dx, std::size_t planes, std::size_t plane_size) {
  for (std::size_t p = 0; p < planes; ++p) {
    const float g = dy[p] / static_cast<float>(plane_size);
    std::fill(dx + p * plane_size, dx + (p + 1) * plane_size, g);
  }
}

}  // namespace drt::backend::cpu
