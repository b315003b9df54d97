// The CPU references of drtrain's kernels (kernels/reference.cpp, rules.hpp) against independent
// implementations: bf16 rounding against known bit patterns and a nearest-neighbour search,
// softmax cross-entropy against a plain float64 log-sum-exp, the optimizer updates against the
// float64 torch-formula optimizer of tests/support over many steps, and the small elementwise
// operations on hand-checked cases. The GPU kernels are compared against these references
// (tests/gpu/test_kernels.cpp), so this is what ties both to the intended math.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "drtrain/core/error.hpp"
#include "drtrain/kernels/reference.hpp"
#include "support/reference_optimizer.hpp"

namespace drt::kernels {
namespace {

float from_bits(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}
std::uint32_t to_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
std::uint16_t bf16_of(std::uint32_t float_bits) {
  std::uint16_t b = 0;
  const float x = from_bits(float_bits);
  ref::float_to_bf16(&x, &b, 1);
  return b;
}

// ---- bf16

TEST(KernelReference, Bf16KnownValues) {
  struct Case {
    std::uint32_t in;
    std::uint16_t out;
    const char* what;
  };
  const Case cases[] = {
      {0x3f800000u, 0x3f80u, "1.0"},
      {0xbf800000u, 0xbf80u, "-1.0"},
      {0x00000000u, 0x0000u, "+0"},
      {0x80000000u, 0x8000u, "-0"},
      {0x40490fdbu, 0x4049u, "pi rounds down"},
      {0x3f808000u, 0x3f80u, "tie between 0x3f80 and 0x3f81: to even, down"},
      {0x3f818000u, 0x3f82u, "tie between 0x3f81 and 0x3f82: to even, up"},
      {0xbf808000u, 0xbf80u, "negative tie: to even, down in magnitude"},
      {0xbf818000u, 0xbf82u, "negative tie: to even, up in magnitude"},
      {0x3f807fffu, 0x3f80u, "just below a tie"},
      {0x3f808001u, 0x3f81u, "just above a tie"},
      {0x3f80ffffu, 0x3f81u, "0x3f80ffff rounds up"},
      {0x3fffffffu, 0x4000u, "rounding carries into the exponent"},
      {0x7f7f7fffu, 0x7f7fu, "below the tie under the largest bf16 stays finite"},
      {0x7f7f8000u, 0x7f80u, "tie above the largest bf16 (odd): to even = inf"},
      {0x7f7fffffu, 0x7f80u, "largest float overflows to inf"},
      {0xff7fffffu, 0xff80u, "lowest float overflows to -inf"},
      {0x7f800000u, 0x7f80u, "inf"},
      {0xff800000u, 0xff80u, "-inf"},
      {0x7fc00000u, 0x7fc0u, "quiet NaN"},
      {0xffc00000u, 0xffc0u, "negative quiet NaN keeps its sign"},
      {0x7f800001u, 0x7fc0u, "signalling NaN with a low payload: quiet, not inf"},
      {0x7fa00000u, 0x7fe0u, "signalling NaN: payload top kept, quiet bit set"},
      {0xff812345u, 0xffc1u, "negative signalling NaN"},
      {0x7fffffffu, 0x7fffu, "all-ones NaN"},
      {0x00000001u, 0x0000u, "smallest denormal rounds to +0"},
      {0x80000001u, 0x8000u, "smallest negative denormal rounds to -0"},
      {0x00008000u, 0x0000u, "denormal tie: to even, down"},
      {0x00018000u, 0x0002u, "denormal tie: to even, up"},
      {0x00008001u, 0x0001u, "denormal above a tie"},
      {0x00010000u, 0x0001u, "exact bf16 denormal"},
      {0x007fffffu, 0x0080u, "largest denormal rounds up to the smallest normal"},
      {0x00800000u, 0x0080u, "smallest normal"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(bf16_of(c.in), c.out) << c.what << ": float bits 0x" << std::hex << c.in;
    EXPECT_EQ(float_to_bf16_bits(from_bits(c.in)), c.out) << c.what;
  }
}

// The nearest bf16 to a finite x, ties to even, by comparing distances in float64 (exact: the
// neighbours are within a factor 2 of x) rather than by bit arithmetic. Overflow as IEEE: a
// value at least halfway to 2^128 rounds to inf.
std::uint16_t nearest_bf16(float x) {
  const std::uint32_t u = to_bits(x);
  if (std::isinf(x)) return static_cast<std::uint16_t>(u >> 16);
  const std::uint32_t sign = u & 0x80000000u;
  const std::uint16_t down = static_cast<std::uint16_t>((u & 0x7fffffffu) >> 16);  // truncated magnitude
  const std::uint16_t up = static_cast<std::uint16_t>(down + 1);
  const double ax = std::fabs(static_cast<double>(x));
  const double low = from_bits(static_cast<std::uint32_t>(down) << 16);
  const double high = up == 0x7f80u ? std::ldexp(1.0, 128) : from_bits(static_cast<std::uint32_t>(up) << 16);
  std::uint16_t pick;
  if (ax - low < high - ax) pick = down;
  else if (ax - low > high - ax) pick = up;
  else pick = (down & 1u) ? up : down;
  return static_cast<std::uint16_t>(pick | (sign >> 16));
}

TEST(KernelReference, Bf16IsNearestEven) {
  std::vector<std::uint32_t> inputs;
  // Every bf16 value with the lower halves that matter: exact, ties, around the ties, extremes.
  for (std::uint32_t top = 0; top < 0x10000u; ++top)
    for (std::uint32_t low : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) inputs.push_back(top << 16 | low);
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) inputs.push_back(static_cast<std::uint32_t>(rng()));

  std::vector<float> x(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) x[i] = from_bits(inputs[i]);
  std::vector<std::uint16_t> y(x.size());
  ref::float_to_bf16(x.data(), y.data(), x.size());
  int failures = 0;
  for (std::size_t i = 0; i < x.size() && failures < 10; ++i) {
    if (std::isnan(x[i])) {
      // A quiet NaN of the same sign.
      const bool ok = (y[i] & 0x7f80u) == 0x7f80u && (y[i] & 0x0040u) && (y[i] >> 15) == (inputs[i] >> 31);
      if (!ok) ++failures;
      EXPECT_TRUE(ok) << "NaN 0x" << std::hex << inputs[i] << " -> 0x" << y[i];
    } else if (y[i] != nearest_bf16(x[i])) {
      ++failures;
      ADD_FAILURE() << "0x" << std::hex << inputs[i] << " -> 0x" << y[i] << ", nearest even is 0x"
                    << nearest_bf16(x[i]);
    }
  }
}

TEST(KernelReference, Bf16ToFloatIsExact) {
  std::vector<std::uint16_t> all(0x10000);
  for (std::uint32_t b = 0; b < 0x10000u; ++b) all[b] = static_cast<std::uint16_t>(b);
  std::vector<float> f(all.size());
  ref::bf16_to_float(all.data(), f.data(), all.size());
  std::vector<std::uint16_t> back(all.size());
  ref::float_to_bf16(f.data(), back.data(), f.size());
  for (std::uint32_t b = 0; b < 0x10000u; ++b) {
    ASSERT_EQ(to_bits(f[b]), b << 16) << "bf16 0x" << std::hex << b;
    // Round trip: exact for every non-NaN; NaNs come back quiet.
    const bool nan = (b & 0x7fffu) > 0x7f80u;
    if (nan) ASSERT_EQ(back[b], b | 0x0040u) << "bf16 NaN 0x" << std::hex << b;
    else ASSERT_EQ(back[b], b) << "bf16 0x" << std::hex << b;
  }
  EXPECT_EQ(bf16_bits_to_float(0x3f80u), 1.0f);
  EXPECT_EQ(bf16_bits_to_float(0x4049u), 3.140625f);
  EXPECT_EQ(bf16_bits_to_float(0xc000u), -2.0f);
  EXPECT_TRUE(std::isinf(bf16_bits_to_float(0xff80u)) && bf16_bits_to_float(0xff80u) < 0.0f);
}

// ---- softmax cross-entropy

struct XentExpected {
  double loss = 0.0;
  std::int64_t correct = 0;
  std::vector<double> dlogits;
};

// Plain float64: loss = logsumexp(z) - z[label], softmax = exp(z - logsumexp(z)), the
// prediction is the first index of the largest logit.
XentExpected xent_float64(const std::vector<float>& z, const std::vector<std::int32_t>& labels, int classes,
                          double grad_scale) {
  XentExpected e;
  const int rows = static_cast<int>(labels.size());
  e.dlogits.resize(z.size());
  for (int r = 0; r < rows; ++r) {
    const float* row = z.data() + static_cast<std::size_t>(r) * classes;
    double top = -std::numeric_limits<double>::infinity();
    int argmax = 0;
    for (int j = 0; j < classes; ++j) {
      if (row[j] > top) {
        top = row[j];
        argmax = j;
      }
    }
    double sum = 0.0;
    for (int j = 0; j < classes; ++j) sum += std::exp(row[j] - top);
    const double lse = top + std::log(sum);
    e.loss += lse - row[labels[r]];
    e.correct += argmax == labels[r];
    for (int j = 0; j < classes; ++j)
      e.dlogits[static_cast<std::size_t>(r) * classes + j] =
          (std::exp(row[j] - lse) - (j == labels[r] ? 1.0 : 0.0)) * grad_scale;
  }
  return e;
}

void check_xent(int rows, int classes, float logit_scale, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> label(0, classes - 1);
  std::vector<float> z(static_cast<std::size_t>(rows) * classes);
  for (auto& v : z) v = logit_scale * normal(rng);
  std::vector<std::int32_t> labels(static_cast<std::size_t>(rows));
  for (auto& l : labels) l = label(rng);
  // Some rows predict right: make the label's logit the largest.
  for (int r = 0; r < rows; r += 3) z[static_cast<std::size_t>(r) * classes + labels[r]] = 2.0f * logit_scale * 4.0f;
  const float grad_scale = 1.0f / static_cast<float>(rows);

  std::vector<float> d(z.size(), std::numeric_limits<float>::quiet_NaN());
  const ref::XentSums got = ref::softmax_cross_entropy(z.data(), labels.data(), rows, classes, d.data(), grad_scale);
  const XentExpected want = xent_float64(z, labels, classes, grad_scale);
  ASSERT_TRUE(std::isfinite(got.loss));
  EXPECT_NEAR(got.loss, want.loss, 1e-12 * std::max(1.0, std::fabs(want.loss)));
  EXPECT_EQ(got.correct, want.correct);
  EXPECT_GE(got.correct, (rows + 2) / 3);
  // Relative to the element, plus a floor: for the label's own probability p ~ 1, p - 1 cancels
  // and keeps only the absolute accuracy of p in double.
  for (std::size_t i = 0; i < d.size(); ++i)
    ASSERT_NEAR(d[i], want.dlogits[i], 1e-6 * std::fabs(want.dlogits[i]) + 1e-9 * grad_scale) << "dlogits[" << i << "]";

  // Without dlogits: the same sums.
  const ref::XentSums again = ref::softmax_cross_entropy(z.data(), labels.data(), rows, classes, nullptr, 1.0f);
  EXPECT_EQ(again.loss, got.loss);
  EXPECT_EQ(again.correct, got.correct);
}

TEST(KernelReference, SoftmaxXentMatchesFloat64) {
  check_xent(1, 1, 1.0f, 1);
  check_xent(7, 10, 1.0f, 2);
  check_xent(128, 10, 3.0f, 3);
  check_xent(33, 37, 1.0f, 4);
}

TEST(KernelReference, SoftmaxXentIsStableForLargeLogits) {
  check_xent(64, 10, 1e4f, 5);  // exp(1e4) overflows any naive formula
  const std::vector<float> z = {1e4f, -1e4f, 0.0f};
  const std::int32_t label = 1;
  std::vector<float> d(3);
  const ref::XentSums s = ref::softmax_cross_entropy(z.data(), &label, 1, 3, d.data(), 1.0f);
  EXPECT_DOUBLE_EQ(s.loss, 2e4);
  EXPECT_EQ(s.correct, 0);
  EXPECT_EQ(d[0], 1.0f);
  EXPECT_EQ(d[1], -1.0f);
  EXPECT_EQ(d[2], 0.0f);
}

TEST(KernelReference, SoftmaxXentHandCases) {
  {  // two equal logits: loss log 2, gradient (0.5 - 1, 0.5); a tie predicts the first index
    const std::vector<float> z = {0.0f, 0.0f};
    const std::vector<std::int32_t> labels = {0};
    std::vector<float> d(2);
    const ref::XentSums s = ref::softmax_cross_entropy(z.data(), labels.data(), 1, 2, d.data(), 2.0f);
    EXPECT_DOUBLE_EQ(s.loss, std::log(2.0));
    EXPECT_EQ(s.correct, 1);
    EXPECT_EQ(d[0], -1.0f);
    EXPECT_EQ(d[1], 1.0f);
  }
  {  // {5, 5, 1} against label 1: a tie is won by index 0, so not correct
    const std::vector<float> z = {5.0f, 5.0f, 1.0f};
    const std::vector<std::int32_t> labels = {1};
    const ref::XentSums s = ref::softmax_cross_entropy(z.data(), labels.data(), 1, 3, nullptr, 1.0f);
    EXPECT_EQ(s.correct, 0);
    EXPECT_NEAR(s.loss, std::log(2.0 + std::exp(-4.0)), 1e-15);
  }
  {  // {1, 2, 3} against label 2, two rows: the loss is a sum
    const std::vector<float> z = {1.0f, 2.0f, 3.0f, 1.0f, 2.0f, 3.0f};
    const std::vector<std::int32_t> labels = {2, 0};
    const ref::XentSums s = ref::softmax_cross_entropy(z.data(), labels.data(), 2, 3, nullptr, 1.0f);
    const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
    EXPECT_NEAR(s.loss, (lse - 3.0) + (lse - 1.0), 1e-14);
    EXPECT_EQ(s.correct, 1);
  }
}

TEST(KernelReference, SoftmaxXentBadLabelThrows) {
  const std::vector<float> z(6, 0.0f);
  for (std::int32_t bad : {3, -1, 1 << 30}) {
    const std::vector<std::int32_t> labels = {0, bad};
    EXPECT_THROW(ref::softmax_cross_entropy(z.data(), labels.data(), 2, 3, nullptr, 1.0f), Error) << bad;
  }
}

// ---- optimizers

std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Steps float32 ref::sgd_update / ref::adam_update with coefficients formed from `config` as
// drt::optim forms them (constant learning rate), and the float64 reference alongside; returns
// the largest relative difference of the parameters, relative to max(|reference|, 1e-2).
double optimizer_error(const optim::OptimizerConfig& config, int steps) {
  constexpr std::size_t kSize = 517;
  constexpr float kGradScale = 0.25f;
  std::vector<float> params = random_floats(kSize, 11, 1.0f);
  testing::ReferenceOptimizer reference(config, std::vector<double>(params.begin(), params.end()));
  std::vector<float> slot_a(kSize, 0.0f), slot_b(kSize, 0.0f);
  for (int step = 0; step < steps; ++step) {
    const std::vector<float> grad = random_floats(kSize, 100 + static_cast<std::uint32_t>(step), 1.0f);
    const double lr = config.lr;
    if (config.kind == optim::OptimizerKind::kSgd) {
      SgdCoefficients c;
      c.lr = static_cast<float>(lr);
      c.weight_decay = static_cast<float>(config.weight_decay);
      c.momentum = static_cast<float>(config.momentum);
      c.nesterov = config.nesterov;
      ref::sgd_update(c, params.data(), grad.data(), kGradScale, config.momentum > 0.0 ? slot_a.data() : nullptr,
                      kSize);
    } else {
      const double t = step + 1;
      const bool decoupled = config.kind == optim::OptimizerKind::kAdamW;
      AdamCoefficients c;
      c.beta1 = static_cast<float>(config.beta1);
      c.beta2 = static_cast<float>(config.beta2);
      c.one_minus_beta1 = static_cast<float>(1.0 - config.beta1);
      c.one_minus_beta2 = static_cast<float>(1.0 - config.beta2);
      c.eps = static_cast<float>(config.eps);
      c.l2 = decoupled ? 0.0f : static_cast<float>(config.weight_decay);
      c.shrink = decoupled ? static_cast<float>(1.0 - lr * config.weight_decay) : 1.0f;
      c.step_size = static_cast<float>(lr / (1.0 - std::pow(config.beta1, t)));
      c.inv_sqrt_bias2 = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(config.beta2, t)));
      ref::adam_update(c, params.data(), grad.data(), kGradScale, slot_a.data(), slot_b.data(), kSize);
    }
    reference.step(grad, kGradScale);
  }
  return reference.max_relative_error(params);
}

