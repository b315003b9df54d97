// Merge layers of two or more inputs: add (residual connections; the same shapes) and concat
// (along channels; the same height and width).
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/nn/layer.hpp"

namespace drt::nn {
namespace {

std::string shapes_text(const std::vector<TensorShape>& in) {
  std::vector<std::string> parts;
  parts.reserve(in.size());
  for (const auto& s : in) parts.push_back(s.str());
  return join(parts, ", ");
}

class Add final : public Layer {
 public:
  std::string describe() const override { return "add"; }
  int arity() const override { return kAnyInputs; }
  bool passes_gradient() const override { return true; }
  TensorShape output_shape(const std::vector<TensorShape>& in) const override {
    for (const auto& s : in)
      if (!s.same_sample(in.at(0))) throw ConfigError(str("add needs inputs of one shape, got ", shapes_text(in)));
    return in.at(0);
  }
  void forward(backend::Backend& d, const Pass&, const std::vector<TensorShape>& in, const std::vector<const float*>& x,
               float* y) override {
    const std::size_t n = in[0].size();
    d.copy(y, x[0], n * sizeof(float));
    for (std::size_t i = 1; i < x.size(); ++i) d.axpby(1.0f, x[i], 1.0f, y, n);
  }
  void backward(backend::Backend& d, const Pass&, const std::vector<TensorShape>& in, const std::vector<const float*>&,
                const float*, const float* dy, const std::vector<float*>& dx) override {
    for (float* g : dx)
      if (g && g != dy) d.copy(g, dy, in[0].size() * sizeof(float));
  }
};

class Concat final : public Layer {
 public:
  std::string describe() const override { return "concat"; }
  int arity() const override { return kAnyInputs; }
  TensorShape output_shape(const std::vector<TensorShape>& in) const override {
    TensorShape out = in.at(0);
    out.c = 0;
    for (const auto& s : in) {
      if (s.h != in[0].h || s.w != in[0].w)
        throw ConfigError(str("concat needs inputs of one height and width, got ", shapes_text(in)));
      out.c += s.c;
    }
    return out;
  }
  void forward(backend::Backend& d, const Pass&, const std::vector<TensorShape>& in, const std::vector<const float*>& x,
               float* y) override {
    const std::size_t out_row = output_shape(in).per_sample();
    std::size_t at = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const std::size_t row = in[i].per_sample();
      d.copy_rows(y + at, out_row, x[i], row, row, static_cast<std::size_t>(in[i].n));
      at += row;
    }
  }
  void backward(backend::Backend& d, const Pass&, const std::vector<TensorShape>& in, const std::vector<const float*>&,
                const float*, const float* dy, const std::vector<float*>& dx) override {
    const std::size_t out_row = output_shape(in).per_sample();
    std::size_t at = 0;
    for (std::size_t i = 0; i < dx.size(); ++i) {
      const std::size_t row = in[i].per_sample();
      if (dx[i]) d.copy_rows(dx[i], row, dy + at, out_row, row, static_cast<std::size_t>(in[i].n));
      at += row;
    }
  }
};

}  // namespace

std::unique_ptr<Layer> make_add() { return std::make_unique<Add>(); }
std::unique_ptr<Layer> make_concat() { return std::make_unique<Concat>(); }

}  // namespace drt::nn
