// The CPU backend, every layer and whole networks against float64 references written here from
// the definitions (plain loops, not copied from src/): forward outputs directly, gradients
// through central finite differences of the float64 reference, on odd shapes. The language-model
// layers (sequence linear, layer norm, embeddings, attention, tanh GELU) likewise, and a whole
// GPT (tied head, dropout) against a float64 executor of its graph.
//
// Tolerances are normwise: |actual_i - expected_i| <= tol * max_j |expected_j|, so that an entry
// near zero is judged against the scale of its tensor rather than against itself (float32
// rounding of a sum is proportional to the size of its terms, not of the result).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <ostream>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "drtrain/backend/backend.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/param_layout.hpp"
#include "drtrain/kernels/rules.hpp"
#include "drtrain/nn/layer.hpp"
#include "drtrain/nn/model_graph.hpp"
#include "drtrain/nn/model_spec.hpp"
#include "drtrain/nn/network.hpp"
#include "support/float64_checks.hpp"
#include "support/sequence_reference.hpp"

namespace drt::nn {
namespace {

using backend::Backend;
using backend::DeviceBuffer;
using float64_checks::all_close;
using float64_checks::central_difference;
using float64_checks::dot;
using float64_checks::download;
using float64_checks::finite_difference;
using float64_checks::FVec;
using float64_checks::max_abs;
using float64_checks::normal_floats;
using float64_checks::to_double;
using float64_checks::upload;
using float64_checks::Vec;
using Labels = std::vector<std::int32_t>;

// Forward: a float32 sum of K products rounds with an error of about sqrt(K) * 2^-24 times a
// typical term (K * 2^-24 at worst), while the outputs of random data are themselves about
// sqrt(K) times a typical term: a few 1e-7 of the output scale here (K <= 3136, plus the
// layers of a network). 1e-5 leaves margin for BLAS/oneDNN summation orders, yet any wrong
// index, missing term or transposition moves entries by O(1) of the scale and fails.
constexpr double kForwardTol = 1e-5;
// Gradients: the float32 backward (one more GEMM of the same kind) against central differences
// of the float64 reference with step h = 1e-6 * max(1, |v|): truncation error ~h^2 (zero for
// the piecewise-linear layers), round-off ~1e-16 * |L| / h ~ 1e-9; 1e-4 covers both and the
// float32 error of a deeper chain, and is still four orders below a real mistake.
constexpr double kGradTol = 1e-4;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---------------------------------------------------------------- helpers

FVec uniform_floats(std::size_t n, std::uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  FVec v(n);
  for (float& x : v) x = static_cast<float>(dist(rng));
  return v;
}

Vec scaled(Vec v, double factor) {
  for (double& x : v) x *= factor;
  return v;
}

DeviceBuffer upload_labels(Backend& device, const Labels& host) {
  DeviceBuffer buf = device.allocate(host.size() * sizeof(std::int32_t));
  device.copy_from_host(buf.ints(), host.data(), host.size() * sizeof(std::int32_t));
  return buf;
}

std::size_t numel(const std::vector<std::int64_t>& shape) {
  std::size_t n = 1;
  for (auto d : shape) n *= static_cast<std::size_t>(d);
  return n;
}

// ---------------------------------------------------------------- float64 references

// y[s][o] = b[o] + sum_i W[o][i] * x[s][i]; p = W [out x in] row-major, then b [out]. Only the
// outputs o in [o_begin, o_end) are written.
void ref_linear(const double* x, const double* p, int n, int in, int out, double* y, int o_begin, int o_end) {
  const double* bias = p + static_cast<std::size_t>(out) * in;
  for (int s = 0; s < n; ++s)
    for (int o = o_begin; o < o_end; ++o) {
      double sum = bias[o];
      for (int i = 0; i < in; ++i) sum += p[o * in + i] * x[s * in + i];
      y[s * out + o] = sum;
    }
}

struct ConvDims {
  int n, c, h, w, out, k, pad;
  int oh() const { return h + 2 * pad - k + 1; }
  int ow() const { return w + 2 * pad - k + 1; }
  std::size_t in_size() const { return static_cast<std::size_t>(n) * c * h * w; }
  std::size_t out_size() const { return static_cast<std::size_t>(n) * out * oh() * ow(); }
  std::size_t weights() const { return static_cast<std::size_t>(out) * c * k * k; }
  std::string name() const {
    return "n" + std::to_string(n) + "c" + std::to_string(c) + "h" + std::to_string(h) + "w" + std::to_string(w) + "o" +
           std::to_string(out) + "k" + std::to_string(k) + "p" + std::to_string(pad);
  }
};
void PrintTo(const ConvDims& d, std::ostream* os) { *os << d.name(); }

// y[s,o,r,q] = b[o] + sum_{c,i,j} W[o,c,i,j] * x[s,c,r-pad+i,q-pad+j], x = 0 outside the image;
// p = W [out x c x k x k], then b. Only output channels [o_begin, o_end) are written.
void ref_conv(const ConvDims& d, const double* x, const double* p, double* y, int o_begin, int o_end) {
  const double* bias = p + d.weights();
  const int oh = d.oh(), ow = d.ow();
  for (int s = 0; s < d.n; ++s)
    for (int o = o_begin; o < o_end; ++o) {
      double* plane = y + (static_cast<std::size_t>(s) * d.out + o) * oh * ow;
      std::fill(plane, plane + static_cast<std::size_t>(oh) * ow, bias[o]);
      for (int c = 0; c < d.c; ++c)
        for (int i = 0; i < d.k; ++i)
          for (int j = 0; j < d.k; ++j) {
            const double weight = p[((o * d.c + c) * d.k + i) * d.k + j];
            const double* image = x + (static_cast<std::size_t>(s) * d.c + c) * d.h * d.w;
            // Output columns q whose input column q - pad + j lies inside [0, w).
            const int q_begin = std::max(0, d.pad - j), q_end = std::min(ow, d.w + d.pad - j);
            for (int r = 0; r < oh; ++r) {
              const int row = r - d.pad + i;
              if (row < 0 || row >= d.h) continue;
              for (int q = q_begin; q < q_end; ++q) plane[r * ow + q] += weight * image[row * d.w + q - d.pad + j];
            }
          }
    }
}

// The adjoint of ref_conv for dy: each term W[o,c,i,j] * x[s,c,row,col] of y[s,o,r,q] sends
// dy * x to dW and dy * W to dx; db[o] sums dy over samples and pixels. Checked against finite
// differences on the small shapes, then used where finite differences would be too slow.
void ref_conv_backward(const ConvDims& d, const Vec& x, const Vec& p, const Vec& dy, Vec& dx, Vec& dp) {
  dx.assign(d.in_size(), 0.0);
  dp.assign(d.weights() + d.out, 0.0);
  const int oh = d.oh(), ow = d.ow();
  for (int s = 0; s < d.n; ++s)
    for (int o = 0; o < d.out; ++o)
      for (int r = 0; r < oh; ++r)
        for (int q = 0; q < ow; ++q) {
          const double g = dy[((static_cast<std::size_t>(s) * d.out + o) * oh + r) * ow + q];
          dp[d.weights() + o] += g;
          for (int c = 0; c < d.c; ++c)
            for (int i = 0; i < d.k; ++i)
              for (int j = 0; j < d.k; ++j) {
                const int row = r - d.pad + i, col = q - d.pad + j;
                if (row < 0 || row >= d.h || col < 0 || col >= d.w) continue;
                const std::size_t xi = ((static_cast<std::size_t>(s) * d.c + c) * d.h + row) * d.w + col;
                const std::size_t wi = ((static_cast<std::size_t>(o) * d.c + c) * d.k + i) * d.k + j;
                dp[wi] += g * x[xi];
                dx[xi] += g * p[wi];
              }
        }
}

struct PoolDims {
  int n, c, h, w, window;
  int oh() const { return h / window; }  // floor: a leftover row or column is ignored
  int ow() const { return w / window; }
  std::size_t in_size() const { return static_cast<std::size_t>(n) * c * h * w; }
  std::size_t out_size() const { return static_cast<std::size_t>(n) * c * oh() * ow(); }
  std::string name() const {
    return "n" + std::to_string(n) + "c" + std::to_string(c) + "h" + std::to_string(h) + "w" + std::to_string(w) +
           "win" + std::to_string(window);
  }
};
void PrintTo(const PoolDims& d, std::ostream* os) { *os << d.name(); }

// y[s,c,r,q] = max_{i,j < window} x[s,c,r*window+i,q*window+j].
void ref_maxpool(const PoolDims& d, const double* x, double* y) {
  const int oh = d.oh(), ow = d.ow();
  for (int plane = 0; plane < d.n * d.c; ++plane)
    for (int r = 0; r < oh; ++r)
      for (int q = 0; q < ow; ++q) {
        double best = -std::numeric_limits<double>::infinity();
        for (int i = 0; i < d.window; ++i)
          for (int j = 0; j < d.window; ++j)
            best = std::max(best, x[(plane * d.h + r * d.window + i) * d.w + q * d.window + j]);
        y[(plane * oh + r) * ow + q] = best;
      }
}

void ref_relu(const double* x, double* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = x[i] > 0.0 ? x[i] : 0.0;
}

// -log softmax(z)[label] = log(sum_j exp(z_j)) - z_label, with the maximum taken out first.
double ref_cross_entropy(const double* z, int classes, int label) {
  const double top = *std::max_element(z, z + classes);
  double sum = 0.0;
  for (int j = 0; j < classes; ++j) sum += std::exp(z[j] - top);
  return std::log(sum) + top - z[label];
}

int ref_argmax(const double* z, int classes) {
  return static_cast<int>(std::max_element(z, z + classes) - z);  // the first maximum
}

struct RefLoss {
  double loss = 0.0;
  std::int64_t correct = 0;
};

RefLoss ref_loss_sum(const Vec& logits, const Labels& labels, int classes) {
  RefLoss sums;
  for (std::size_t r = 0; r < labels.size(); ++r) {
    const double* z = logits.data() + r * classes;
    sums.loss += ref_cross_entropy(z, classes, labels[r]);
    sums.correct += ref_argmax(z, classes) == labels[r];
  }
  return sums;
}

// ---------------------------------------------------------------- float64 reference networks

struct RefLayer {
  enum Kind { kLinear, kRelu, kConv, kPool, kFlatten };
  Kind kind;
  int in, out, kernel, pad;  // linear: in, out; conv: all four; pool: kernel = window
  std::size_t param_count() const {
    if (kind == kLinear) return static_cast<std::size_t>(in) * out + out;
    if (kind == kConv) return static_cast<std::size_t>(out) * in * kernel * kernel + out;
    return 0;
  }
};
RefLayer linear(int in, int out) { return {RefLayer::kLinear, in, out, 0, 0}; }
RefLayer conv(int in, int out, int kernel, int pad) { return {RefLayer::kConv, in, out, kernel, pad}; }
RefLayer relu() { return {RefLayer::kRelu, 0, 0, 0, 0}; }
RefLayer maxpool(int window) { return {RefLayer::kPool, 0, 0, window, 0}; }
RefLayer flatten() { return {RefLayer::kFlatten, 0, 0, 0, 0}; }

struct RefAct {
  int n = 0, c = 0, h = 1, w = 1;
  Vec v;
};

// The (zeroed) output of `layer` for input `in`.
RefAct ref_output_shape(const RefLayer& layer, const RefAct& in) {
  RefAct out{in.n, in.c, in.h, in.w, {}};
  if (layer.kind == RefLayer::kLinear) {
    out = {in.n, layer.out, 1, 1, {}};
  } else if (layer.kind == RefLayer::kConv) {
    const int grow = 2 * layer.pad - layer.kernel + 1;
    out = {in.n, layer.out, in.h + grow, in.w + grow, {}};
  } else if (layer.kind == RefLayer::kPool) {
    out = {in.n, in.c, in.h / layer.kernel, in.w / layer.kernel, {}};
  } else if (layer.kind == RefLayer::kFlatten) {
    out = {in.n, in.c * in.h * in.w, 1, 1, {}};
  }
  out.v.assign(static_cast<std::size_t>(out.n) * out.c * out.h * out.w, 0.0);
  return out;
}

// Computes `layer` on `in` into `out` (shaped by ref_output_shape); linear and conv write only
// their outputs (channels) [o_begin, o_end), the others write everything.
void ref_apply(const RefLayer& layer, const RefAct& in, const double* p, RefAct& out, int o_begin, int o_end) {
  switch (layer.kind) {
    case RefLayer::kLinear:
      if (in.c * in.h * in.w != layer.in) throw std::logic_error("reference linear: bad input");
      ref_linear(in.v.data(), p, in.n, layer.in, layer.out, out.v.data(), o_begin, o_end);
      break;
    case RefLayer::kConv:
      if (in.c != layer.in) throw std::logic_error("reference conv: bad input");
      ref_conv({in.n, in.c, in.h, in.w, layer.out, layer.kernel, layer.pad}, in.v.data(), p, out.v.data(), o_begin,
               o_end);
      break;
    case RefLayer::kPool: ref_maxpool({in.n, in.c, in.h, in.w, layer.kernel}, in.v.data(), out.v.data()); break;
    case RefLayer::kRelu: ref_relu(in.v.data(), out.v.data(), in.v.size()); break;
    case RefLayer::kFlatten: out.v = in.v; break;
  }
}

struct RefNet {
  std::vector<RefLayer> layers;
  std::vector<std::size_t> offsets;  // first parameter of each layer in the flat vector
  std::size_t total = 0;
  int classes = 10;
};

RefNet make_ref_net(std::vector<RefLayer> layers) {
  RefNet net;
  net.layers = std::move(layers);
  for (const RefLayer& layer : net.layers) {
    net.offsets.push_back(net.total);
    net.total += layer.param_count();
  }
  return net;
}

// The documented architectures (model_spec.hpp), restated.
RefNet ref_cnn() {
  return make_ref_net({conv(1, 32, 5, 2), relu(), maxpool(2), conv(32, 64, 5, 2), relu(), maxpool(2), flatten(),
                       linear(3136, 512), relu(), linear(512, 10)});
}
RefNet ref_mlp_784_7_5_10() { return make_ref_net({linear(784, 7), relu(), linear(7, 5), relu(), linear(5, 10)}); }
RefNet ref_mlp() { return make_ref_net({linear(784, 512), relu(), linear(512, 256), relu(), linear(256, 10)}); }

// Runs layers [first, end) from `act`, the input of layer `first`; returns the logits. With
// `inputs`, records the input of every layer run and then the logits.
RefAct ref_run(const RefNet& net, const Vec& params, RefAct act, std::size_t first,
               std::vector<RefAct>* inputs = nullptr) {
  for (std::size_t i = first; i < net.layers.size(); ++i) {
    RefAct next = ref_output_shape(net.layers[i], act);
    ref_apply(net.layers[i], act, params.data() + net.offsets[i], next, 0, net.layers[i].out);
    if (inputs) inputs->push_back(std::move(act));
    act = std::move(next);
  }
  if (inputs) inputs->push_back(act);
  return act;
}

// The float64 network at fixed parameters and batch, and d(sum of losses)/d(params[i]) by central
// differences that recompute only what params[i] can change: its own output channel (conv) or
// feature (linear), then the layers after it.
class RefNetwork {
 public:
  RefNetwork(RefNet net, Vec params, RefAct x, Labels labels)
      : net_(std::move(net)), params_(std::move(params)), labels_(std::move(labels)) {
    ref_run(net_, params_, std::move(x), 0, &acts_);
  }
  RefLoss loss() const { return ref_loss_sum(acts_.back().v, labels_, net_.classes); }
  double gradient(std::size_t i) {
    const std::size_t layer = layer_of(i);
    const int output = output_of(layer, i);
    return central_difference([&] { return loss_recomputed(layer, output); }, params_[i]);
  }

