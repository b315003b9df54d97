// The CPU backend. GEMMs go to oneDNN's sgemm when built with it (JIT kernels for the CPU's
// widest units), else, or with CpuGemm::kOpenBlas, to OpenBLAS (cblas_sgemm; the threads of both
// are set per process); convolution to oneDNN (onednn_conv.hpp) when built with it, else im2col +
// GEMM over groups of images (chosen by measuring both against PyTorch, see bench/RESULTS.md);
// everything else is plain loops the compiler vectorises for the CPU's widest units
// (core/simd_clones.hpp) and splits over the threads (cpu_parallel.hpp): pooling in
// cpu_pooling.hpp, batch norm in cpu_batchnorm.hpp, elementwise the kernels' CPU references.
#include <cblas.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "drtrain/backend/backend.hpp"
#include "drtrain/config.hpp"
#include "drtrain/core/clock.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/kernels/reference.hpp"
#include "cpu_batchnorm.hpp"
#include "cpu_gemm.hpp"
#include "cpu_parallel.hpp"
#include "cpu_pooling.hpp"
#include "cpu_sequence.hpp"
#include "im2col.hpp"
#if DRT_HAVE_ONEDNN
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

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
//
// Channel groups (Conv2dShape::groups) need no other layout: the column rows of channel group g
// are the contiguous block [g * group_rows, (g + 1) * group_rows), its weights the contiguous
// [out/groups x group_rows] block g of w, its outputs the row block g of the GEMM output; one GEMM
// per channel group multiplies them.
struct Im2colGeometry {
  explicit Im2colGeometry(const Conv2dShape& s)
      : group(group_size(s)),
        plane(s.out_height() * s.out_width()),
        rows(s.in_channels * s.kernel * s.kernel),
        group_rows(s.in_per_group() * s.kernel * s.kernel),
        group_out(s.out_per_group()),
        in_image(static_cast<std::size_t>(s.in_channels) * s.height * s.width),
        out_image(static_cast<std::size_t>(s.out_channels) * plane) {}
  std::size_t column_floats() const { return static_cast<std::size_t>(rows) * static_cast<std::size_t>(group) * plane; }
  std::size_t workspace_floats(int out_channels) const {
    return static_cast<std::size_t>(group) * plane * (static_cast<std::size_t>(rows) + out_channels);
  }
  // Offsets of channel group cg's weights, column rows and output rows (columns: GEMM width).
  std::size_t weights_at(int cg) const { return static_cast<std::size_t>(cg) * group_out * group_rows; }
  std::size_t rows_at(int cg, int columns) const {
    return static_cast<std::size_t>(cg) * group_rows * static_cast<std::size_t>(columns);
  }
  std::size_t out_at(int cg, int columns) const {
    return static_cast<std::size_t>(cg) * group_out * static_cast<std::size_t>(columns);
  }
  int group, plane, rows, group_rows, group_out;
  std::size_t in_image, out_image;
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(bool onednn_conv, bool onednn_gemm) : onednn_gemm_(onednn_gemm) {
#if DRT_HAVE_ONEDNN
    if (onednn_conv) onednn_ = std::make_unique<OneDnnConv>();
#else
    (void)onednn_conv;
#endif
  }
  std::string name() const override {
    return str("cpu (", onednn() ? "oneDNN" : "im2col", " conv, ", onednn_gemm_ ? "oneDNN" : "OpenBLAS", " GEMM)");
  }
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
    cpu::sgemm(onednn_gemm_, ta, tb, m, n, k, alpha, a, ta ? m : k, b, tb ? k : n, beta, c, n);
  }

  // The elementwise math is the kernels' CPU references (kernels/reference.cpp), so the GPU
  // kernels are tested against exactly what this backend computes.
  void add_bias_rows(float* y, const float* bias, int rows, int cols) override {
    kernels::ref::add_bias_rows(y, bias, rows, cols);
  }
  void bias_grad_rows(const float* dy, float* grad_bias, int rows, int cols) override {
    kernels::ref::bias_grad_rows(dy, grad_bias, rows, cols);
  }
  void relu_forward(const float* x, float* y, std::size_t n) override {
    cpu::parallel_ranges(n, [&](std::size_t b, std::size_t e) { kernels::ref::relu_forward(x + b, y + b, e - b); });
  }
  void relu_backward(const float* y, const float* dy, float* dx, std::size_t n) override {
    cpu::parallel_ranges(
        n, [&](std::size_t b, std::size_t e) { kernels::ref::relu_backward(y + b, dy + b, dx + b, e - b); });
  }
  // Elementwise, so split over the threads in contiguous pieces (the same values on any count).
  void activation_forward(Activation f, const float* x, float* y, std::size_t n) override {
    cpu::parallel_ranges(n, [&](std::size_t b, std::size_t e) {
      switch (f) {
        case Activation::kGelu: return kernels::ref::gelu_forward(x + b, y + b, e - b);
        case Activation::kTanh: return kernels::ref::tanh_forward(x + b, y + b, e - b);
        case Activation::kSigmoid: return kernels::ref::sigmoid_forward(x + b, y + b, e - b);
        case Activation::kGeluTanh: return kernels::ref::gelu_tanh_forward(x + b, y + b, e - b);
      }
    });
  }
  void activation_backward(Activation f, const float* x, const float* y, const float* dy, float* dx,
                           std::size_t n) override {
    cpu::parallel_ranges(n, [&](std::size_t b, std::size_t e) {
      switch (f) {
        case Activation::kGelu: return kernels::ref::gelu_backward(x + b, dy + b, dx + b, e - b);
        case Activation::kTanh: return kernels::ref::tanh_backward(y + b, dy + b, dx + b, e - b);
        case Activation::kSigmoid: return kernels::ref::sigmoid_backward(y + b, dy + b, dx + b, e - b);
        case Activation::kGeluTanh: return kernels::ref::gelu_tanh_backward(x + b, dy + b, dx + b, e - b);
      }
    });
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
    const int g = geo.group, plane = geo.plane;
    const std::size_t in_image = geo.in_image, out_image = geo.out_image;
    for (int n0 = 0; n0 < s.batch; n0 += g) {
      const int count = std::min(g, s.batch - n0);
      const int columns = count * plane;
      float* col = workspace;
      float* out = workspace + geo.column_floats();
      for (int i = 0; i < count; ++i) im2col(s, x + (n0 + i) * in_image, col, columns, i * plane);
      for (int cg = 0; cg < s.groups; ++cg)  // groups = 1: the one GEMM of the whole matrices
        gemm(false, false, geo.group_out, columns, geo.group_rows, 1.0f, w + geo.weights_at(cg),
             col + geo.rows_at(cg, columns), 0.0f, out + geo.out_at(cg, columns));
      // out is [out_channels x (image, pixel)]; y is NCHW.
      for (int i = 0; i < count; ++i)
        for (int oc = 0; oc < s.out_channels; ++oc) {
          const float* src = out + static_cast<std::size_t>(oc) * columns + static_cast<std::size_t>(i) * plane;
          float* dst = y + (n0 + i) * out_image + static_cast<std::size_t>(oc) * plane;
          if (bias) {
            const float b = bias[oc];
            for (int p = 0; p < plane; ++p) dst[p] = src[p] + b;
          } else {
            std::memcpy(dst, src, sizeof(float) * static_cast<std::size_t>(plane));
          }
        }
    }
  }

  void conv2d_backward(const Conv2dShape& s, const float* x, const float* w, const float* dy, float* dw, float* dbias,
                       float* dx, float* workspace) override {
#if DRT_HAVE_ONEDNN
    if (onednn_) return onednn_->backward(s, x, w, dy, dw, dbias, dx);
#endif
    const Im2colGeometry geo(s);
    const int g = geo.group, plane = geo.plane;
    const std::size_t in_image = geo.in_image, out_image = geo.out_image;
    if (dbias) std::fill(dbias, dbias + s.out_channels, 0.0f);
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
          if (!dbias) {
            std::memcpy(dst, src, sizeof(float) * static_cast<std::size_t>(plane));
            continue;
          }
          float sum = 0.0f;
          for (int p = 0; p < plane; ++p) {
            dst[p] = src[p];
            sum += src[p];
          }
          dbias[oc] += sum;
        }
      for (int i = 0; i < count; ++i) im2col(s, x + (n0 + i) * in_image, col, columns, i * plane);
      // dw (+)= dy_group * col^T, per channel group.
      const float beta = n0 == 0 ? 0.0f : 1.0f;
      for (int cg = 0; cg < s.groups; ++cg)
        gemm(false, true, geo.group_out, geo.group_rows, columns, 1.0f, grad_out + geo.out_at(cg, columns),
             col + geo.rows_at(cg, columns), beta, dw + geo.weights_at(cg));
      if (!dx) continue;
      // dcol = w^T * dy_group, scattered back into dx (col is free to reuse now).
      for (int cg = 0; cg < s.groups; ++cg)
        gemm(true, false, geo.group_rows, columns, geo.group_out, 1.0f, w + geo.weights_at(cg),
             grad_out + geo.out_at(cg, columns), 0.0f, col + geo.rows_at(cg, columns));
      for (int i = 0; i < count; ++i) col2im_add(s, col, columns, i * plane, dx + (n0 + i) * in_image);
    }
  }

  void maxpool2d_forward(const Pool2dShape& s, const float* x, float* y, std::int32_t* argmax) override {
    cpu::maxpool2d_forward(s, x, y, argmax);
  }
  void maxpool2d_backward(const Pool2dShape& s, const float* /*x*/, const float* /*y*/, const float* dy,
                          const std::int32_t* argmax, float* dx) override {
    cpu::maxpool2d_backward(s, dy, argmax, dx);
  }
  void avgpool2d_forward(const Pool2dShape& s, const float* x, float* y) override { cpu::avgpool2d_forward(s, x, y); }
  void avgpool2d_backward(const Pool2dShape& s, const float* dy, float* dx) override {
    cpu::avgpool2d_backward(s, dy, dx);
  }
  void global_avgpool_forward(const float* x, float* y, std::size_t planes, std::size_t plane_size) override {
    cpu::global_avgpool_forward(x, y, planes, plane_size);
  }
  void global_avgpool_backward(const float* dy, float* dx, std::size_t planes, std::size_t plane_size) override {
    cpu::global_avgpool_backward(dy, dx, planes, plane_size);
  }

  void batchnorm_forward_train(const BatchNormShape& s, const float* x, const float* gamma, const float* beta,
                               float eps, float* y, float* save_mean, float* save_inv_std, float momentum,
                               const float* running_mean, const float* running_var, float* new_mean,
                               float* new_var) override {
    cpu::batchnorm_forward_train(s, x, gamma, beta, eps, y, save_mean, save_inv_std, momentum, running_mean,
                                 running_var, new_mean, new_var);
  }
  void batchnorm_forward_infer(const BatchNormShape& s, const float* x, const float* gamma, const float* beta,
                               const float* running_mean, const float* running_var, float eps, float* y) override {
    cpu::batchnorm_forward_infer(s, x, gamma, beta, running_mean, running_var, eps, y);
  }
  void batchnorm_backward(const BatchNormShape& s, const float* x, const float* dy, const float* gamma,
                          const float* save_mean, const float* save_inv_std, float /*eps: in save_inv_std*/, float* dx,
                          float* dgamma, float* dbeta) override {
    cpu::batchnorm_backward(s, x, dy, gamma, save_mean, save_inv_std, dx, dgamma, dbeta);
  }

  // One sample per piece of work: the mask depends only on (key, sample, element).
  void dropout_forward(const DropoutShape& s, const float* x, float* y, std::uint8_t* mask) override {
    cpu::parallel_for(static_cast<std::size_t>(s.rows), s.size(), [&](std::size_t r) {
      const std::size_t at = r * s.per_sample;
      kernels::ref::dropout_forward(s.key, s.first_sample + static_cast<std::int64_t>(r), 1, s.per_sample, s.p, x + at,
                                    y + at, mask + at);
    });
  }
  void dropout_backward(const DropoutShape& s, const float* dy, const std::uint8_t* mask, float* dx) override {
    kernels::ref::dropout_backward(s.rows, s.per_sample, s.p, dy, mask, dx);
  }

  void layernorm_forward(const LayerNormShape& s, const float* x, const float* gamma, const float* beta, float* y,
                         float* mean, float* inv_std) override {
    cpu::layernorm_forward(s, x, gamma, beta, y, mean, inv_std);
  }
  void layernorm_backward(const LayerNormShape& s, const float* x, const float* dy, const float* gamma,
                          const float* mean, const float* inv_std, float* dx, float* dgamma, float* dbeta) override {
    cpu::layernorm_backward(s, x, dy, gamma, mean, inv_std, dx, dgamma, dbeta);
  }
  void embedding_forward(const EmbeddingShape& s, const float* ids, const float* table, float* y) override {
    cpu::embedding_forward(s, ids, table, y);
  }
  void embedding_backward(const EmbeddingShape& s, const float* ids, const float* dy, float* dtable,
                          bool accumulate) override {
    cpu::embedding_backward(s, ids, dy, dtable, accumulate);
  }
  void attention_forward(const AttentionShape& s, const float* qkv, float* y, float* lse) override {
    cpu::attention_forward(onednn_gemm_, s, qkv, y, lse);
  }
  void attention_backward(const AttentionShape& s, const float* qkv, const float* y, const float* lse, const float* dy,
                          float* dqkv) override {
    cpu::attention_backward(onednn_gemm_, s, qkv, y, lse, dy, dqkv);
  }

  void copy_rows(float* dst, std::size_t dst_stride, const float* src, std::size_t src_stride, std::size_t row_floats,
                 std::size_t rows) override {
    for (std::size_t r = 0; r < rows; ++r)
      std::memcpy(dst + r * dst_stride, src + r * src_stride, row_floats * sizeof(float));
  }

  void accumulate_softmax_cross_entropy(const float* logits, const std::int32_t* labels, int rows, int classes,
                                        float* dlogits, float grad_scale, float label_smoothing) override {
    const kernels::ref::XentSums sums =
        kernels::ref::softmax_cross_entropy(logits, labels, rows, classes, dlogits, grad_scale, label_smoothing);
    loss_.loss += sums.loss;
    loss_.correct += sums.correct;
  }
  LossSums take_loss_sums() override { return std::exchange(loss_, LossSums{}); }
  void axpby(float a, const float* x, float b, float* y, std::size_t n) override {
    cpu::parallel_ranges(n,
                         [&](std::size_t lo, std::size_t hi) { kernels::ref::axpby(a, x + lo, b, y + lo, hi - lo); });
  }

 private:
  LossSums loss_;
  std::array<double, kMarks> marks_{};
  bool onednn_gemm_ = false;
