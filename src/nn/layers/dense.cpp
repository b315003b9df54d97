// Linear (fully connected) layer: y = x W^T + b over each sample's values, whatever its shape
// (an NCHW input is read as C*H*W features, so no flatten is needed before it), or on a sequence
// over each position's features (GPT_DESIGN.md): rows = n x T, out a sequence of `out` features.
// A tied linear (tie=) has no weight of its own: it multiplies by another node's table (an
// embedding's [vocab, dim], torch's lm_head.weight = transformer.wte.weight) and writes that
// table's gradient, which the table's owner then adds to (layer.hpp, bind_shared).
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/nn/layer.hpp"

namespace drt::nn {
namespace {

class Linear final : public UnaryLayer {
 public:
  explicit Linear(const LinearOptions& o) : o_(o) {}
  std::string describe() const override {
    return str("linear ", o_.in, "->", o_.out, o_.bias ? "" : " no bias", o_.tied ? " tied" : "");
  }
  TensorShape output_shape(const TensorShape& in) const override {
    if (in.features() != o_.in)
      throw ConfigError(str("linear layer expects ", o_.in,
                            in.sequence ? " features per position" : " inputs per sample", ", got ", in.str()));
    if (in.sequence) return TensorShape::seq(in.n, in.c, o_.out);
    return {in.n, o_.out, 1, 1};
  }
  std::vector<ParamSpec> params() const override {
    std::vector<ParamSpec> p;
    if (!o_.tied) {
      ParamSpec w{"weight", {o_.out, o_.in}, static_cast<std::size_t>(o_.in), Init::kHeNormal};
      if (o_.init_std > 0.0) w.init = Init::kNormal, w.init_std = o_.init_std;
      w.matrix = true;
      p.push_back(w);
    }
    if (o_.bias) p.push_back({"bias", {o_.out}, 0, Init::kZeros});
    return p;
  }
  void forward(backend::Backend& d, const Pass&, const TensorShape& in, const float* x, float* y) override {
    const int rows = in.n * in.positions();
    // y[rows x out] = x[rows x in] * W^T + b
    d.gemm(false, true, rows, o_.out, o_.in, 1.0f, x, weight(), 0.0f, y);
    if (o_.bias) d.add_bias_rows(y, bias(params_), rows, o_.out);
  }
  void backward(backend::Backend& d, const Pass&, const TensorShape& in, const float* x, const float*, const float* dy,
                float* dx) override {
    const int rows = in.n * in.positions();
    d.gemm(true, false, o_.out, o_.in, rows, 1.0f, dy, x, 0.0f, weight_grad());  // dW = dy^T x
    if (o_.bias) d.bias_grad_rows(dy, bias(grads_), rows, o_.out);
    if (dx) d.gemm(false, false, rows, o_.in, o_.out, 1.0f, dy, weight(), 0.0f, dx);  // dx = dy W
  }

 private:
  const float* weight() const {
    DRT_ASSERT(!o_.tied || shared_, "a tied linear layer was not given its table (bind_shared)");
    return o_.tied ? shared_ : params_;
  }
  float* weight_grad() const { return o_.tied ? shared_grad_ : grads_; }
  // The bias follows the weight in the layer's own tensors, or comes first when tied.
  template <typename T>
  T* bias(T* own) const {
    return o_.tied ? own : own + static_cast<std::size_t>(o_.in) * static_cast<std::size_t>(o_.out);
  }
  LinearOptions o_;
};

}  // namespace

std::unique_ptr<Layer> make_linear(const LinearOptions& options) { return std::make_unique<Linear>(options); }
std::unique_ptr<Layer> make_linear(int in, int out, bool bias) {
  LinearOptions o;
  o.in = in, o.out = out, o.bias = bias;
  return make_linear(o);
}

}  // namespace drt::nn
