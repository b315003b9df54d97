// The CPU backend. GEMMs go to OpenBLAS (cblas_sgemm, threads set per process); convolution to
// oneDNN (onednn_conv.hpp) when built with it, else im2col + GEMM over groups of images (chosen
// by measuring both against PyTorch, see bench/RESULTS.md); everything else is plain loops the
// compiler vectorises.
#include <cblas.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <utility>

#include "drtrain/backend/backend.hpp"
#include "drtrain/config.hpp"
#include "drtrain/core/clock.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/kernels/reference.hpp"
#include "im2col.hpp"
#if DRT_HAVE_ONEDNN
#include <omp.h>

#include "onednn_conv.hpp"
#endif

namespace drt::backend {
namespace {

// Images per im2col group: the column buffer of a group stays near this many floats, so that
// one large GEMM per group replaces one small GEMM per image without a batch-sized buffer.
constexpr std::size_t kGroupColumnFloats = std::size_t{1} << 21;  // 8 MiB

int group_size(const Conv2dShape& s) {
  const std::size_t per_image = static_cast<std::size_t>(s.in_channels) * s.kernel * s.kernel *
                                static_cast<std::size_t>(s.out_height()) * s.out_width();
  return static_cast<int>(std::clamp<std::size_t>(kGroupColumnFloats / std::max<std::size_t>(per_image, 1), 1,
                                                  static_cast<std::size_t>(std::max(s.batch, 1))));
}

// The im2col + GEMM geometry of a convolution: images per group, output pixels per image, rows
// of the column matrix (in_channels x kernel x kernel), floats per input and output image. The
// workspace holds the group's column matrix, then the group's GEMM output.
struct Im2colGeometry {
  explicit Im2colGeometry(const Conv2dShape& s)
      : group(group_size(s)),
        plane(s.out_height() * s.out_width()),
        rows(s.in_channels * s.kernel * s.kernel),
        in_image(static_cast<std::size_t>(s.in_channels) * s.height * s.width),
        out_image(static_cast<std::size_t>(s.out_channels) * plane) {}
  std::size_t column_floats() const { return static_cast<std::size_t>(rows) * static_cast<std::size_t>(group) * plane; }
  std::size_t workspace_floats(int out_channels) const {
    return static_cast<std::size_t>(group) * plane * (static_cast<std::size_t>(rows) + out_channels);
  }
  int group, plane, rows;
  std::size_t in_image, out_image;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(bool onednn) {
#if DRT_HAVE_ONEDNN
    if (onednn) onednn_ = std::make_unique<OneDnnConv>();
#else
    (void)onednn;
#endif
  }
  std::string name() const override { return onednn() ? "cpu (oneDNN conv)" : "cpu (im2col conv)"; }
  DeviceKind kind() const override { return DeviceKind::kCpu; }

  DeviceBuffer allocate(std::size_t bytes) override {
    if (bytes == 0) return DeviceBuffer(this, nullptr, 0);
    const std::size_t rounded = (bytes + 63) / 64 * 64;
    void* data = std::aligned_alloc(64, rounded);
    if (!data) throw std::bad_alloc();
    std::memset(data, 0, rounded);
    return DeviceBuffer(this, data, bytes);
  }
  void free(void* data) noexcept override { std::free(data); }
  void copy_from_host(void* device, const void* host, std::size_t bytes) override { std::memcpy(device, host, bytes); }
  void copy_to_host(void* host, const void* device, std::size_t bytes) override { std::memcpy(host, device, bytes); }
  void copy(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void zero(void* device, std::size_t bytes) override { std::memset(device, 0, bytes); }
  void synchronize() override {}
  void mark(int slot) override { marks_.at(static_cast<std::size_t>(slot)) = now_seconds(); }
  double seconds_between(int from, int to) override {
    return marks_.at(static_cast<std::size_t>(to)) - marks_.at(static_cast<std::size_t>(from));
  }

  void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, const float* b, float beta,
            float* c) override {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a,
                ta ? m : k, b, tb ? k : n, beta, c, n);
  }