 private:
  std::size_t layer_of(std::size_t i) const {
    std::size_t layer = net_.layers.size() - 1;
    while (net_.offsets[layer] > i || net_.layers[layer].param_count() == 0) --layer;
    return layer;
  }
  int output_of(std::size_t layer, std::size_t i) const {
    const RefLayer& l = net_.layers[layer];
    const std::size_t local = i - net_.offsets[layer], weights = l.param_count() - l.out;
    return static_cast<int>(local < weights ? local / (weights / l.out) : local - weights);
  }
  double loss_recomputed(std::size_t layer, int output) const {
    RefAct out = acts_[layer + 1];
    ref_apply(net_.layers[layer], acts_[layer], params_.data() + net_.offsets[layer], out, output, output + 1);
    return ref_loss_sum(ref_run(net_, params_, std::move(out), layer + 1).v, labels_, net_.classes).loss;
  }

  RefNet net_;
  Vec params_;
  Labels labels_;
  std::vector<RefAct> acts_;  // acts_[i] = input of layer i; back() = logits
};

// ---------------------------------------------------------------- running a layer

struct LayerRun {
  FVec y, dx, dparams;
};

// forward then backward with dy, on buffers pre-filled with NaN (the layer must write, not add).
// The layer is prepared for `prepare_n` >= in.n samples.
LayerRun run_layer(Backend& device, Layer& layer, const TensorShape& in, const FVec& x, const FVec& params,
                   const FVec& dy, int prepare_n) {
  TensorShape max_in = in;
  max_in.n = prepare_n;
  layer.prepare(device, {max_in}, 0);
  const TensorShape out = layer.output_shape({in});
  DeviceBuffer xb = upload(device, x), pb = upload(device, params), dyb = upload(device, dy);
  DeviceBuffer gb = upload(device, FVec(params.size(), kNaN)), yb = upload(device, FVec(out.size(), kNaN));
  DeviceBuffer dxb = upload(device, FVec(x.size(), kNaN));
  layer.bind(pb.floats(), gb.floats());
  layer.forward(device, Pass{}, {in}, {xb.floats()}, yb.floats());
  layer.backward(device, Pass{}, {in}, {xb.floats()}, yb.floats(), dyb.floats(), {dxb.floats()});
  return {download(device, yb.floats(), out.size()), download(device, dxb.floats(), x.size()),
          download(device, gb.floats(), params.size())};
}

using RefFn = std::function<Vec(const Vec& x, const Vec& p)>;

// Checks a layer's output against `reference`, and its input and parameter gradients against
// central differences of L = sum_i r_i * reference(x, p)_i (r random, passed as dy).
// The device must outlive the layer (a prepared layer holds device buffers).
void check_layer(Backend& device, Layer& layer, const TensorShape& in, const FVec& x, const FVec& params,
                 const RefFn& reference) {
  std::size_t declared = 0;
  for (const ParamSpec& spec : layer.params()) declared += numel(spec.shape);
  ASSERT_EQ(declared, params.size()) << layer.describe();
  const TensorShape out = layer.output_shape({in});
  const FVec r = normal_floats(out.size(), 99);
  const LayerRun got = run_layer(device, layer, in, x, params, r, in.n + 2);

  Vec xd = to_double(x), pd = to_double(params);
  const Vec rd = to_double(r);
  EXPECT_TRUE(all_close(got.y, reference(xd, pd), kForwardTol)) << layer.describe() << ": forward";
  const auto objective = [&] { return dot(rd, reference(xd, pd)); };
  EXPECT_TRUE(all_close(got.dx, finite_difference(objective, xd), kGradTol)) << layer.describe() << ": dx";
  EXPECT_TRUE(all_close(got.dparams, finite_difference(objective, pd), kGradTol)) << layer.describe() << ": dparams";
}

// ---------------------------------------------------------------- layers

struct LinearDims {
  int n, in, out;
};
void PrintTo(const LinearDims& d, std::ostream* os) { *os << d.n << "x" << d.in << "->" << d.out; }

class LinearLayer : public testing::TestWithParam<LinearDims> {};

TEST_P(LinearLayer, MatchesReferenceAndFiniteDifferences) {
  const LinearDims d = GetParam();
  auto device = backend::make_cpu_backend();
  auto layer = make_linear(d.in, d.out);
  EXPECT_EQ(layer->output_shape({{d.n, d.in, 1, 1}}).c, d.out);
  const FVec x = normal_floats(static_cast<std::size_t>(d.n) * d.in, 1);
  const FVec params = normal_floats(static_cast<std::size_t>(d.out) * d.in + d.out, 2, 0.5);
  check_layer(*device, *layer, {d.n, d.in, 1, 1}, x, params, [d](const Vec& xv, const Vec& pv) {
    Vec y(static_cast<std::size_t>(d.n) * d.out);
    ref_linear(xv.data(), pv.data(), d.n, d.in, d.out, y.data(), 0, d.out);
    return y;
  });
}

INSTANTIATE_TEST_SUITE_P(OddShapes, LinearLayer,
                         testing::Values(LinearDims{3, 7, 5}, LinearDims{1, 1, 1}, LinearDims{5, 17, 3}),
                         [](const testing::TestParamInfo<LinearDims>& p) {
                           const LinearDims& d = p.param;
                           return "n" + std::to_string(d.n) + "in" + std::to_string(d.in) + "out" +
                                  std::to_string(d.out);
                         });

TEST(LinearLayerShape, RejectsAnInputOfTheWrongSize) {
  auto layer = make_linear(7, 5);
  EXPECT_THROW(layer->output_shape({{2, 8, 1, 1}}), ConfigError);
  EXPECT_EQ(layer->output_shape({{2, 7, 1, 1}}).size(), 10u);
  EXPECT_EQ(layer->output_shape({{2, 1, 7, 1}}).c, 5);  // any (c, h, w) with 7 values per sample
}

// Inputs at least 0.05 away from the kink at 0, so that finite differences see one slope.
FVec relu_inputs(std::size_t n) {
  FVec x = normal_floats(n, 11);
  for (float& v : x)
    if (std::abs(v) < 0.05f) v += v < 0.0f ? -0.05f : 0.05f;
  return x;
}

TEST(ReluLayer, MatchesReferenceAndFiniteDifferences) {
  const TensorShape in{2, 3, 5, 7};
  auto device = backend::make_cpu_backend();
  auto layer = make_relu();
  EXPECT_TRUE(layer->params().empty());
  check_layer(*device, *layer, in, relu_inputs(in.size()), {}, [](const Vec& x, const Vec&) {
    Vec y(x.size());
    ref_relu(x.data(), y.data(), x.size());
    return y;
  });
}

TEST(ReluLayer, InPlaceEqualsOutOfPlaceAndZeroGetsNoGradient) {
  auto device = backend::make_cpu_backend();
  const TensorShape in{3, 1, 1, 5};
  const FVec x = {1.5f, -2.0f, 0.0f, -0.0f, 3.0f, -1.0f, 0.25f, 0.0f, 7.0f, -7.0f, 1e-30f, -1e-30f, 2.0f, 0.5f, -0.5f};
  const FVec dy = normal_floats(in.size(), 12);
  auto layer = make_relu();
  ASSERT_TRUE(layer->in_place());
  const LayerRun apart = run_layer(*device, *layer, in, x, {}, dy, in.n);
  for (std::size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(apart.y[i], x[i] > 0.0f ? x[i] : 0.0f) << i;
    EXPECT_EQ(apart.dx[i], x[i] > 0.0f ? dy[i] : 0.0f) << i;  // d/dx at 0 taken as 0, as torch
  }
  DeviceBuffer a = upload(*device, x), g = upload(*device, dy);
  layer->forward(*device, Pass{}, {in}, {a.floats()}, a.floats());
  layer->backward(*device, Pass{}, {in}, {nullptr}, a.floats(), g.floats(), {g.floats()});
  EXPECT_EQ(download(*device, a.floats(), x.size()), apart.y);
  EXPECT_EQ(download(*device, g.floats(), x.size()), apart.dx);
}

TEST(FlattenLayer, ReshapesAndPassesGradientsThrough) {
  const TensorShape in{2, 3, 5, 7};
  auto device = backend::make_cpu_backend();
  auto layer = make_flatten();
  const TensorShape out = layer->output_shape({in});
  EXPECT_EQ(out.n, 2);
  EXPECT_EQ(out.c, 105);
  EXPECT_EQ(out.h * out.w, 1);
  check_layer(*device, *layer, in, normal_floats(in.size(), 13), {}, [](const Vec& x, const Vec&) { return x; });
}

TEST(FlattenLayer, InPlaceLeavesTheBufferAlone) {
  auto device = backend::make_cpu_backend();
  auto layer = make_flatten();
  const TensorShape in{2, 3, 1, 3};
  const FVec x = normal_floats(in.size(), 14);
  DeviceBuffer a = upload(*device, x);
  layer->forward(*device, Pass{}, {in}, {a.floats()}, a.floats());
  layer->backward(*device, Pass{}, {in}, {a.floats()}, a.floats(), a.floats(), {a.floats()});
  EXPECT_EQ(download(*device, a.floats(), x.size()), x);
}

Vec ref_conv_all(const ConvDims& d, const Vec& x, const Vec& p) {
  Vec y(d.out_size());
  ref_conv(d, x.data(), p.data(), y.data(), 0, d.out);
  return y;
}

const ConvDims kOddConvs[] = {{2, 3, 7, 6, 4, 3, 1}, {2, 3, 7, 6, 4, 5, 2}, {2, 3, 7, 6, 4, 3, 0},
                              {1, 2, 5, 5, 3, 5, 0}, {3, 1, 4, 9, 2, 1, 0}, {1, 2, 3, 2, 2, 5, 2}};

// The analytic reference backward (used by ConvLargeBatch) agrees with finite differences.
class ConvReference : public testing::TestWithParam<ConvDims> {};

TEST_P(ConvReference, BackwardMatchesFiniteDifferences) {
  const ConvDims d = GetParam();
  Vec x = to_double(normal_floats(d.in_size(), 23)), p = to_double(normal_floats(d.weights() + d.out, 24));
  const Vec dy = to_double(normal_floats(d.out_size(), 25));
  Vec dx, dp;
  ref_conv_backward(d, x, p, dy, dx, dp);
  const auto objective = [&] { return dot(dy, ref_conv_all(d, x, p)); };
  EXPECT_TRUE(all_close(dx, finite_difference(objective, x), 1e-7));
  EXPECT_TRUE(all_close(dp, finite_difference(objective, p), 1e-7));
}

INSTANTIATE_TEST_SUITE_P(OddShapes, ConvReference, testing::ValuesIn(kOddConvs),
                         [](const testing::TestParamInfo<ConvDims>& p) { return p.param.name(); });

// Both CPU convolutions: im2col + GEMM, and oneDNN where this build has it.
const char* conv_name(backend::CpuConv conv) { return conv == backend::CpuConv::kOneDnn ? "onednn" : "im2col"; }

std::vector<backend::CpuConv> available_convs() {
  std::vector<backend::CpuConv> convs = {backend::CpuConv::kIm2col};
  if (backend::onednn_available()) convs.push_back(backend::CpuConv::kOneDnn);
  return convs;
}

using ConvParam = std::tuple<ConvDims, backend::CpuConv>;

std::string conv_param_name(const testing::TestParamInfo<ConvParam>& p) {
  return std::get<0>(p.param).name() + "_" + conv_name(std::get<1>(p.param));
}

class ConvLayer : public testing::TestWithParam<ConvParam> {};

TEST_P(ConvLayer, MatchesReferenceAndFiniteDifferences) {
  const auto [d, conv] = GetParam();
  if (conv == backend::CpuConv::kOneDnn && !backend::onednn_available()) GTEST_SKIP() << "built without oneDNN";
  auto device = backend::make_cpu_backend(conv);
  auto layer = make_conv2d(d.c, d.out, d.k, d.pad);
  const TensorShape in{d.n, d.c, d.h, d.w};
  const TensorShape out = layer->output_shape({in});
  EXPECT_EQ(out.c, d.out);
  EXPECT_EQ(out.h, d.oh());
  EXPECT_EQ(out.w, d.ow());
  const FVec x = normal_floats(d.in_size(), 21);
  const FVec params = normal_floats(d.weights() + d.out, 22, 0.5);
  check_layer(*device, *layer, in, x, params,
              [d = d](const Vec& xv, const Vec& pv) { return ref_conv_all(d, xv, pv); });
}

INSTANTIATE_TEST_SUITE_P(OddShapes, ConvLayer,
                         testing::Combine(testing::ValuesIn(kOddConvs),
                                          testing::Values(backend::CpuConv::kIm2col, backend::CpuConv::kOneDnn)),
                         conv_param_name);

// Batches large enough for the im2col convolution to split them into several groups of images,
// with a short last group; backward against the analytic float64 adjoint.
class ConvLargeBatch : public testing::TestWithParam<ConvParam> {};

TEST_P(ConvLargeBatch, MatchesReference) {
  const auto [d, conv] = GetParam();
  if (conv == backend::CpuConv::kOneDnn && !backend::onednn_available()) GTEST_SKIP() << "built without oneDNN";
  auto device = backend::make_cpu_backend(conv);
  auto layer = make_conv2d(d.c, d.out, d.k, d.pad);
  const FVec x = normal_floats(d.in_size(), 31), params = normal_floats(d.weights() + d.out, 32, 0.2);
  const FVec dy = normal_floats(d.out_size(), 33);
  const LayerRun got = run_layer(*device, *layer, {d.n, d.c, d.h, d.w}, x, params, dy, d.n);
  Vec dx, dp;
  ref_conv_backward(d, to_double(x), to_double(params), to_double(dy), dx, dp);
  EXPECT_TRUE(all_close(got.y, ref_conv_all(d, to_double(x), to_double(params)), kForwardTol));
  EXPECT_TRUE(all_close(got.dx, dx, kGradTol));
  EXPECT_TRUE(all_close(got.dparams, dp, kGradTol));
}

// 3*25*61*59 floats of columns per image: groups of 7 images (7 + 2); 288*52*53 per image:
// groups of 2 (2 + 1).
const ConvDims kLargeConvs[] = {{9, 3, 61, 59, 4, 5, 2}, {3, 32, 52, 53, 2, 3, 1}};
INSTANTIATE_TEST_SUITE_P(Groups, ConvLargeBatch,
                         testing::Combine(testing::ValuesIn(kLargeConvs),
                                          testing::Values(backend::CpuConv::kIm2col, backend::CpuConv::kOneDnn)),
                         conv_param_name);

TEST(ConvLayerShape, RejectsWrongChannelsAndTooSmallInputs) {
  auto layer = make_conv2d(3, 4, 5, 0);
  EXPECT_THROW(layer->output_shape({{1, 2, 7, 7}}), ConfigError);
  EXPECT_THROW(layer->output_shape({{1, 3, 4, 7}}), ConfigError);
  EXPECT_EQ(layer->output_shape({{1, 3, 5, 7}}).w, 3);
  const auto params = layer->params();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].shape, (std::vector<std::int64_t>{4, 3, 5, 5}));
  EXPECT_EQ(params[0].fan_in, 75u);
  EXPECT_EQ(params[1].shape, (std::vector<std::int64_t>{4}));
}