TEST(KernelReference, SgdMatchesFloat64) {
  optim::OptimizerConfig c;
  c.kind = optim::OptimizerKind::kSgd;
  c.lr = 0.05;
  for (double momentum : {0.0, 0.9}) {
    for (bool nesterov : {false, true}) {
      if (nesterov && momentum == 0.0) continue;
      for (double wd : {0.0, 1e-3}) {
        c.momentum = momentum;
        c.nesterov = nesterov;
        c.weight_decay = wd;
        EXPECT_LT(optimizer_error(c, 30), 2e-5) << "momentum " << momentum << " nesterov " << nesterov << " wd " << wd;
      }
    }
  }
}

TEST(KernelReference, AdamMatchesFloat64) {
  optim::OptimizerConfig c;
  c.lr = 0.01;
  for (auto kind : {optim::OptimizerKind::kAdam, optim::OptimizerKind::kAdamW}) {
    for (double wd : {0.0, 0.01}) {
      c.kind = kind;
      c.weight_decay = wd;
      EXPECT_LT(optimizer_error(c, 30), 2e-5)
          << (kind == optim::OptimizerKind::kAdamW ? "adamw" : "adam") << " wd " << wd;
    }
  }
}

TEST(KernelReference, SgdOneStepByHand) {
  // p = 1, g = 2 * 0.5 = 1, wd 0.1: gs = 1.1; momentum 0.5 from a buffer of 2: b = 2.1;
  // plain: p = 1 - 0.1 * 2.1 = 0.79; nesterov: p = 1 - 0.1 * (1.1 + 0.5 * 2.1) = 0.785.
  SgdCoefficients c;
  c.lr = 0.1f;
  c.weight_decay = 0.1f;
  c.momentum = 0.5f;
  float p = 1.0f, g = 2.0f, b = 2.0f;
  ref::sgd_update(c, &p, &g, 0.5f, &b, 1);
  EXPECT_FLOAT_EQ(b, 2.1f);
  EXPECT_FLOAT_EQ(p, 0.79f);
  c.nesterov = true;
  p = 1.0f;
  b = 2.0f;
  ref::sgd_update(c, &p, &g, 0.5f, &b, 1);
  EXPECT_FLOAT_EQ(p, 0.785f);
  // No momentum: the buffer is not used (null is fine).
  c.momentum = 0.0f;
  p = 1.0f;
  ref::sgd_update(c, &p, &g, 0.5f, nullptr, 1);
  EXPECT_FLOAT_EQ(p, 0.89f);
}

