// Pooling: max and average over square windows (stride, padding; torch's MaxPool2d and
// AvgPool2d with count_include_pad), and global average pooling (N x C x H x W -> N x C x 1 x 1).
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/nn/layer.hpp"

namespace drt::nn {
namespace {

class Pool2d final : public UnaryLayer {
 public:
  Pool2d(PoolKind kind, const PoolOptions& o) : kind_(kind), o_(o) {
    if (o.kernel < 1 || o.stride < 1 || o.pad < 0 || 2 * o.pad > o.kernel)
      throw ConfigError(str(describe(), ": kernel and stride must be positive and pad at most half the kernel"));
  }
  std::string describe() const override {
    // "maxpool2" for the classic window-2 stride-2 pooling, as before.
    const bool plain = o_.stride == o_.kernel && o_.pad == 0;
    return str(kind_ == PoolKind::kMax ? "maxpool" : "avgpool", o_.kernel,
               plain ? "" : str(" stride ", o_.stride, " pad ", o_.pad));
  }
  TensorShape output_shape(const TensorShape& in) const override {
    const backend::Pool2dShape s = shape(in);
    if (in.h + 2 * o_.pad < o_.kernel || in.w + 2 * o_.pad < o_.kernel || s.out_height() < 1 || s.out_width() < 1)
      throw ConfigError(str(describe(), " cannot take input ", in.str()));
    return {in.n, in.c, s.out_height(), s.out_width()};
  }
  void prepare(backend::Backend& d, const TensorShape& max_in, int) override {
    if (kind_ == PoolKind::kMax) argmax_ = d.allocate(output_shape(max_in).size() * sizeof(std::int32_t));
  }
  bool keeps_output() const override { return kind_ == PoolKind::kMax; }  // cuDNN's max backward reads y
  void forward(backend::Backend& d, const Pass&, const TensorShape& in, const float* x, float* y) override {
    if (kind_ == PoolKind::kMax) d.maxpool2d_forward(shape(in), x, y, argmax_.ints());
    else d.avgpool2d_forward(shape(in), x, y);
  }
  void backward(backend::Backend& d, const Pass&, const TensorShape& in, const float* x, const float* y,
                const float* dy, float* dx) override {
    if (!dx) return;
    if (kind_ == PoolKind::kMax) d.maxpool2d_backward(shape(in), x, y, dy, argmax_.ints(), dx);
    else d.avgpool2d_backward(shape(in), dy, dx);
  }

 private:
  backend::Pool2dShape shape(const TensorShape& in) const {
    return {in.n, in.c, in.h, in.w, o_.kernel, o_.stride, o_.pad};
  }
  PoolKind kind_;
  PoolOptions o_;
  backend::DeviceBuffer argmax_;
};

class GlobalAvgPool final : public UnaryLayer {
 public:
  std::string describe() const override { return "global avgpool"; }
  TensorShape output_shape(const TensorShape& in) const override { return {in.n, in.c, 1, 1}; }
  void forward(backend::Backend& d, const Pass&, const TensorShape& in, const float* x, float* y) override {
    d.global_avgpool_forward(x, y, planes(in), plane(in));
  }
  void backward(backend::Backend& d, const Pass&, const TensorShape& in, const float*, const float*, const float* dy,
                float* dx) override {
    if (dx) d.global_avgpool_backward(dy, dx, planes(in), plane(in));
  }

 private:
  static std::size_t planes(const TensorShape& in) { return static_cast<std::size_t>(in.n) * in.c; }
  static std::size_t plane(const TensorShape& in) { return static_cast<std::size_t>(in.h) * in.w; }
};

}  // namespace

std::unique_ptr<Layer> make_pool2d(PoolKind kind, const PoolOptions& options) {
  return std::make_unique<Pool2d>(kind, options);
}
std::unique_ptr<Layer> make_maxpool2d(int window) { return make_pool2d(PoolKind::kMax, {window, window, 0}); }
std::unique_ptr<Layer> make_global_avgpool() { return std::make_unique<GlobalAvgPool>(); }

}  // namespace drt::nn