// Distinct values at least 0.01 apart in every window: no ties, and a 1e-6 step never changes
// which input wins.
FVec untied_inputs(std::size_t n, std::uint64_t seed) {
  std::vector<int> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = static_cast<int>(i);
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  FVec x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>((order[i] - static_cast<double>(n) / 2) * 0.0137);
  return x;
}

class MaxPoolLayer : public testing::TestWithParam<PoolDims> {};

TEST_P(MaxPoolLayer, MatchesReferenceAndFiniteDifferences) {
  const PoolDims d = GetParam();
  auto device = backend::make_cpu_backend();
  auto layer = make_maxpool2d(d.window);
  const TensorShape in{d.n, d.c, d.h, d.w};
  const TensorShape out = layer->output_shape({in});
  EXPECT_EQ(out.h, d.oh());
  EXPECT_EQ(out.w, d.ow());
  check_layer(*device, *layer, in, untied_inputs(d.in_size(), 41), {}, [d](const Vec& x, const Vec&) {
    Vec y(d.out_size());
    ref_maxpool(d, x.data(), y.data());
    return y;
  });
}

INSTANTIATE_TEST_SUITE_P(OddShapes, MaxPoolLayer,
                         testing::Values(PoolDims{2, 3, 6, 8, 2}, PoolDims{2, 3, 7, 5, 2}, PoolDims{2, 3, 7, 5, 3},
                                         PoolDims{1, 2, 2, 3, 2}),
                         [](const testing::TestParamInfo<PoolDims>& p) { return p.param.name(); });