// ---- elementwise

TEST(KernelReference, AddBiasRows) {
  std::vector<float> y = {1, 2, 3, 4, 5, 6};  // 2 x 3
  const std::vector<float> bias = {10, 20, 30};
  ref::add_bias_rows(y.data(), bias.data(), 2, 3);
  EXPECT_EQ(y, (std::vector<float>{11, 22, 33, 14, 25, 36}));
}

TEST(KernelReference, BiasGradRows) {
  const std::vector<float> dy = {1, 2, 3, 4, 5, 6, -1, 0.5f, 7};  // 3 x 3
  std::vector<float> g = {99, 99, 99};                            // overwritten, not added to
  ref::bias_grad_rows(dy.data(), g.data(), 3, 3);
  EXPECT_EQ(g, (std::vector<float>{4, 7.5f, 16}));
  ref::bias_grad_rows(dy.data(), g.data(), 0, 3);  // no rows: zero
  EXPECT_EQ(g, (std::vector<float>{0, 0, 0}));
  // Summed in row order: (1e8 + 1) - 1e8 + 1 in float is 0 + 1 = 1 (another order gives 2).
  const std::vector<float> column = {1e8f, 1.0f, -1e8f, 1.0f};
  float one = 0.0f;
  ref::bias_grad_rows(column.data(), &one, 4, 1);
  EXPECT_EQ(one, 1.0f);
}