  // The elementwise math is the kernels' CPU references (kernels/reference.cpp), so the GPU
  // kernels are tested against exactly what this backend computes.
  void add_bias_rows(float* y, const float* bias, int rows, int cols) override {
    kernels::ref::add_bias_rows(y, bias, rows, cols);
  }
  void bias_grad_rows(const float* dy, float* grad_bias, int rows, int cols) override {
    kernels::ref::bias_grad_rows(dy, grad_bias, rows, cols);
  }
  void relu_forward(const float* x, float* y, std::size_t n) override { kernels::ref::relu_forward(x, y, n); }
  void relu_backward(const float* y, const float* dy, float* dx, std::size_t n) override {
    kernels::ref::relu_backward(y, dy, dx, n);
  }

  std::size_t conv2d_workspace_floats(const Conv2dShape& s) const override {
    if (onednn()) return 0;  // oneDNN keeps its own buffers per shape
    return Im2colGeometry(s).workspace_floats(s.out_channels);
  }

  void conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y,
                      float* workspace) override {
#if DRT_HAVE_ONEDNN
    if (onednn_) return onednn_->forward(s, x, w, bias, y);
#endif
    const Im2colGeometry geo(s);
    const int g = geo.group, plane = geo.plane, rows = geo.rows;
    const std::size_t in_image = geo.in_image, out_image = geo.out_image;
    for (int n0 = 0; n0 < s.batch; n0 += g) {
      const int count = std::min(g, s.batch - n0);
      const int columns = count * plane;
      float* col = workspace;
      float* out = workspace + geo.column_floats();
      for (int i = 0; i < count; ++i) im2col(s, x + (n0 + i) * in_image, col, columns, i * plane);
      gemm(false, false, s.out_channels, columns, rows, 1.0f, w, col, 0.0f, out);
      // out is [out_channels x (image, pixel)]; y is NCHW.
      for (int i = 0; i < count; ++i)
        for (int oc = 0; oc < s.out_channels; ++oc) {
          const float* src = out + static_cast<std::size_t>(oc) * columns + static_cast<std::size_t>(i) * plane;
          float* dst = y + (n0 + i) * out_image + static_cast<std::size_t>(oc) * plane;
          for (int p = 0; p < plane; ++p) dst[p] = src[p] + bias[oc];
        }
    }
  }

  void conv2d_backward(const Conv2dShape& s, const float* x, const float* w, const float* dy, float* dw, float* dbias,
                       float* dx, float* workspace) override {
#if DRT_HAVE_ONEDNN
    if (onednn_) return onednn_->backward(s, x, w, dy, dw, dbias, dx);
#endif
    const Im2colGeometry geo(s);
    const int g = geo.group, plane = geo.plane, rows = geo.rows;
    const std::size_t in_image = geo.in_image, out_image = geo.out_image;
    std::fill(dbias, dbias + s.out_channels, 0.0f);
    if (dx) std::fill(dx, dx + in_image * static_cast<std::size_t>(s.batch), 0.0f);
    for (int n0 = 0; n0 < s.batch; n0 += g) {
      const int count = std::min(g, s.batch - n0);
      const int columns = count * plane;
      float* col = workspace;
      float* grad_out = workspace + geo.column_floats();
      // dy of the group as [out_channels x (image, pixel)], and the bias gradient.
      for (int i = 0; i < count; ++i)
        for (int oc = 0; oc < s.out_channels; ++oc) {
          const float* src = dy + (n0 + i) * out_image + static_cast<std::size_t>(oc) * plane;
          float* dst = grad_out + static_cast<std::size_t>(oc) * columns + static_cast<std::size_t>(i) * plane;
          float sum = 0.0f;
          for (int p = 0; p < plane; ++p) {
            dst[p] = src[p];
            sum += src[p];
          }
          dbias[oc] += sum;
        }
      for (int i = 0; i < count; ++i) im2col(s, x + (n0 + i) * in_image, col, columns, i * plane);
      // dw (+)= dy_group * col^T
      gemm(false, true, s.out_channels, rows, columns, 1.0f, grad_out, col, n0 == 0 ? 0.0f : 1.0f, dw);
      if (!dx) continue;
      // dcol = w^T * dy_group, scattered back into dx (col is free to reuse now).
      gemm(true, false, rows, columns, s.out_channels, 1.0f, w, grad_out, 0.0f, col);
      for (int i = 0; i < count; ++i) col2im_add(s, col, columns, i * plane, dx + (n0 + i) * in_image);
    }
  }