// With ties (inputs drawn from {0, 1, 2}), the first maximum of a window in row-major order is
// the output's argmax and gets its whole gradient, as in torch. Window 2 and window 3.
class MaxPoolTies : public testing::TestWithParam<int> {};

TEST_P(MaxPoolTies, TheFirstMaximumInRowMajorOrderTakesTheGradient) {
  const PoolDims d{2, 2, 2 * GetParam() + 1, 5 * GetParam() + 1, GetParam()};
  FVec x(d.in_size());
  std::mt19937_64 rng(42);
  for (float& v : x) v = static_cast<float>(rng() % 3);
  const FVec dy = normal_floats(d.out_size(), 43);
  FVec y(d.out_size()), dx(d.in_size(), 0.0f);
  for (int plane = 0, o = 0; plane < d.n * d.c; ++plane)
    for (int r = 0; r < d.oh(); ++r)
      for (int q = 0; q < d.ow(); ++q, ++o) {
        int at = -1;
        for (int i = 0; i < d.window; ++i)
          for (int j = 0; j < d.window; ++j) {
            const int idx = (plane * d.h + r * d.window + i) * d.w + q * d.window + j;
            if (at < 0 || x[idx] > x[at]) at = idx;
          }
        y[o] = x[at];
        dx[at] = dy[o];
      }
  auto device = backend::make_cpu_backend();
  auto layer = make_maxpool2d(d.window);
  const LayerRun got = run_layer(*device, *layer, {d.n, d.c, d.h, d.w}, x, {}, dy, d.n);
  EXPECT_EQ(got.y, y);
  EXPECT_EQ(got.dx, dx);
}

INSTANTIATE_TEST_SUITE_P(Windows, MaxPoolTies, testing::Values(2, 3));

// ---------------------------------------------------------------- backend

TEST(CpuBackend, AllocatesZeroedMemoryAndCopies) {
  auto device = backend::make_cpu_backend();
  EXPECT_EQ(device->name().rfind("cpu", 0), 0u) << device->name();
  DeviceBuffer a = device->allocate_floats(1001);
  ASSERT_NE(a.floats(), nullptr);
  EXPECT_EQ(a.bytes(), 1001 * sizeof(float));
  EXPECT_EQ(download(*device, a.floats(), 1001), FVec(1001, 0.0f));
  const FVec host = normal_floats(1001, 51);
  device->copy_from_host(a.floats(), host.data(), host.size() * sizeof(float));
  DeviceBuffer b = device->allocate_floats(1001);
  device->copy(b.floats(), a.floats(), host.size() * sizeof(float));
  DeviceBuffer moved = std::move(b);
  EXPECT_EQ(b.floats(), nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  EXPECT_EQ(b.bytes(), 0u);
  EXPECT_EQ(download(*device, moved.floats(), host.size()), host);
}

TEST(CpuBackend, OneDnnConvolutionAndGemmOnlyWhenBuiltWithIt) {
  using backend::CpuConv;
  using backend::CpuGemm;
  if (backend::onednn_available()) {
    EXPECT_NE(backend::make_cpu_backend(CpuConv::kOneDnn), nullptr);
    EXPECT_EQ(backend::make_cpu_backend(CpuConv::kIm2col, CpuGemm::kOneDnn)->name(), "cpu (im2col conv, oneDNN GEMM)");
    EXPECT_EQ(backend::make_cpu_backend()->name(), "cpu (oneDNN conv, oneDNN GEMM)");
  } else {
    EXPECT_THROW(backend::make_cpu_backend(CpuConv::kOneDnn), Error);
    EXPECT_THROW(backend::make_cpu_backend(CpuConv::kIm2col, CpuGemm::kOneDnn), Error);
    EXPECT_EQ(backend::make_cpu_backend()->name(), "cpu (im2col conv, OpenBLAS GEMM)");
  }
  EXPECT_EQ(backend::make_cpu_backend(CpuConv::kIm2col, CpuGemm::kOpenBlas)->name(),
            "cpu (im2col conv, OpenBLAS GEMM)");
}

// C = alpha * op(A) op(B) + beta * C with op(A)[i][l] = ta ? A[l][i] (A is k x m) : A[i][l]
// (A is m x k), and likewise for B.
Vec ref_gemm(bool ta, bool tb, int m, int n, int k, double alpha, const Vec& a, const Vec& b, double beta, Vec c) {
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int l = 0; l < k; ++l) sum += (ta ? a[l * m + i] : a[i * k + l]) * (tb ? b[j * k + l] : b[l * n + j]);
      c[i * n + j] = alpha * sum + (beta == 0.0 ? 0.0 : beta * c[i * n + j]);
    }
  return c;
}

// Every GEMM library the CPU backend can use (--cpu-gemm), every transposition.
using GemmParam = std::tuple<backend::CpuGemm, bool, bool, std::array<int, 3>>;
class Gemm : public testing::TestWithParam<GemmParam> {};

TEST_P(Gemm, MatchesReferenceForEveryTransposition) {
  const auto [library, ta, tb, mnk] = GetParam();
  const auto [m, n, k] = mnk;
  if (library == backend::CpuGemm::kOneDnn && !backend::onednn_available()) GTEST_SKIP() << "built without oneDNN";
  auto device = backend::make_cpu_backend(backend::CpuConv::kAuto, library);
  const FVec a = normal_floats(static_cast<std::size_t>(m) * k, 61),
             b = normal_floats(static_cast<std::size_t>(k) * n, 62);
  const FVec c = normal_floats(static_cast<std::size_t>(m) * n, 63);
  DeviceBuffer ab = upload(*device, a), bb = upload(*device, b), cb = upload(*device, c);
  device->gemm(ta, tb, m, n, k, 0.75f, ab.floats(), bb.floats(), -0.5f, cb.floats());
  EXPECT_TRUE(all_close(download(*device, cb.floats(), c.size()),
                        ref_gemm(ta, tb, m, n, k, 0.75, to_double(a), to_double(b), -0.5, to_double(c)), kForwardTol));
  // beta = 0 overwrites C, whatever it held (BLAS convention; the layers rely on it).
  DeviceBuffer nan = upload(*device, FVec(c.size(), kNaN));
  device->gemm(ta, tb, m, n, k, -1.25f, ab.floats(), bb.floats(), 0.0f, nan.floats());
  EXPECT_TRUE(all_close(download(*device, nan.floats(), c.size()),
                        ref_gemm(ta, tb, m, n, k, -1.25, to_double(a), to_double(b), 0.0, to_double(c)), kForwardTol));
}

std::string gemm_name(const testing::TestParamInfo<GemmParam>& p) {
  const std::array<int, 3>& mnk = std::get<3>(p.param);
  return (std::get<0>(p.param) == backend::CpuGemm::kOneDnn ? "onednn_" : "openblas_") +
         std::string(std::get<1>(p.param) ? "T" : "N") + (std::get<2>(p.param) ? "T" : "N") + "_" +
         std::to_string(mnk[0]) + "x" + std::to_string(mnk[1]) + "x" + std::to_string(mnk[2]);
}

using Sizes = std::array<int, 3>;  // m, n, k
INSTANTIATE_TEST_SUITE_P(OddSizes, Gemm,
                         testing::Combine(testing::Values(backend::CpuGemm::kOpenBlas, backend::CpuGemm::kOneDnn),
                                          testing::Bool(), testing::Bool(),
                                          testing::Values(Sizes{1, 1, 1}, Sizes{5, 7, 3}, Sizes{37, 29, 53},
                                                          Sizes{3, 65, 129}, Sizes{64, 130, 784})),
                         gemm_name);

