// The embeddings of a language model (GPT_DESIGN.md). Token embedding (torch.nn.Embedding): a
// sequence of T token ids (the data: floats holding whole numbers) becomes T rows of a [vocab,
// dim] table; its backward adds each position's gradient into its token's row (written, or added
// when a tied output head wrote the table's gradient first). Position embedding (nanoGPT's wpe):
// adds row t of a [context, dim] table to position t of a sequence, in place; rows past the
// data's length T get a zero gradient.
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/nn/layer.hpp"

namespace drt::nn {
namespace {

class TokenEmbedding final : public UnaryLayer {
 public:
  TokenEmbedding(int vocab, int dim, double init_std) : vocab_(vocab), dim_(dim), init_std_(init_std) {}
  std::string describe() const override { return str("embedding ", vocab_, "x", dim_); }
  TensorShape output_shape(const TensorShape& in) const override {
    if (!in.sequence || in.w != 1 || in.h != 1)
      throw ConfigError(str("embedding takes a sequence of token ids (a token data set, --context T), got ", in.str()));
    return TensorShape::seq(in.n, in.c, dim_);
  }
  std::vector<ParamSpec> params() const override {
    ParamSpec w{"weight", {vocab_, dim_}, 0, Init::kNormal};
    w.init_std = init_std_;
    return {w};
  }
  void forward(backend::Backend& d, const Pass&, const TensorShape& in, const float* x, float* y) override {
    d.embedding_forward(shape(in), x, params_, y);
  }
  void backward(backend::Backend& d, const Pass&, const TensorShape& in, const float* x, const float*, const float* dy,
                float* dx) override {
    d.embedding_backward(shape(in), x, dy, grads_, tied_owner_);
    if (dx) d.zero(dx, in.size() * sizeof(float));  // token ids have no gradient
  }

 private:
  backend::EmbeddingShape shape(const TensorShape& in) const { return {in.n * in.c, vocab_, dim_}; }
  int vocab_, dim_;
  double init_std_;
};

class PositionEmbedding final : public UnaryLayer {
 public:
  PositionEmbedding(int context, int dim, double init_std) : context_(context), dim_(dim), init_std_(init_std) {}
  std::string describe() const override { return str("pos_embedding ", context_, "x", dim_); }
  TensorShape output_shape(const TensorShape& in) const override {
    if (!in.sequence || in.w != dim_)
      throw ConfigError(str("pos_embedding takes a sequence of ", dim_, " features per position, got ", in.str()));
    if (in.c > context_)
      throw ConfigError(str("the sequence is ", in.c,
                            " positions long (the data's context T) but the position table has ", context_,
                            " rows (context=", context_, "); give context=", in.c, " or more, or a shorter --context"));
    return in;
  }
  std::vector<ParamSpec> params() const override {
    ParamSpec w{"weight", {context_, dim_}, 0, Init::kNormal};
    w.init_std = init_std_;
    return {w};
  }
  bool in_place() const override { return true; }
  void forward(backend::Backend& d, const Pass&, const TensorShape& in, const float* x, float* y) override {
    if (x != y) d.copy(y, x, in.size() * sizeof(float));
    d.add_bias_rows(y, params_, in.n, static_cast<int>(in.per_sample()));  // rows 0..T-1 of the table
  }
  void backward(backend::Backend& d, const Pass&, const TensorShape& in, const float*, const float*, const float* dy,
                float* dx) override {
    const std::size_t used = in.per_sample();
    d.bias_grad_rows(dy, grads_, in.n, static_cast<int>(used));
    const std::size_t rest = static_cast<std::size_t>(context_) * static_cast<std::size_t>(dim_) - used;
    if (rest) d.zero(grads_ + used, rest * sizeof(float));
    if (dx && dx != dy) d.copy(dx, dy, in.size() * sizeof(float));
  }

 private:
  int context_, dim_;
  double init_std_;
};

}  // namespace

std::unique_ptr<Layer> make_embedding(int vocab, int dim, double init_std) {
  return std::make_unique<TokenEmbedding>(vocab, dim, init_std);
}
std::unique_ptr<Layer> make_position_embedding(int context, int dim, double init_std) {
  return std::make_unique<PositionEmbedding>(context, dim, init_std);
}

}  // namespace drt::nn
