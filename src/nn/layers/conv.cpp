// 2-D convolution (torch.nn.Conv2d with a square kernel, dilation 1): stride, zero padding,
// groups, optional bias. The backend does the work (oneDNN or im2col + GEMM, cuDNN).
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/nn/layer.hpp"

namespace drt::nn {
namespace {

class Conv2d final : public UnaryLayer {
 public:
  explicit Conv2d(const Conv2dOptions& o) : o_(o) {
    if (o.in_channels < 1 || o.out_channels < 1 || o.kernel < 1 || o.stride < 1 || o.pad < 0 || o.groups < 1)
      throw ConfigError(str(describe(), ": channels, kernel, stride and groups must be positive, pad not negative"));
    if (o.in_channels % o.groups || o.out_channels % o.groups)
      throw ConfigError(str(describe(), ": groups=", o.groups, " must divide both the input channels (", o.in_channels,
                            ") and out=", o.out_channels));
  }
  std::string describe() const override {
    return str("conv", o_.kernel, "x", o_.kernel, " ", o_.in_channels, "->", o_.out_channels,
               o_.stride != 1 ? str(" stride ", o_.stride) : "", o_.pad ? str(" pad ", o_.pad) : "",
               o_.groups != 1 ? str(" groups ", o_.groups) : "", o_.bias ? "" : " no bias");
  }
  TensorShape output_shape(const TensorShape& in) const override {
    const backend::Conv2dShape s = shape(in);
    if (in.c != o_.in_channels)
      throw ConfigError(str(describe(), " takes ", o_.in_channels, " input channels, got ", in.str()));
    if (s.out_height() < 1 || s.out_width() < 1 || in.h + 2 * o_.pad < o_.kernel || in.w + 2 * o_.pad < o_.kernel)
      throw ConfigError(
          str(describe(), " cannot take input ", in.str(), ": the kernel is larger than the padded image"));
    return {in.n, o_.out_channels, s.out_height(), s.out_width()};
  }
  std::vector<ParamSpec> params() const override {
    const std::size_t fan_in = static_cast<std::size_t>(o_.in_channels / o_.groups) * o_.kernel * o_.kernel;
    std::vector<ParamSpec> p{
        {"weight", {o_.out_channels, o_.in_channels / o_.groups, o_.kernel, o_.kernel}, fan_in, Init::kHeNormal}};
    p[0].matrix = true;
    if (o_.bias) p.push_back({"bias", {o_.out_channels}, 0, Init::kZeros});
    return p;
  }
  void prepare(backend::Backend& d, const TensorShape& max_in, int) override {
    workspace_ = d.allocate_floats(d.conv2d_workspace_floats(shape(max_in)));
  }
  void forward(backend::Backend& d, const Pass&, const TensorShape& in, const float* x, float* y) override {
    d.conv2d_forward(shape(in), x, params_, o_.bias ? params_ + weights() : nullptr, y, workspace_.floats());
  }
  void backward(backend::Backend& d, const Pass&, const TensorShape& in, const float* x, const float*, const float* dy,
                float* dx) override {
    d.conv2d_backward(shape(in), x, params_, dy, grads_, o_.bias ? grads_ + weights() : nullptr, dx,
                      workspace_.floats());
  }

 private:
  backend::Conv2dShape shape(const TensorShape& in) const {
    return {in.n, in.c, in.h, in.w, o_.out_channels, o_.kernel, o_.stride, o_.pad, o_.groups};
  }
  std::size_t weights() const {
    return static_cast<std::size_t>(o_.out_channels) * (o_.in_channels / o_.groups) * o_.kernel * o_.kernel;
  }
  Conv2dOptions o_;
  backend::DeviceBuffer workspace_;
};

}  // namespace

std::unique_ptr<Layer> make_conv2d(const Conv2dOptions& options) { return std::make_unique<Conv2d>(options); }
std::unique_ptr<Layer> make_conv2d(int in_channels, int out_channels, int kernel, int pad) {
  Conv2dOptions o;
  o.in_channels = in_channels, o.out_channels = out_channels, o.kernel = kernel, o.pad = pad;
  return make_conv2d(o);
}

}  // namespace drt::nn
