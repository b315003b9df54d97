// Causal multi-head self-attention (nanoGPT's CausalSelfAttention between its c_attn and c_proj
// linears, i.e. torch's scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p)): a
// sequence of T positions of 3D features (q, k, v, each D = heads x head_dim, head h in columns
// [h hd, (h + 1) hd)) becomes T positions of D. No parameters. In training the attention
// probabilities are dropped with probability `dropout`, the mask a hash of (seed, step, node,
// global sample, head, query, key) like the dropout layer's, regenerated in backward rather
// than stored. Kept between forward and backward: the output (the network's activation) and
// the log-sum-exp of each (sample, head, query), heads x T floats per sample
// (backend.hpp, AttentionShape).
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/kernels/rules.hpp"
#include "drtrain/nn/layer.hpp"

namespace drt::nn {
namespace {

class Attention final : public UnaryLayer {
 public:
  Attention(int heads, float dropout) : heads_(heads), dropout_(dropout) {
    if (heads < 1) throw ConfigError(str("attention heads=", heads, " must be at least 1"));
    if (!(dropout >= 0.0f && dropout < 1.0f))
      throw ConfigError(str("attention dropout=", dropout, " must be in [0, 1)"));
  }
  std::string describe() const override {
    return str("attention ", heads_, " heads", dropout_ > 0.0f ? str(" dropout ", dropout_) : "");
  }
  TensorShape output_shape(const TensorShape& in) const override {
    if (!in.sequence || in.w % (3 * heads_) != 0)
      throw ConfigError(str("attention takes a sequence of 3 x D features (q, k, v from one linear), D a multiple of "
                            "heads=",
                            heads_, "; got ", in.str()));
    return TensorShape::seq(in.n, in.c, in.w / 3);
  }
  bool keeps_output() const override { return true; }  // backward reads y
  void prepare(backend::Backend& d, const TensorShape& max_in, int index) override {
    lse_ = d.allocate_floats(static_cast<std::size_t>(max_in.n) * static_cast<std::size_t>(heads_) *
                             static_cast<std::size_t>(max_in.c));
    index_ = index;
  }
  void forward(backend::Backend& d, const Pass& pass, const TensorShape& in, const float* x, float* y) override {
    d.attention_forward(shape(pass, in), x, y, lse_.floats());
  }
  void backward(backend::Backend& d, const Pass& pass, const TensorShape& in, const float* x, const float* y,
                const float* dy, float* dx) override {
    if (dx) d.attention_backward(shape(pass, in), x, y, lse_.floats(), dy, dx);
  }

 private:
  backend::AttentionShape shape(const Pass& pass, const TensorShape& in) const {
    backend::AttentionShape s;
    s.batch = in.n, s.length = in.c, s.heads = heads_, s.head_dim = in.w / (3 * heads_);
    s.dropout = pass.training ? dropout_ : 0.0f;
    s.key = kernels::dropout_key(pass.seed, pass.step, index_);
    s.first_sample = pass.first_sample;
    return s;
  }
  int heads_;
  float dropout_;
  int index_ = 0;
  backend::DeviceBuffer lse_;
};

}  // namespace

std::unique_ptr<Layer> make_attention(int heads, float dropout) { return std::make_unique<Attention>(heads, dropout); }

}  // namespace drt::nn