TEST(KernelReference, Relu) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {-2.0f, -0.0f, 0.0f, 1e-40f, 3.5f, nan};
  std::vector<float> y(x.size(), 7.0f);
  ref::relu_forward(x.data(), y.data(), x.size());
  EXPECT_EQ(y, (std::vector<float>{0.0f, 0.0f, 0.0f, 1e-40f, 3.5f, 0.0f}));
  EXPECT_FALSE(std::signbit(y[1]));  // relu(-0) = +0
  const std::vector<float> dy = {1, 2, 3, 4, 5, 6};
  std::vector<float> dx(dy.size());
  ref::relu_backward(y.data(), dy.data(), dx.data(), dy.size());
  EXPECT_EQ(dx, (std::vector<float>{0, 0, 0, 4, 5, 0}));
  std::vector<float> in_place = x;  // y == x is allowed
  ref::relu_forward(in_place.data(), in_place.data(), in_place.size());
  EXPECT_EQ(in_place, y);
}

TEST(KernelReference, AxpbyAndScale) {
  const std::vector<float> x = {1, 2, 3};
  std::vector<float> y = {10, 20, 30};
  ref::axpby(0.5f, x.data(), -2.0f, y.data(), 3);
  EXPECT_EQ(y, (std::vector<float>{-19.5f, -39.0f, -58.5f}));
  ref::scale(-2.0f, y.data(), 3);
  EXPECT_EQ(y, (std::vector<float>{39.0f, 78.0f, 117.0f}));
  ref::scale(5.0f, y.data(), 0);  // n == 0: nothing
  EXPECT_EQ(y[0], 39.0f);
}

