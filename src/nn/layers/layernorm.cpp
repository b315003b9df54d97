// Layer normalisation (torch.nn.LayerNorm over the last axis): each position of a sequence (or
// each sample of a non-sequence) normalised over its `dim` features with its own mean and
// biased variance, then scaled and shifted: weight [dim] (ones), bias [dim] (zeros). The mean
// and 1 / sqrt(var + eps) of each row are kept for backward.
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/nn/layer.hpp"

namespace drt::nn {
namespace {

class LayerNorm final : public UnaryLayer {
 public:
  LayerNorm(int dim, float eps, bool bias) : dim_(dim), eps_(eps), bias_(bias) {
    if (!(eps > 0.0f)) throw ConfigError(str("layernorm eps=", eps, " must be positive"));
  }
  std::string describe() const override { return str("layernorm ", dim_, bias_ ? "" : " no bias"); }
  TensorShape output_shape(const TensorShape& in) const override {
    if (in.features() != dim_) throw ConfigError(str("layernorm over ", dim_, " features got ", in.str()));
    return in;
  }
  std::vector<ParamSpec> params() const override {
    std::vector<ParamSpec> p{{"weight", {dim_}, 0, Init::kOnes}};
    if (bias_) p.push_back({"bias", {dim_}, 0, Init::kZeros});
    return p;
  }
  void prepare(backend::Backend& d, const TensorShape& max_in, int) override {
    const std::size_t rows = static_cast<std::size_t>(max_in.n) * static_cast<std::size_t>(max_in.positions());
    mean_ = d.allocate_floats(rows);
    inv_std_ = d.allocate_floats(rows);
  }
  void forward(backend::Backend& d, const Pass&, const TensorShape& in, const float* x, float* y) override {
    d.layernorm_forward(shape(in), x, params_, bias_ ? params_ + dim_ : nullptr, y, mean_.floats(), inv_std_.floats());
  }
  void backward(backend::Backend& d, const Pass&, const TensorShape& in, const float* x, const float*, const float* dy,
                float* dx) override {
    d.layernorm_backward(shape(in), x, dy, params_, mean_.floats(), inv_std_.floats(), dx, grads_,
                         bias_ ? grads_ + dim_ : nullptr);
  }

 private:
  backend::LayerNormShape shape(const TensorShape& in) const { return {in.n * in.positions(), dim_, eps_}; }
  int dim_;
  float eps_;
  bool bias_;
  backend::DeviceBuffer mean_, inv_std_;
};

}  // namespace

std::unique_ptr<Layer> make_layernorm(int dim, float eps, bool bias) {
  return std::make_unique<LayerNorm>(dim, eps, bias);
}

}  // namespace drt::nn
