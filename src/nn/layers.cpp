// The layers of the model zoo. Each is a thin adapter from shapes to Backend calls.
#include <cstring>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/nn/layer.hpp"

namespace drt::nn {

std::string TensorShape::str() const { return drt::str(c, "x", h, "x", w); }

namespace {

class Linear final : public Layer {
 public:
  Linear(int in, int out) : in_(in), out_(out) {}
  std::string describe() const override { return str("linear ", in_, "->", out_); }
  TensorShape output_shape(const TensorShape& in) const override {
    if (static_cast<int>(in.per_sample()) != in_)
      throw ConfigError(str("linear layer expects ", in_, " inputs per sample, got ", in.str()));
    return {in.n, out_, 1, 1};
  }
  std::vector<ParamSpec> params() const override {
    return {{"weight", {out_, in_}, static_cast<std::size_t>(in_)}, {"bias", {out_}, 0}};
  }
  void forward(backend::Backend& d, const TensorShape& in, const float* x, float* y) override {
    // y[n x out] = x[n x in] * W^T + b
    d.gemm(false, true, in.n, out_, in_, 1.0f, x, params_, 0.0f, y);
    d.add_bias_rows(y, params_ + weights(), in.n, out_);
  }
  void backward(backend::Backend& d, const TensorShape& in, const float* x, const float*, const float* dy,
                float* dx) override {
    d.gemm(true, false, out_, in_, in.n, 1.0f, dy, x, 0.0f, grads_);  // dW = dy^T x
    d.bias_grad_rows(dy, grads_ + weights(), in.n, out_);
    if (dx) d.gemm(false, false, in.n, in_, out_, 1.0f, dy, params_, 0.0f, dx);  // dx = dy W
  }

 private:
  std::size_t weights() const { return static_cast<std::size_t>(in_) * out_; }
  int in_, out_;
};

class Relu final : public Layer {
 public:
  std::string describe() const override { return "relu"; }
  TensorShape output_shape(const TensorShape& in) const override { return in; }
  bool in_place() const override { return true; }
  void forward(backend::Backend& d, const TensorShape& in, const float* x, float* y) override {
    d.relu_forward(x, y, in.size());
  }
  void backward(backend::Backend& d, const TensorShape& in, const float*, const float* y, const float* dy,
                float* dx) override {
    if (dx) d.relu_backward(y, dy, dx, in.size());
  }
};

class Conv2d final : public Layer {
 public:
  Conv2d(int in_channels, int out_channels, int kernel, int pad)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_(kernel), pad_(pad) {}
  std::string describe() const override {
    return str("conv", kernel_, "x", kernel_, " ", in_channels_, "->", out_channels_, " pad ", pad_);
  }
  TensorShape output_shape(const TensorShape& in) const override {
    const backend::Conv2dShape s = shape(in);
    if (in.c != in_channels_ || s.out_height() < 1 || s.out_width() < 1)
      throw ConfigError(str(describe(), " cannot take input ", in.str()));
    return {in.n, out_channels_, s.out_height(), s.out_width()};
  }
  std::vector<ParamSpec> params() const override {
    const std::size_t fan_in = static_cast<std::size_t>(in_channels_) * kernel_ * kernel_;
    return {{"weight", {out_channels_, in_channels_, kernel_, kernel_}, fan_in}, {"bias", {out_channels_}, 0}};
  }
  void prepare(backend::Backend& d, const TensorShape& max_in) override {
    workspace_ = d.allocate_floats(d.conv2d_workspace_floats(shape(max_in)));
  }
  void forward(backend::Backend& d, const TensorShape& in, const float* x, float* y) override {
    d.conv2d_forward(shape(in), x, params_, params_ + weights(), y, workspace_.floats());
  }
  void backward(backend::Backend& d, const TensorShape& in, const float* x, const float*, const float* dy,
                float* dx) override {
    d.conv2d_backward(shape(in), x, params_, dy, grads_, grads_ + weights(), dx, workspace_.floats());
  }

 private:
  backend::Conv2dShape shape(const TensorShape& in) const {
    return {in.n, in.c, in.h, in.w, out_channels_, kernel_, 1, pad_};
  }
  std::size_t weights() const { return static_cast<std::size_t>(out_channels_) * in_channels_ * kernel_ * kernel_; }
  int in_channels_, out_channels_, kernel_, pad_;
  backend::DeviceBuffer workspace_;
};

class MaxPool2d final : public Layer {
 public:
  explicit MaxPool2d(int window) : window_(window) {}
  std::string describe() const override { return str("maxpool", window_); }
  TensorShape output_shape(const TensorShape& in) const override {
    const backend::Pool2dShape s = shape(in);
    if (s.out_height() < 1 || s.out_width() < 1) throw ConfigError(str(describe(), " cannot take input ", in.str()));
    return {in.n, in.c, s.out_height(), s.out_width()};
  }
  void prepare(backend::Backend& d, const TensorShape& max_in) override {
    argmax_ = d.allocate(output_shape(max_in).size() * sizeof(std::int32_t));
  }
  void forward(backend::Backend& d, const TensorShape& in, const float* x, float* y) override {
    d.maxpool2d_forward(shape(in), x, y, argmax_.ints());
  }
  bool keeps_output() const override { return true; }  // cuDNN's backward reads y
  void backward(backend::Backend& d, const TensorShape& in, const float* x, const float* y, const float* dy,
                float* dx) override {
    if (dx) d.maxpool2d_backward(shape(in), x, y, dy, argmax_.ints(), dx);
  }

 private:
  backend::Pool2dShape shape(const TensorShape& in) const { return {in.n, in.c, in.h, in.w, window_, window_}; }
  int window_;
  backend::DeviceBuffer argmax_;
};

// NCHW is already row-major per sample: flattening changes the shape, not the memory.
class Flatten final : public Layer {
 public:
  std::string describe() const override { return "flatten"; }
  TensorShape output_shape(const TensorShape& in) const override {
    return {in.n, static_cast<int>(in.per_sample()), 1, 1};
  }
  bool in_place() const override { return true; }
  void forward(backend::Backend& d, const TensorShape& in, const float* x, float* y) override {
    if (x != y) d.copy(y, x, in.size() * sizeof(float));
  }
  void backward(backend::Backend& d, const TensorShape& in, const float*, const float*, const float* dy,
                float* dx) override {
    if (dx && dx != dy) d.copy(dx, dy, in.size() * sizeof(float));
  }
};

}  // namespace

std::unique_ptr<Layer> make_linear(int in, int out) { return std::make_unique<Linear>(in, out); }
std::unique_ptr<Layer> make_relu() { return std::make_unique<Relu>(); }
std::unique_ptr<Layer> make_conv2d(int in_channels, int out_channels, int kernel, int pad) {
  return std::make_unique<Conv2d>(in_channels, out_channels, kernel, pad);
}
std::unique_ptr<Layer> make_maxpool2d(int window) { return std::make_unique<MaxPool2d>(window); }
std::unique_ptr<Layer> make_flatten() { return std::make_unique<Flatten>(); }

}  // namespace drt::nn