TEST(CpuBackend, Axpby) {
  auto device = backend::make_cpu_backend();
  const FVec x = normal_floats(1031, 71), y = normal_floats(1031, 72);
  DeviceBuffer xb = upload(*device, x), yb = upload(*device, y);
  device->axpby(0.5f, xb.floats(), -2.0f, yb.floats(), x.size());
  Vec expected(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) expected[i] = 0.5 * x[i] - 2.0 * y[i];
  // Two float32 roundings per element.
  EXPECT_TRUE(all_close(download(*device, yb.floats(), y.size()), expected, 1e-6));
  device->axpby(3.0f, xb.floats(), 0.0f, yb.floats(), 7);  // only the first 7
  const FVec after = download(*device, yb.floats(), y.size());
  for (std::size_t i = 0; i < 7; ++i) EXPECT_EQ(after[i], 3.0f * x[i]) << i;
  EXPECT_EQ(after[7], static_cast<float>(expected[7]));
}

double ref_cross_entropy_sum(const Vec& logits, const Labels& labels, int classes) {
  return ref_loss_sum(logits, labels, classes).loss;
}

TEST(CpuBackend, SoftmaxCrossEntropyMatchesReferenceAndFiniteDifferences) {
  const int rows = 6, classes = 7;
  const float grad_scale = 0.25f;
  FVec logits = normal_floats(static_cast<std::size_t>(rows) * classes, 81, 3.0);
  for (int j = 0; j < classes; ++j) logits[3 * classes + j] += 1000.0f;  // exp(1000) overflows a double
  Vec z = to_double(logits);
  Labels labels(rows);
  for (int r = 0; r < rows; ++r) {
    const int best = ref_argmax(z.data() + static_cast<std::size_t>(r) * classes, classes);
    labels[r] = r % 3 == 0 ? best : (best + 1 + r) % classes;  // rows 0 and 3 right, the others wrong
  }
  const RefLoss ref = ref_loss_sum(z, labels, classes);
  ASSERT_EQ(ref.correct, 2);

  auto device = backend::make_cpu_backend();
  DeviceBuffer zb = upload(*device, logits), lb = upload_labels(*device, labels);
  DeviceBuffer db = upload(*device, FVec(logits.size(), kNaN));
  const backend::LossSums got =
      device->softmax_cross_entropy(zb.floats(), lb.ints(), rows, classes, db.floats(), grad_scale);
  EXPECT_NEAR(got.loss, ref.loss, kForwardTol * std::max(1.0, ref.loss));
  EXPECT_EQ(got.correct, ref.correct);
  const Vec fd = finite_difference([&] { return ref_cross_entropy_sum(z, labels, classes); }, z);
  EXPECT_TRUE(all_close(download(*device, db.floats(), logits.size()), scaled(fd, grad_scale), kGradTol));

  const backend::LossSums no_grad = device->softmax_cross_entropy(zb.floats(), lb.ints(), rows, classes, nullptr, 0.0f);
  EXPECT_EQ(no_grad.loss, got.loss);
  EXPECT_EQ(no_grad.correct, got.correct);
}

// ---------------------------------------------------------------- language-model layers

// A sequence of n x T positions of `features` values.
TensorShape seq(int n, int length, int features) { return TensorShape::seq(n, length, features); }

TEST(SequenceLinear, ActsOnEachPosition) {
  const int n = 2, T = 5, in = 7, out = 4;
  auto device = backend::make_cpu_backend();
  auto layer = make_linear(in, out);
  const TensorShape s = seq(n, T, in);
  const TensorShape o = layer->output_shape({s});
  EXPECT_TRUE(o.sequence);
  EXPECT_EQ(o.c, T);
  EXPECT_EQ(o.w, out);
  EXPECT_EQ(o.str(), "5x4 seq");
  EXPECT_THROW(layer->output_shape({seq(n, 7, 5)}), ConfigError);  // 7 positions of 5: not 7 features
  check_layer(*device, *layer, s, normal_floats(s.size(), 41), normal_floats(std::size_t{out} * in + out, 42, 0.5),
              [&](const Vec& x, const Vec& p) {
                Vec y(static_cast<std::size_t>(n) * T * out);
                ref_linear(x.data(), p.data(), n * T, in, out, y.data(), 0, out);  // rows = positions
                return y;
              });
}

TEST(LayerNormLayer, NormalisesEachPositionOrEachSample) {
  auto device = backend::make_cpu_backend();
  for (const bool sequence : {true, false}) {
    SCOPED_TRACE(sequence ? "sequence" : "sample");
    const TensorShape s = sequence ? seq(3, 4, 6) : TensorShape{3, 2, 1, 3};
    const int rows = sequence ? 12 : 3, dim = 6;
    auto layer = make_layernorm(dim);
    ASSERT_EQ(layer->params().size(), 2u);
    EXPECT_EQ(layer->params()[0].init, Init::kOnes);
    FVec params = normal_floats(std::size_t{2} * dim, 43, 0.5, 1.0);
    check_layer(*device, *layer, s, normal_floats(s.size(), 44, 2.0, 1.0), params, [&](const Vec& x, const Vec& p) {
      return sequence_reference::layernorm(x, Vec(p.begin(), p.begin() + dim), Vec(p.begin() + dim, p.end()), rows, dim,
                                           1e-5);
    });
  }
  EXPECT_THROW(make_layernorm(6)->output_shape({seq(1, 6, 5)}), ConfigError);
}

// Token ids are data: their gradient is zero (written), the table's is the sum of the rows' dy
// by central differences; ids repeat and some rows of the table stay unused.
TEST(EmbeddingLayer, LooksUpRowsAndAddsTheirGradients) {
  const int n = 2, T = 6, vocab = 5, dim = 3;
  auto device = backend::make_cpu_backend();
  auto layer = make_embedding(vocab, dim, 0.02);
  EXPECT_EQ(layer->params()[0].init, Init::kNormal);
  EXPECT_EQ(layer->params()[0].init_std, 0.02);
  EXPECT_EQ(layer->output_shape({seq(n, T, 1)}).str(), "6x3 seq");
  EXPECT_THROW(layer->output_shape({{n, 1, 28, 28}}), ConfigError);  // images are not token ids
  const FVec ids = {0, 3, 3, 1, 4, 3, 3, 0, 1, 1, 4, 0};
  check_layer(*device, *layer, seq(n, T, 1), ids, normal_floats(std::size_t{vocab} * dim, 45),
              [&](const Vec& x, const Vec& p) {
                Vec y;
                for (double id : x) {
                  const auto row = static_cast<std::size_t>(std::lround(id));
                  y.insert(y.end(), p.begin() + static_cast<std::ptrdiff_t>(row * dim),
                           p.begin() + static_cast<std::ptrdiff_t>(row * dim + dim));
                }
                return y;
              });
}

TEST(PositionEmbeddingLayer, AddsTheFirstRowsAndRefusesLongerContexts) {
  const int n = 3, T = 4, context = 7, dim = 5;
  auto device = backend::make_cpu_backend();
  auto layer = make_position_embedding(context, dim, 0.02);
  EXPECT_TRUE(layer->in_place());
  check_layer(*device, *layer, seq(n, T, dim), normal_floats(std::size_t{n} * T * dim, 46),
              normal_floats(std::size_t{context} * dim, 47), [&](const Vec& x, const Vec& p) {
                Vec y = x;
                for (std::size_t i = 0; i < y.size(); ++i) y[i] += p[i % (static_cast<std::size_t>(T) * dim)];
                return y;
              });
  try {
    layer->output_shape({seq(1, 9, dim)});
    ADD_FAILURE() << "a context of 9 accepted by a table of 7";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("9 positions"), std::string::npos) << m;
    EXPECT_NE(m.find("context=7"), std::string::npos) << m;
  }
}

// Through the layer: its dropout key is (seed, step, node index) and its samples are counted
// from pass.first_sample, like the dropout layer's (Pass{} here: seed 0, step 0, node 0).
TEST(AttentionLayer, MatchesReferenceWithAndWithoutDropout) {
  const int n = 2, T = 6, heads = 2, hd = 3;
  auto device = backend::make_cpu_backend();
  for (const float p : {0.0f, 0.25f}) {
    SCOPED_TRACE(p);
    auto layer = make_attention(heads, p);
    EXPECT_TRUE(layer->params().empty());
    EXPECT_TRUE(layer->keeps_output());
    const TensorShape s = seq(n, T, 3 * heads * hd);
    EXPECT_EQ(layer->output_shape({s}).str(), "6x6 seq");
    sequence_reference::Attention a{n, T, heads, hd, p, kernels::dropout_key(0, 0, 0), 0};
    check_layer(*device, *layer, s, normal_floats(s.size(), 48), {},
                [&](const Vec& x, const Vec&) { return sequence_reference::attention(a, x); });
  }
  EXPECT_THROW(make_attention(4, 0.0f)->output_shape({seq(1, 3, 18)}), ConfigError);  // 6 features: not 4 heads
  EXPECT_THROW(make_attention(2, 1.0f), ConfigError);
}

TEST(GeluTanhLayer, MatchesReferenceAndFiniteDifferences) {
  auto device = backend::make_cpu_backend();
  auto layer = make_activation(backend::Activation::kGeluTanh);
  EXPECT_FALSE(layer->in_place());  // backward reads x
  const TensorShape s = seq(2, 3, 7);
  check_layer(*device, *layer, s, normal_floats(s.size(), 49, 2.0), {}, [](const Vec& x, const Vec&) {
    Vec y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = sequence_reference::gelu_tanh(x[i]);
    return y;
  });
}

// ---------------------------------------------------------------- networks

// Parameters from init_params, with random biases so that every bias enters the forward pass.
FVec network_params(const ModelSpec& spec, std::uint64_t seed) {
  FVec params(spec.layout().total());
  spec.init_params(seed, params.data());
  const FVec noise = normal_floats(params.size(), seed + 1, 0.1);
  for (const TensorSpec& t : spec.layout().tensors())
    if (t.shape.size() == 1)
      for (std::size_t i = t.offset; i < t.offset + t.numel; ++i) params[i] = noise[i];
  return params;
}

