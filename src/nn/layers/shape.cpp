// Shapes and flatten: NCHW is already row-major per sample, so flattening changes the shape,
// not the memory (the network gives it its input's buffer).
#include "drtrain/core/strings.hpp"
#include "drtrain/nn/layer.hpp"

namespace drt::nn {

std::string TensorShape::str() const {
  if (sequence && h == 1) return drt::str(c, "x", w, " seq");
  return drt::str(c, "x", h, "x", w);
}

std::size_t ParamSpec::numel() const {
  std::size_t n = 1;
  for (auto d : shape) n *= static_cast<std::size_t>(d);
  return n;
}

namespace {

class Flatten final : public UnaryLayer {
 public:
  std::string describe() const override { return "flatten"; }
  TensorShape output_shape(const TensorShape& in) const override {
    return {in.n, static_cast<int>(in.per_sample()), 1, 1};
  }
  bool is_view() const override { return true; }
  void forward(backend::Backend& d, const Pass&, const TensorShape& in, const float* x, float* y) override {
    if (x != y) d.copy(y, x, in.size() * sizeof(float));
  }
  void backward(backend::Backend& d, const Pass&, const TensorShape& in, const float*, const float*, const float* dy,
                float* dx) override {
    if (dx && dx != dy) d.copy(dx, dy, in.size() * sizeof(float));
  }
};

}  // namespace

std::unique_ptr<Layer> make_flatten() { return std::make_unique<Flatten>(); }

}  // namespace drt::nn