#if DRT_HAVE_ONEDNN
  bool onednn() const { return onednn_ != nullptr; }
  std::unique_ptr<OneDnnConv> onednn_;
#else
  bool onednn() const { return false; }
#endif
};

}  // namespace

bool onednn_available() { return DRT_HAVE_ONEDNN != 0; }

CpuGemm parse_cpu_gemm(const std::string& text, const std::string& flag) {
  if (text == "auto") return CpuGemm::kAuto;
  if (text == "openblas") return CpuGemm::kOpenBlas;
  if (text == "onednn") {
    if (!onednn_available())
      throw ConfigError(str(flag, " onednn: this drtrain was built without oneDNN (Debian: apt-get install "
                                  "libdnnl-dev, then rebuild); use auto or openblas"));
    return CpuGemm::kOneDnn;
  }
  throw ConfigError(str(flag, " ", text, ": expected auto, openblas or onednn"));
}

namespace {
bool gemm_uses_onednn(CpuGemm gemm) {
  return gemm == CpuGemm::kOneDnn || (gemm == CpuGemm::kAuto && onednn_available());
}
}  // namespace

std::string to_string(CpuGemm gemm) { return gemm_uses_onednn(gemm) ? "oneDNN" : "OpenBLAS"; }

std::unique_ptr<Backend> make_cpu_backend(CpuConv conv, CpuGemm gemm) {
  if ((conv == CpuConv::kOneDnn || gemm == CpuGemm::kOneDnn) && !onednn_available())
    throw Error(
        "this drtrain was built without oneDNN (Debian: libdnnl-dev); its CPU convolution is im2col + GEMM and its "
        "GEMMs are OpenBLAS's");
  return std::make_unique<CpuBackend>(conv == CpuConv::kOneDnn || (conv == CpuConv::kAuto && onednn_available()),
                                      gemm_uses_onednn(gemm));
}

void set_blas_threads(int threads) {
  openblas_set_num_threads(std::max(1, threads));
#if DRT_HAVE_ONEDNN
  omp_set_num_threads(std::max(1, threads));
#endif
}
int blas_threads() { return openblas_get_num_threads(); }

}  // namespace drt::backend