Labels random_labels(int n, int classes, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Labels labels(n);
  for (auto& l : labels) l = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(classes));
  return labels;
}

// Indices spread over every tensor: its first and last element and up to per_tensor - 2 more,
// one in each of equal strides (all of a tensor when it is small, or when per_tensor is 0).
std::vector<std::size_t> sample_indices(const TensorSpec& t, std::size_t per_tensor, std::mt19937_64& rng) {
  std::vector<std::size_t> out;
  if (per_tensor == 0 || t.numel <= per_tensor) {
    for (std::size_t i = 0; i < t.numel; ++i) out.push_back(t.offset + i);
    return out;
  }
  out.push_back(t.offset);
  const std::size_t stride = (t.numel - 2) / (per_tensor - 2);
  for (std::size_t j = 0; j + 2 < per_tensor; ++j) out.push_back(t.offset + 1 + j * stride + rng() % stride);
  out.push_back(t.offset + t.numel - 1);
  return out;
}

struct NetworkCase {
  const char* model;
  RefNet (*reference)();
  int batch;
  std::size_t per_tensor;  // finite differences on this many parameters per tensor; 0: all
};
void PrintTo(const NetworkCase& c, std::ostream* os) { *os << c.model << " batch " << c.batch; }

// The sampled parameter indices of every tensor, and grad_scale * d(sum loss)/d(param) there.
struct ReferenceGradients {
  std::vector<std::vector<std::size_t>> indices;  // per tensor
  std::vector<Vec> values;
};

ReferenceGradients reference_gradients(const ParamLayout& layout, RefNetwork& ref, std::size_t per_tensor,
                                       double grad_scale) {
  ReferenceGradients out;
  std::mt19937_64 rng(8);
  for (const TensorSpec& t : layout.tensors()) {
    out.indices.push_back(sample_indices(t, per_tensor, rng));
    out.values.emplace_back();
    for (std::size_t i : out.indices.back()) out.values.back().push_back(grad_scale * ref.gradient(i));
  }
  return out;
}

// One training step of drtrain's Network on `conv`'s backend: loss, accuracy and the sampled
// gradients against the reference; evaluate() gives the same loss as train().
void check_network(const ModelSpec& spec, backend::CpuConv conv, const FVec& params, const FVec& x,
                   const Labels& labels, float grad_scale, const RefLoss& expected, const ReferenceGradients& ref) {
  const int n = static_cast<int>(labels.size());
  auto device = backend::make_cpu_backend(conv);
  Network net(spec, *device, n + 1);  // a batch smaller than the network was built for
  DeviceBuffer pb = upload(*device, params), gb = upload(*device, FVec(params.size(), kNaN));
  DeviceBuffer xb = upload(*device, x), lb = upload_labels(*device, labels);
  net.bind(pb.floats(), gb.floats());
  const backend::LossSums got = net.train(xb.floats(), lb.ints(), n, grad_scale);
  EXPECT_NEAR(got.loss, expected.loss, kForwardTol * std::max(1.0, expected.loss));
  EXPECT_EQ(got.correct, expected.correct);

  const FVec grads = download(*device, gb.floats(), params.size());
  for (std::size_t k = 0; k < ref.indices.size(); ++k) {
    FVec actual;
    for (std::size_t i : ref.indices[k]) actual.push_back(grads[i]);
    EXPECT_TRUE(all_close(actual, ref.values[k], kGradTol))
        << spec.layout().tensors()[k].name << " (" << actual.size() << " entries)";
  }
  const backend::LossSums eval = net.evaluate(xb.floats(), lb.ints(), n);
  EXPECT_EQ(eval.loss, got.loss);
  EXPECT_EQ(eval.correct, got.correct);
}

class NetworkVsReference : public testing::TestWithParam<NetworkCase> {};

TEST_P(NetworkVsReference, LossAndGradientsMatchFiniteDifferences) {
  const NetworkCase nc = GetParam();
  const ModelSpec spec = ModelSpec::parse(nc.model);
  ASSERT_EQ(nc.reference().total, spec.layout().total());
  const float grad_scale = 0.37f;
  const FVec params = network_params(spec, 8), x = uniform_floats(static_cast<std::size_t>(nc.batch) * 784, 6, 0, 1);
  const Labels labels = random_labels(nc.batch, 10, 7);
  RefNetwork ref(nc.reference(), to_double(params), RefAct{nc.batch, 1, 28, 28, to_double(x)}, labels);
  const ReferenceGradients gradients = reference_gradients(spec.layout(), ref, nc.per_tensor, grad_scale);
  for (std::size_t k = 0; k < gradients.values.size(); ++k)  // no tensor cut off by dead ReLUs
    ASSERT_GT(max_abs(gradients.values[k]), 0.0) << spec.layout().tensors()[k].name;
  for (backend::CpuConv conv : available_convs()) {
    SCOPED_TRACE(conv_name(conv));
    check_network(spec, conv, params, x, labels, grad_scale, ref.loss(), gradients);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, NetworkVsReference,
                         testing::Values(NetworkCase{"mlp:784-7-5-10", ref_mlp_784_7_5_10, 2, 0},
                                         NetworkCase{"cnn", ref_cnn, 2, 25}),
                         [](const testing::TestParamInfo<NetworkCase>& p) {
                           return std::string(p.param.model == std::string("cnn") ? "cnn" : "mlp_784_7_5_10");
                         });

TEST(Network, EmptyBatchZeroesGradientsAndRepeatedStepsOverwrite) {
  const ModelSpec spec = ModelSpec::parse("mlp:784-7-5-10");
  auto device = backend::make_cpu_backend();
  Network net(spec, *device, 3);
  const FVec params = network_params(spec, 9);
  DeviceBuffer pb = upload(*device, params), gb = upload(*device, FVec(params.size(), 1.0f));
  DeviceBuffer xb = upload(*device, uniform_floats(std::size_t{3} * 784, 10, 0, 1)),
               lb = upload_labels(*device, {1, 2, 3});
  net.bind(pb.floats(), gb.floats());
  const backend::LossSums none = net.train(xb.floats(), lb.ints(), 0, 1.0f);
  EXPECT_EQ(none.loss, 0.0);
  EXPECT_EQ(none.correct, 0);
  EXPECT_EQ(download(*device, gb.floats(), params.size()), FVec(params.size(), 0.0f));

  net.train(xb.floats(), lb.ints(), 3, 1.0f);
  const FVec first = download(*device, gb.floats(), params.size());
  EXPECT_NE(first, FVec(params.size(), 0.0f));
  net.train(xb.floats(), lb.ints(), 3, 1.0f);
  EXPECT_EQ(download(*device, gb.floats(), params.size()), first);  // written, not accumulated
  net.train(xb.floats(), lb.ints(), 3, 0.5f);
  const FVec half = download(*device, gb.floats(), params.size());
  EXPECT_TRUE(all_close(half, scaled(to_double(first), 0.5), 1e-6));
  EXPECT_THROW(net.train(xb.floats(), lb.ints(), 4, 1.0f), Error);  // more than max_batch
}

// The hooks that --overlap drives the exchange with: before_forward names each layer's
// parameter range in forward order before the layer runs; grads_ready names them last layer
// first, contiguous, tiling the flat space, each when its gradient is already final (equal to
// what the whole step leaves); a step on an empty batch reports its zero gradients too.
TEST(Network, LayerHooksReportFinalGradientsLastLayerFirst) {
  for (const char* model : {"mlp:784-7-5-10", "cnn"}) {
    const ModelSpec spec = ModelSpec::parse(model);
    auto device = backend::make_cpu_backend();
    Network net(spec, *device, 3);
    const std::size_t n = spec.layout().total();
    const FVec params = network_params(spec, 9);
    DeviceBuffer pb = upload(*device, params), gb = upload(*device, FVec(n, 7.0f));
    DeviceBuffer xb = upload(*device, uniform_floats(std::size_t{3} * 784, 10, 0, 1)),
                 lb = upload_labels(*device, {1, 2, 3});
    net.bind(pb.floats(), gb.floats());
    std::vector<std::pair<std::size_t, std::size_t>> forward, ready;
    FVec at_ready(n, -1.0f);
    LayerHooks hooks;
    hooks.before_forward = [&](std::size_t b, std::size_t e) { forward.emplace_back(b, e); };
    hooks.grads_ready = [&](std::size_t b, std::size_t e) {
      ready.emplace_back(b, e);
      std::copy(gb.floats() + b, gb.floats() + e, at_ready.begin() + static_cast<std::ptrdiff_t>(b));
    };
    net.set_hooks(hooks);
    for (int batch : {3, 0}) {
      forward.clear();
      ready.clear();
      net.train(xb.floats(), lb.ints(), batch, 1.0f);
      std::vector<std::pair<std::size_t, std::size_t>> with_params;
      for (const auto& r : net.param_ranges())
        if (r.second > r.first) with_params.push_back(r);
      EXPECT_EQ(forward, batch > 0 ? with_params : decltype(forward){}) << model;
      std::reverse(with_params.begin(), with_params.end());
      EXPECT_EQ(ready, with_params) << model;
      std::size_t expected_end = n;
      for (const auto& r : ready) {
        EXPECT_EQ(r.second, expected_end) << model << ": not contiguous";
        expected_end = r.first;
      }
      EXPECT_EQ(expected_end, 0u) << model;
      EXPECT_EQ(at_ready, download(*device, gb.floats(), n)) << model << ", batch " << batch;
    }
  }
}

// ---------------------------------------------------------------- language models

// A float64 executor of a language model's graph, node by node from the model file's kinds and
// options (docs/MODEL_FORMAT.md), written from the definitions: the per-token loss summed over
// the n x T tokens. Dropout masks follow the documented hash, keyed by (seed, step, node).
class RefLanguageModel {
 public:
  RefLanguageModel(const ModelSpec& spec, FVec ids, Labels labels, int n, const Pass& pass)
      : spec_(spec), ids_(std::move(ids)), labels_(std::move(labels)), n_(n), pass_(pass) {}

  double loss(const Vec& params) const {
    const auto& nodes = spec_.graph().nodes();
    std::vector<Vec> act(nodes.size());
    std::vector<int> width(nodes.size());
    const int T = spec_.input().c;
    const auto tensor = [&](const std::string& name) {
      const TensorSpec* t = spec_.layout().find(name);
      return t ? Vec(params.begin() + static_cast<std::ptrdiff_t>(t->offset),
                     params.begin() + static_cast<std::ptrdiff_t>(t->offset + t->numel))
               : Vec{};
    };
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      const GraphNode& node = nodes[i];
      const auto input = [&](std::size_t k) -> const Vec& {
        const int at = spec_.wiring()[i].inputs[k];
        return at < 0 ? input_ : act[static_cast<std::size_t>(at)];
      };
      const int in_width =
          spec_.wiring()[i].inputs[0] < 0 ? 1 : width[static_cast<std::size_t>(spec_.wiring()[i].inputs[0])];
      const auto option = [&](const char* key, double fallback) {
        const auto it = node.options.find(key);
        return it == node.options.end() ? fallback : std::stod(it->second);
      };
      const std::uint64_t key = kernels::dropout_key(pass_.seed, pass_.step, static_cast<int>(i));
      const std::size_t rows = static_cast<std::size_t>(n_) * T;
      Vec& y = act[i];
      int& out = width[i];
      out = in_width;
      if (node.kind == "embedding") {
        const Vec table = tensor(node.name + ".weight");
        out = static_cast<int>(table.size() / static_cast<std::size_t>(spec_.classes()));
        for (float id : ids_)
          y.insert(y.end(), table.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(id) * out),
                   table.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(id) * out + out));
      } else if (node.kind == "pos_embedding") {
        const Vec table = tensor(node.name + ".weight");
        y = input(0);
        for (std::size_t k = 0; k < y.size(); ++k) y[k] += table[k % (static_cast<std::size_t>(T) * out)];
      } else if (node.kind == "dropout") {
        const double p = option("p", 0.5);
        y = input(0);
        for (std::size_t k = 0; k < y.size() && p > 0.0; ++k) {
          const std::size_t per_sample = static_cast<std::size_t>(T) * out;
          const bool keep = kernels::dropout_keep(key, pass_.first_sample + static_cast<std::int64_t>(k / per_sample),
                                                  k % per_sample, static_cast<float>(p));
          y[k] = keep ? y[k] / (1.0 - p) : 0.0;
        }
      } else if (node.kind == "layernorm") {
        y = sequence_reference::layernorm(input(0), tensor(node.name + ".weight"), tensor(node.name + ".bias"),
                                          static_cast<int>(rows), out, option("eps", 1e-5));
      } else if (node.kind == "linear") {
        const auto tie = node.options.find("tie");
        const Vec w = tensor((tie == node.options.end() ? node.name : tie->second) + ".weight");
        const Vec b = tensor(node.name + ".bias");
        out = static_cast<int>(w.size() / static_cast<std::size_t>(in_width));
        y.assign(rows * static_cast<std::size_t>(out), 0.0);
        for (std::size_t r = 0; r < rows; ++r)
          for (int o = 0; o < out; ++o) {
            double sum = b.empty() ? 0.0 : b[static_cast<std::size_t>(o)];
            for (int k = 0; k < in_width; ++k)
              sum += w[static_cast<std::size_t>(o) * in_width + k] * input(0)[r * in_width + k];
            y[r * out + o] = sum;
          }
      } else if (node.kind == "attention") {
        const int heads = static_cast<int>(option("heads", 0));
        out = in_width / 3;
        const sequence_reference::Attention a{
            n_, T, heads, out / heads, option("dropout", 0.0), key, pass_.first_sample};
        y = sequence_reference::attention(a, input(0));
      } else if (node.kind == "add") {
        y = input(0);
        for (std::size_t k = 1; k < node.inputs.size(); ++k)
          for (std::size_t e = 0; e < y.size(); ++e) y[e] += input(k)[e];
      } else if (node.kind == "gelu") {
        const bool tanh = node.options.count("approximate") && node.options.at("approximate") == "tanh";
        y = input(0);
        for (double& v : y)
          v = tanh ? sequence_reference::gelu_tanh(v) : 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
      } else {
        ADD_FAILURE() << "the reference has no " << node.kind;
      }
    }
    return ref_loss_sum(act.back(), labels_, spec_.classes()).loss;
  }

  void set_input(const FVec& ids) { input_ = to_double(ids); }

 private:
  const ModelSpec& spec_;
  FVec ids_;
  Labels labels_;
  int n_;
  Pass pass_;
  Vec input_;
};

