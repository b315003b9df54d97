// Linear (fully connected) layer: y = x W^T + b over each sample's values, whatever its shape
// (an NCHW input is read as C*H*W features, so no flatten is needed before it).
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/nn/layer.hpp"

namespace drt::nn {
namespace {

class Linear final : public UnaryLayer {
 public:
  Linear(int in, int out, bool bias) : in_(in), out_(out), bias_(bias) {}
  std::string describe() const override { return str("linear ", in_, "->", out_, bias_ ? "" : " no bias"); }
  TensorShape output_shape(const TensorShape& in) const override {
    if (static_cast<int>(in.per_sample()) != in_)
      throw ConfigError(str("linear layer expects ", in_, " inputs per sample, got ", in.str()));
    return {in.n, out_, 1, 1};
  }
  std::vector<ParamSpec> params() const override {
    std::vector<ParamSpec> p{{"weight", {out_, in_}, static_cast<std::size_t>(in_), Init::kHeNormal}};
    if (bias_) p.push_back({"bias", {out_}, 0, Init::kZeros});
    return p;
  }
  void forward(backend::Backend& d, const Pass&, const TensorShape& in, const float* x, float* y) override {
    // y[n x out] = x[n x in] * W^T + b
    d.gemm(false, true, in.n, out_, in_, 1.0f, x, params_, 0.0f, y);
    if (bias_) d.add_bias_rows(y, params_ + weights(), in.n, out_);
  }
  void backward(backend::Backend& d, const Pass&, const TensorShape& in, const float* x, const float*, const float* dy,
                float* dx) override {
    d.gemm(true, false, out_, in_, in.n, 1.0f, dy, x, 0.0f, grads_);  // dW = dy^T x
    if (bias_) d.bias_grad_rows(dy, grads_ + weights(), in.n, out_);
    if (dx) d.gemm(false, false, in.n, in_, out_, 1.0f, dy, params_, 0.0f, dx);  // dx = dy W
  }

 private:
  std::size_t weights() const { return static_cast<std::size_t>(in_) * out_; }
  int in_, out_;
  bool bias_;
};

}  // namespace

std::unique_ptr<Layer> make_linear(int in, int out, bool bias) { return std::make_unique<Linear>(in, out, bias); }

}  // namespace drt::nn