// The array loops run the clone built for this CPU (AVX-512 or AVX2 where there is one,
// core/simd_clones.hpp); this file is built for baseline x86-64, which has no fused multiply-add.
// Bitwise equality with the per-element rules applied here shows the clone computes what the
// baseline clone computes (without -ffp-contract=off the AVX clones fuse a * b + c and differ).
std::vector<std::uint32_t> bits_of(const std::vector<float>& x) {
  std::vector<std::uint32_t> b(x.size());
  std::transform(x.begin(), x.end(), b.begin(), to_bits);
  return b;
}

TEST(KernelReference, ArrayLoopsEqualTheirPerElementRulesBitwise) {
  const std::size_t n = 1003;  // whole vectors and a tail
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> p0(n), g(n), m0(n), v0(n);
  for (std::size_t i = 0; i < n; ++i)
    p0[i] = dist(rng), g[i] = dist(rng), m0[i] = dist(rng), v0[i] = std::abs(dist(rng));
  const float grad_scale = 0.37f;
  for (bool nesterov : {false, true}) {
    SgdCoefficients c;
    c.lr = 0.0731f, c.weight_decay = 0.0013f, c.momentum = 0.9f, c.nesterov = nesterov;
    std::vector<float> p = p0, m = m0, p_rule = p0, m_rule = m0;
    ref::sgd_update(c, p.data(), g.data(), grad_scale, m.data(), n);
    for (std::size_t i = 0; i < n; ++i) sgd_update(c, p_rule[i], g[i], grad_scale, m_rule[i]);
    EXPECT_EQ(bits_of(p), bits_of(p_rule)) << "sgd, nesterov " << nesterov;
    EXPECT_EQ(bits_of(m), bits_of(m_rule)) << "sgd momentum, nesterov " << nesterov;
  }
  AdamCoefficients c;
  c.l2 = 0.01f, c.shrink = 0.999f, c.step_size = 0.0123f, c.inv_sqrt_bias2 = 1.7f;
  std::vector<float> p = p0, m = m0, v = v0, p_rule = p0, m_rule = m0, v_rule = v0;
  ref::adam_update(c, p.data(), g.data(), grad_scale, m.data(), v.data(), n);
  for (std::size_t i = 0; i < n; ++i) adam_update(c, p_rule[i], g[i], grad_scale, m_rule[i], v_rule[i]);
  EXPECT_EQ(bits_of(p), bits_of(p_rule)) << "adam";
  EXPECT_EQ(bits_of(v), bits_of(v_rule)) << "adam second moment";
  // A run of SGD updates with their own coefficients, in one pass (tiles of 512 and a tail),
  // equals one array update after another.
  for (float momentum : {0.0f, 0.97f}) {
    std::vector<SgdCoefficients> run(3);
    std::vector<std::vector<float>> grads;
    std::vector<const float*> pointers;
    for (std::size_t j = 0; j < run.size(); ++j) {
      run[j].lr = 0.05f + 0.01f * static_cast<float>(j), run[j].weight_decay = 0.0005f, run[j].momentum = momentum;
      run[j].nesterov = j != 1;
      grads.emplace_back(n);
      for (float& x : grads.back()) x = dist(rng);
      pointers.push_back(grads.back().data());
    }
    std::vector<float> p_run = p0, m_run = m0, p_seq = p0, m_seq = m0;
    ref::sgd_update_run(run.data(), pointers.data(), run.size(), grad_scale, p_run.data(), m_run.data(), n);
    for (std::size_t j = 0; j < run.size(); ++j)
      ref::sgd_update(run[j], p_seq.data(), pointers[j], grad_scale, m_seq.data(), n);
    EXPECT_EQ(bits_of(p_run), bits_of(p_seq)) << "sgd run, momentum " << momentum;
    EXPECT_EQ(bits_of(m_run), bits_of(m_seq)) << "sgd run's momentum, momentum " << momentum;
    EXPECT_NE(bits_of(p_run), bits_of(p0));
  }
  std::vector<float> ahead(n);
  ref::subtract_scaled(p0.data(), 0.3f, m0.data(), ahead.data(), n);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(ahead[i], p0[i] - 0.3f * m0[i]) << "subtract_scaled " << i;
  std::vector<float> y = m0, y_rule = m0;
  ref::axpby(0.3f, g.data(), -1.7f, y.data(), n);
  for (std::size_t i = 0; i < n; ++i) y_rule[i] = 0.3f * g[i] + -1.7f * y_rule[i];
  EXPECT_EQ(bits_of(y), bits_of(y_rule)) << "axpby";
}

}  // namespace
}  // namespace drt::kernels