  void maxpool2d_forward(const Pool2dShape& s, const float* x, float* y, std::int32_t* argmax) override {
    const int oh = s.out_height(), ow = s.out_width();
    const std::size_t planes = static_cast<std::size_t>(s.batch) * s.channels;
    const std::size_t in_plane = static_cast<std::size_t>(s.height) * s.width;
    for (std::size_t pl = 0; pl < planes; ++pl) {
      const float* in = x + pl * in_plane;
      float* out = y + pl * static_cast<std::size_t>(oh) * ow;
      std::int32_t* arg = argmax + pl * static_cast<std::size_t>(oh) * ow;
      const auto base = static_cast<std::int32_t>(pl * in_plane);
      if (s.window == 2 && s.stride == 2) {
        // The common case: branch-free selects (random data would defeat the branch predictor).
        // The first maximum in row-major window order wins, as in torch.
        const int w = s.width;
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
        continue;
      }
      for (int r = 0; r < oh; ++r)
        for (int c = 0; c < ow; ++c) {
          float best = -std::numeric_limits<float>::infinity();
          int at = (r * s.stride) * s.width + c * s.stride;
          for (int i = 0; i < s.window; ++i)
            for (int j = 0; j < s.window; ++j) {
              const int idx = (r * s.stride + i) * s.width + (c * s.stride + j);
              if (in[idx] > best) {
                best = in[idx];
                at = idx;
              }
            }
          out[r * ow + c] = best;
          arg[r * ow + c] = base + at;
        }
    }
  }

  void maxpool2d_backward(const Pool2dShape& s, const float* /*x*/, const float* /*y*/, const float* dy,
                          const std::int32_t* argmax, float* dx) override {
    const std::size_t inputs = static_cast<std::size_t>(s.batch) * s.channels * s.height * s.width;
    const std::size_t outputs = static_cast<std::size_t>(s.batch) * s.channels * s.out_height() * s.out_width();
    std::fill(dx, dx + inputs, 0.0f);
    for (std::size_t o = 0; o < outputs; ++o) dx[argmax[o]] += dy[o];
  }

  void accumulate_softmax_cross_entropy(const float* logits, const std::int32_t* labels, int rows, int classes,
                                        float* dlogits, float grad_scale) override {
    const kernels::ref::XentSums sums =
        kernels::ref::softmax_cross_entropy(logits, labels, rows, classes, dlogits, grad_scale);
    loss_.loss += sums.loss;
    loss_.correct += sums.correct;
  }
  LossSums take_loss_sums() override { return std::exchange(loss_, LossSums{}); }
  void axpby(float a, const float* x, float b, float* y, std::size_t n) override { kernels::ref::axpby(a, x, b, y, n); }

 private:
  LossSums loss_;
  std::array<double, kMarks> marks_{};
#if DRT_HAVE_ONEDNN
  bool onednn() const { return onednn_ != nullptr; }
  std::unique_ptr<OneDnnConv> onednn_;
#else
  bool onednn() const { return false; }
#endif
};

}  // namespace

bool onednn_available() { return DRT_HAVE_ONEDNN != 0; }

std::unique_ptr<Backend> make_cpu_backend(CpuConv conv) {
  if (conv == CpuConv::kOneDnn && !onednn_available())
    throw Error("this drtrain was built without oneDNN (Debian: libdnnl-dev); its CPU convolution is im2col + GEMM");
  return std::make_unique<CpuBackend>(conv == CpuConv::kOneDnn || (conv == CpuConv::kAuto && onednn_available()));
}

void set_blas_threads(int threads) {
  openblas_set_num_threads(std::max(1, threads));
#if DRT_HAVE_ONEDNN
  omp_set_num_threads(std::max(1, threads));
#endif
}
int blas_threads() { return openblas_get_num_threads(); }

}  // namespace drt::backend
