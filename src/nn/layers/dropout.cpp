// Dropout (inverted, torch.nn.Dropout): in training each value is kept with probability 1 - p
// and scaled by 1 / (1 - p); in evaluation it is the identity. The mask is a hash of (seed,
// step, layer, the sample's position in the global batch, element) (kernels/rules.hpp), so it
// is the same whatever the numbers of workers and towers, and reproducible from the seed.
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/kernels/rules.hpp"
#include "drtrain/nn/layer.hpp"

namespace drt::nn {
namespace {

class Dropout final : public UnaryLayer {
 public:
  explicit Dropout(float p) : p_(p) {
    if (!(p >= 0.0f && p < 1.0f)) throw ConfigError(str("dropout p=", p, " must be in [0, 1)"));
  }
  std::string describe() const override { return str("dropout ", p_); }
  TensorShape output_shape(const TensorShape& in) const override { return in; }
  bool in_place() const override { return true; }
  void prepare(backend::Backend& d, const TensorShape& max_in, int index) override {
    if (p_ > 0.0f) mask_ = d.allocate(max_in.size());
    index_ = index;
  }
  void forward(backend::Backend& d, const Pass& pass, const TensorShape& in, const float* x, float* y) override {
    if (!pass.training || p_ == 0.0f) {  // the identity (p = 0: a model file's switched-off dropout)
      if (x != y) d.copy(y, x, in.size() * sizeof(float));
      return;
    }
    d.dropout_forward(shape(pass, in), x, y, static_cast<std::uint8_t*>(mask_.data()));
  }
  void backward(backend::Backend& d, const Pass& pass, const TensorShape& in, const float*, const float*,
                const float* dy, float* dx) override {
    if (!dx) return;
    if (p_ == 0.0f) {
      if (dx != dy) d.copy(dx, dy, in.size() * sizeof(float));
      return;
    }
    d.dropout_backward(shape(pass, in), dy, static_cast<const std::uint8_t*>(mask_.data()), dx);
  }

 private:
  backend::DropoutShape shape(const Pass& pass, const TensorShape& in) const {
    return {in.n, in.per_sample(), p_, kernels::dropout_key(pass.seed, pass.step, index_), pass.first_sample};
  }
  float p_;
  int index_ = 0;
  backend::DeviceBuffer mask_;
};

}  // namespace

std::unique_ptr<Layer> make_dropout(float p) { return std::make_unique<Dropout>(p); }

}  // namespace drt::nn