struct LmRun {
  backend::LossSums sums;
  FVec grads;
};

LmRun train_lm(const ModelSpec& spec, const FVec& params, const FVec& ids, const Labels& labels, int n, float scale,
               const Pass& pass, LayerHooks hooks = {}) {
  auto device = backend::make_cpu_backend();
  Network net(spec, *device, n + 1);
  DeviceBuffer pb = upload(*device, params), gb = upload(*device, FVec(params.size(), kNaN));
  DeviceBuffer xb = upload(*device, ids), lb = upload_labels(*device, labels);
  net.bind(pb.floats(), gb.floats());
  net.set_hooks(std::move(hooks));
  LmRun run;
  run.sums = net.train(xb.floats(), lb.ints(), n, scale, pass);
  run.grads = download(*device, gb.floats(), params.size());
  return run;
}

struct LmCase {
  const char* name;
  std::map<std::string, std::string> lets;  // of the gpt2 preset
  int vocab, length, batch;
};
void PrintTo(const LmCase& c, std::ostream* os) { *os << c.name; }

class GptVsFloat64Reference : public testing::TestWithParam<LmCase> {};

// A whole GPT (the gpt2 preset at a tiny size: 2 blocks, 2 heads, width 8, a vocabulary of 7,
// contexts that fill the position table or not, dropout off and on): one training step's loss,
// per-token correct count and every parameter's gradient against central differences of the
// float64 executor above. The gradient is grad_scale / T x d(sum of token losses), the tied
// table's the sum of both its uses.
TEST_P(GptVsFloat64Reference, LossAndEveryGradientMatch) {
  const LmCase c = GetParam();
  const ModelSpec spec(ModelGraph::parse(*ModelGraph::preset_text("gpt2"), "models/gpt2.model", c.lets),
                       TensorShape::seq(1, c.length, 1), c.vocab);
  // Weights of 0.3 rather than GPT-2's 0.02, layer norm scales around 1: every signal and
  // gradient is of order one, so float32 rounding stays far below the tolerance everywhere.
  FVec params = normal_floats(spec.layout().total(), 81, 0.3);
  for (const TensorSpec& t : spec.layout().tensors())
    if (t.name.find(".ln_") != std::string::npos && t.name.find(".weight") != std::string::npos)
      for (std::size_t i = t.offset; i < t.offset + t.numel; ++i) params[i] += 1.0f;
  std::mt19937_64 rng(82);
  FVec ids(static_cast<std::size_t>(c.batch) * c.length);
  for (float& id : ids) id = static_cast<float>(rng() % static_cast<std::uint64_t>(c.vocab));
  const Labels labels = random_labels(c.batch * c.length, c.vocab, 83);
  Pass pass;
  pass.seed = 84, pass.step = 3, pass.first_sample = 5;
  const float grad_scale = 0.6f;
  const LmRun got = train_lm(spec, params, ids, labels, c.batch, grad_scale, pass);

  RefLanguageModel ref(spec, ids, labels, c.batch, pass);
  ref.set_input(ids);
  Vec p = to_double(params);
  const double expected = ref.loss(p);
  EXPECT_NEAR(got.sums.loss, expected, kForwardTol * expected);
  Vec fd = finite_difference([&] { return ref.loss(p); }, p);
  for (double& g : fd) g *= static_cast<double>(grad_scale) / c.length;
  for (const TensorSpec& t : spec.layout().tensors()) {
    const FVec actual(got.grads.begin() + static_cast<std::ptrdiff_t>(t.offset),
                      got.grads.begin() + static_cast<std::ptrdiff_t>(t.offset + t.numel));
    const Vec want(fd.begin() + static_cast<std::ptrdiff_t>(t.offset),
                   fd.begin() + static_cast<std::ptrdiff_t>(t.offset + t.numel));
    EXPECT_TRUE(all_close(actual, want, kGradTol)) << t.name << " (" << c.name << ")";
    if (t.name != "transformer.wpe.weight" || c.length == std::stoi(c.lets.at("C"))) {
      EXPECT_GT(max_abs(want), 0.0) << t.name;  // every tensor reaches the loss
    }
  }
  // The tied head's part of the table's gradient is there: without it the gradient differs.
  const TensorSpec& wte = *spec.layout().find("transformer.wte.weight");
  EXPECT_EQ(spec.layout().find("lm_head.weight"), nullptr);
  ASSERT_EQ(spec.wiring().back().tied, 0);
  // Rows of the table no input token uses get their gradient from the head alone.
  std::vector<bool> used(static_cast<std::size_t>(c.vocab), false);
  for (float id : ids) used[static_cast<std::size_t>(id)] = true;
  const std::size_t dim = wte.numel / static_cast<std::size_t>(c.vocab);
  for (std::size_t v = 0; v < used.size(); ++v)
    if (!used[v]) {
      double head = 0.0;
      for (std::size_t j = 0; j < dim; ++j) head = std::max(head, std::abs(fd[wte.offset + v * dim + j]));
      EXPECT_GT(head, 0.0) << "unused token " << v << ": the head's gradient is missing";
    }
}

INSTANTIATE_TEST_SUITE_P(
    Sizes, GptVsFloat64Reference,
    testing::Values(
        LmCase{"no_dropout", {{"L", "2"}, {"H", "2"}, {"D", "8"}, {"C", "5"}, {"P", "0"}}, 7, 5, 2},
        LmCase{"dropout_longer_table", {{"L", "2"}, {"H", "2"}, {"D", "8"}, {"C", "9"}, {"P", "0.2"}}, 7, 5, 3}),
    [](const testing::TestParamInfo<LmCase>& p) { return std::string(p.param.name); });

