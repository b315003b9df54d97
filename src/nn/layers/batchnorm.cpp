// Batch normalisation (torch.nn.BatchNorm1d/2d): per-channel scale and shift (parameters
// "weight" and "bias"), running mean and variance (state "running_mean", "running_var").
// Training normalises with the tower's batch statistics and writes the running statistics'
// update, (new - current) * state_scale, into the state's gradient; the PS averages those
// updates over towers and workers (docs/TRAINING.md, "Batch norm in a PS system"). Evaluation normalises
// with the running statistics.
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/nn/layer.hpp"

namespace drt::nn {
namespace {

class BatchNorm final : public UnaryLayer {
 public:
  BatchNorm(int channels, float eps, float momentum) : channels_(channels), eps_(eps), momentum_(momentum) {
    if (channels < 1) throw ConfigError("batchnorm needs at least one channel");
    if (!(eps > 0.0f)) throw ConfigError(str("batchnorm eps=", eps, " must be positive"));
    if (!(momentum >= 0.0f && momentum <= 1.0f))
      throw ConfigError(str("batchnorm momentum=", momentum, " must be in [0, 1]"));
  }
  std::string describe() const override { return str("batchnorm ", channels_); }
  TensorShape output_shape(const TensorShape& in) const override {
    if (in.c != channels_) throw ConfigError(str(describe(), " takes ", channels_, " channels, got ", in.str()));
    return in;
  }
  std::vector<ParamSpec> params() const override {
    const std::vector<std::int64_t> c{channels_};
    return {{"weight", c, 0, Init::kOnes},
            {"bias", c, 0, Init::kZeros},
            {"running_mean", c, 0, Init::kZeros, true},
            {"running_var", c, 0, Init::kOnes, true}};
  }
  void prepare(backend::Backend& d, const TensorShape&, int) override {
    saved_ = d.allocate_floats(4 * static_cast<std::size_t>(channels_));
  }
  void forward(backend::Backend& d, const Pass& pass, const TensorShape& in, const float* x, float* y) override {
    const backend::BatchNormShape s = shape(in);
    const auto c = static_cast<std::size_t>(channels_);
    const float* gamma = params_;
    const float* beta = params_ + c;
    const float* mean = params_ + 2 * c;
    const float* var = params_ + 3 * c;
    if (!pass.training) return d.batchnorm_forward_infer(s, x, gamma, beta, mean, var, eps_, y);
    if (s.count() < 2)
      throw Error(str(describe(), ": a tower's batch of ", in.n, " sample(s) of ", in.h, "x", in.w,
                      " has one value per channel, so no variance; use larger batches per tower"));
    float* new_mean = saved_.floats() + 2 * c;
    float* new_var = saved_.floats() + 3 * c;
    d.batchnorm_forward_train(s, x, gamma, beta, eps_, y, saved_.floats(), saved_.floats() + c, momentum_, mean, var,
                              new_mean, new_var);
    // The state's gradient: (new - current) * state_scale.
    float* delta = grads_ + 2 * c;
    d.copy(delta, new_mean, 2 * c * sizeof(float));  // new_mean and new_var are adjacent, as are the state tensors
    d.axpby(-pass.state_scale, mean, pass.state_scale, delta, 2 * c);
  }
  void backward(backend::Backend& d, const Pass&, const TensorShape& in, const float* x, const float*, const float* dy,
                float* dx) override {
    d.batchnorm_backward(shape(in), x, dy, params_, saved_.floats(), saved_.floats() + channels_, eps_, dx, grads_,
                         grads_ + channels_);
  }

 private:
  backend::BatchNormShape shape(const TensorShape& in) const { return {in.n, in.c, in.h * in.w}; }
  int channels_;
  float eps_, momentum_;
  backend::DeviceBuffer saved_;  // mean, 1 / std, new running mean, new running variance
};

}  // namespace

std::unique_ptr<Layer> make_batchnorm(int channels, float eps, float momentum) {
  return std::make_unique<BatchNorm>(channels, eps, momentum);
}

}  // namespace drt::nn
