// Elementwise activations: ReLU, GELU (exact, or its tanh approximation), tanh, sigmoid. ReLU,
// tanh and sigmoid run in place (their backward reads only the output); GELU's backward reads
// its input.
#include "drtrain/nn/layer.hpp"

namespace drt::nn {
namespace {

class Relu final : public UnaryLayer {
 public:
  std::string describe() const override { return "relu"; }
  TensorShape output_shape(const TensorShape& in) const override { return in; }
  bool in_place() const override { return true; }
  bool keeps_output() const override { return true; }  // backward reads y
  void forward(backend::Backend& d, const Pass&, const TensorShape& in, const float* x, float* y) override {
    d.relu_forward(x, y, in.size());
  }
  void backward(backend::Backend& d, const Pass&, const TensorShape& in, const float*, const float* y, const float* dy,
                float* dx) override {
    if (dx) d.relu_backward(y, dy, dx, in.size());
  }
};

class Activation final : public UnaryLayer {
 public:
  explicit Activation(backend::Activation f) : f_(f) {}
  std::string describe() const override {
    switch (f_) {
      case backend::Activation::kGelu: return "gelu";
      case backend::Activation::kGeluTanh: return "gelu tanh";
      case backend::Activation::kTanh: return "tanh";
      case backend::Activation::kSigmoid: return "sigmoid";
    }
    return "activation";
  }
  TensorShape output_shape(const TensorShape& in) const override { return in; }
  bool in_place() const override { return !gelu(); }
  bool keeps_output() const override { return !gelu(); }
  void forward(backend::Backend& d, const Pass&, const TensorShape& in, const float* x, float* y) override {
    d.activation_forward(f_, x, y, in.size());
  }
  void backward(backend::Backend& d, const Pass&, const TensorShape& in, const float* x, const float* y,
                const float* dy, float* dx) override {
    if (dx) d.activation_backward(f_, x, y, dy, dx, in.size());
  }

 private:
  bool gelu() const { return f_ == backend::Activation::kGelu || f_ == backend::Activation::kGeluTanh; }
  backend::Activation f_;
};

}  // namespace

std::unique_ptr<Layer> make_relu() { return std::make_unique<Relu>(); }
std::unique_ptr<Layer> make_activation(backend::Activation f) { return std::make_unique<Activation>(f); }

}  // namespace drt::nn