// --overlap's hooks on a tied model: each range reported once, last layer first, and the
// embedding's range (the only one holding the shared table) only when both the head's and the
// embedding's parts are in: the values seen at the report equal the step's final gradients.
TEST(GptNetwork, HooksReportTheTiedTableAfterBothContributions) {
  const ModelSpec spec = ModelSpec(ModelGraph::load("gpt:2-2-8"), TensorShape::seq(1, 6, 1), 11);
  const FVec params = network_params(spec, 91);
  std::mt19937_64 rng(92);
  FVec ids(12);
  for (float& id : ids) id = static_cast<float>(rng() % 11);
  const Labels labels = random_labels(12, 11, 93);
  FVec at_ready(params.size(), kNaN);
  std::vector<std::pair<std::size_t, std::size_t>> ready;
  float* grads = nullptr;
  LayerHooks hooks;
  auto device = backend::make_cpu_backend();
  Network net(spec, *device, 2);
  DeviceBuffer pb = upload(*device, params), gb = upload(*device, FVec(params.size(), kNaN));
  DeviceBuffer xb = upload(*device, ids), lb = upload_labels(*device, labels);
  grads = gb.floats();
  hooks.grads_ready = [&](std::size_t b, std::size_t e) {
    ready.emplace_back(b, e);
    std::copy(grads + b, grads + e, at_ready.begin() + static_cast<std::ptrdiff_t>(b));
  };
  net.bind(pb.floats(), gb.floats());
  net.set_hooks(hooks);
  net.train(xb.floats(), lb.ints(), 2, 1.0f);
  const FVec final_grads = download(*device, gb.floats(), params.size());
  EXPECT_EQ(at_ready, final_grads);
  ASSERT_FALSE(ready.empty());
  EXPECT_EQ(ready.back(), std::make_pair(std::size_t{0}, spec.layout().find("transformer.wte.weight")->numel));
  // A second step on a fresh network (no hooks) leaves the same gradients: the reports saw
  // the final values, not values a later write changed.
  EXPECT_EQ(train_lm(spec, params, ids, labels, 2, 1.0f, Pass{}).grads, final_grads);
}

// ---------------------------------------------------------------- ModelSpec

struct ExpectedTensor {
  const char* name;
  std::vector<std::int64_t> shape;
};

void expect_layout(const ParamLayout& layout, const std::vector<ExpectedTensor>& expected, std::size_t total) {
  ASSERT_EQ(layout.tensors().size(), expected.size());
  std::size_t offset = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const TensorSpec& t = layout.tensors()[i];
    EXPECT_EQ(t.name, expected[i].name);
    EXPECT_EQ(t.shape, expected[i].shape) << t.name;
    EXPECT_EQ(t.offset, offset) << t.name;
    EXPECT_EQ(t.numel, numel(expected[i].shape)) << t.name;
    offset += numel(expected[i].shape);
  }
  EXPECT_EQ(offset, total);
  EXPECT_EQ(layout.total(), total);
}

TEST(ModelSpec, MlpLayout) {
  const ModelSpec spec = ModelSpec::parse("mlp");
  EXPECT_EQ(spec.classes(), 10);
  EXPECT_EQ(spec.input().per_sample(), 784u);
  expect_layout(spec.layout(),
                {{"fc1.weight", {512, 784}},
                 {"fc1.bias", {512}},
                 {"fc2.weight", {256, 512}},
                 {"fc2.bias", {256}},
                 {"fc3.weight", {10, 256}},
                 {"fc3.bias", {10}}},
                535818);
  EXPECT_EQ(spec.layout().find("fc2.weight")->offset, 401920u);
  EXPECT_EQ(ref_mlp().total, 535818u);
}

TEST(ModelSpec, CnnLayout) {
  const ModelSpec spec = ModelSpec::parse("cnn");
  EXPECT_EQ(spec.classes(), 10);
  expect_layout(spec.layout(),
                {{"conv1.weight", {32, 1, 5, 5}},
                 {"conv1.bias", {32}},
                 {"conv2.weight", {64, 32, 5, 5}},
                 {"conv2.bias", {64}},
                 {"fc1.weight", {512, 3136}},
                 {"fc1.bias", {512}},
                 {"fc2.weight", {10, 512}},
                 {"fc2.bias", {10}}},
                1663370);
  EXPECT_EQ(spec.layout().find("fc1.weight")->offset, 52096u);
}

TEST(ModelSpec, CnnLayersChainToTheClasses) {
  const ModelSpec spec = ModelSpec::parse("cnn");
  const std::vector<std::array<int, 3>> expected = {{32, 28, 28}, {32, 28, 28}, {32, 14, 14}, {64, 14, 14},
                                                    {64, 14, 14}, {64, 7, 7},   {3136, 1, 1}, {512, 1, 1},
                                                    {512, 1, 1},  {10, 1, 1}};
  const auto layers = spec.make_layers();
  ASSERT_EQ(layers.size(), expected.size());
  TensorShape shape = spec.input();
  for (std::size_t i = 0; i < layers.size(); ++i) {
    shape = layers[i]->output_shape({shape});
    EXPECT_EQ((std::array<int, 3>{shape.c, shape.h, shape.w}), expected[i]) << layers[i]->describe();
  }
}

TEST(ModelSpec, CustomMlpLayout) {
  const ModelSpec spec = ModelSpec::parse("mlp:784-7-5-10");
  expect_layout(spec.layout(),
                {{"fc1.weight", {7, 784}},
                 {"fc1.bias", {7}},
                 {"fc2.weight", {5, 7}},
                 {"fc2.bias", {5}},
                 {"fc3.weight", {10, 5}},
                 {"fc3.bias", {10}}},
                5595);
  EXPECT_EQ(spec.make_layers().size(), 5u);  // linear, relu, linear, relu, linear
  expect_layout(ModelSpec::parse("mlp:784-10").layout(), {{"fc1.weight", {10, 784}}, {"fc1.bias", {10}}}, 7850);
}

struct BadModel {
  const char* text;
  std::vector<const char*> mentions;  // the message must contain each
};
void PrintTo(const BadModel& b, std::ostream* os) { *os << "'" << b.text << "'"; }

class ModelSpecRejects : public testing::TestWithParam<BadModel> {};

TEST_P(ModelSpecRejects, WithAConfigErrorNamingTheProblem) {
  const BadModel& bad = GetParam();
  std::string message;
  try {
    ModelSpec::parse(bad.text);
    FAIL() << "parse('" << bad.text << "') did not throw";
  } catch (const ConfigError& e) {
    message = e.what();
  }
  for (const char* part : bad.mentions) EXPECT_NE(message.find(part), std::string::npos) << message;
}

INSTANTIATE_TEST_SUITE_P(Names, ModelSpecRejects,
                         testing::Values(BadModel{"resnet", {"'resnet'", "mlp", "cnn", "resnet20", "mlp:IN-"}},
                                         BadModel{"", {"mlp", "cnn"}}, BadModel{"CNN", {"'CNN'", "cnn"}},
                                         BadModel{"mlp:100-10", {"'mlp:100-10'", "784"}},
                                         BadModel{"mlp:784-0-10", {"'0'"}}, BadModel{"mlp:784-x-10", {"'x'"}},
                                         BadModel{"mlp:784--10", {"''"}}, BadModel{"mlp:784", {"'mlp:784'", "output"}},
                                         BadModel{"mlp:784-10-", {"end with '-'"}},
                                         BadModel{"mlp:784-10-5", {"5 values per sample", "10 classes"}},
                                         BadModel{"mlp:784-+10-10", {"'+10'"}}),
                         [](const testing::TestParamInfo<BadModel>& p) { return "case" + std::to_string(p.index); });

TEST(ModelSpec, InitParamsIsDeterministicPerSeed) {
  const ModelSpec spec = ModelSpec::parse("mlp:784-7-5-10");
  FVec a(spec.layout().total()), b(a.size()), c(a.size());
  spec.init_params(42, a.data());
  spec.init_params(42, b.data());
  spec.init_params(43, c.data());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  std::size_t same = 0;
  for (std::size_t i = 0; i < a.size(); ++i) same += a[i] == c[i];
  EXPECT_LT(same, a.size() / 10);  // the biases (22 zeros) and nothing much else
}

// He normal: mean 0, standard deviation sqrt(2 / fan_in), a normal shape (68.3% within one
// standard deviation); bounds at 6 standard errors of each statistic.
void expect_he_normal(const float* v, std::size_t n, std::size_t fan_in, const std::string& name) {
  const double sigma = std::sqrt(2.0 / static_cast<double>(fan_in)), count = static_cast<double>(n);
  double sum = 0.0, squares = 0.0, within = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    sum += v[i];
    squares += static_cast<double>(v[i]) * v[i];
    within += std::abs(v[i]) < sigma;
  }
  const double mean = sum / count, stddev = std::sqrt(squares / count - mean * mean);
  EXPECT_LT(std::abs(mean), 6.0 * sigma / std::sqrt(count)) << name;
  EXPECT_NEAR(stddev / sigma, 1.0, 6.0 / std::sqrt(2.0 * count)) << name;
  EXPECT_NEAR(within / count, 0.6827, 6.0 * std::sqrt(0.6827 * 0.3173 / count)) << name;
}

TEST(ModelSpec, InitParamsHeNormalWeightsAndZeroBiases) {
  const ModelSpec spec = ModelSpec::parse("cnn");
  FVec params(spec.layout().total(), kNaN);
  spec.init_params(1234, params.data());
  const std::vector<std::size_t> fan_ins = {25, 0, 800, 0, 3136, 0, 512, 0};
  ASSERT_EQ(spec.layout().tensors().size(), fan_ins.size());
  for (std::size_t k = 0; k < fan_ins.size(); ++k) {
    const TensorSpec& t = spec.layout().tensors()[k];
    if (fan_ins[k] == 0) {
      EXPECT_EQ(FVec(params.begin() + t.offset, params.begin() + t.offset + t.numel), FVec(t.numel, 0.0f)) << t.name;
    } else {
      expect_he_normal(params.data() + t.offset, t.numel, fan_ins[k], t.name);
    }
  }
}

}  // namespace
}  // namespace drt::nn
