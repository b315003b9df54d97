// The CPU backend's operations for real networks (backend.hpp): grouped, strided and bias-free
// convolution on both CPU paths, padded max and average pooling, global average pooling, batch
// norm, GELU (exact and tanh)/tanh/sigmoid, dropout, strided row copies, label smoothing, and
// the language-model operations: layer norm, token embedding, causal self-attention (tiled,
// with and without dropout). Each against a
// float64 reference written here from the definition (plain loops, not copied from src/):
// forward outputs directly, gradients through central finite differences of the float64
// reference, with L = sum_i r_i * reference_i (r random, passed as dy) as the scalar loss. Every
// output buffer is filled with NaN before the call, so that an entry the backend does not write
// fails.
//
// Tolerances are normwise, as in test_layers.cpp: |actual_i - expected_i| <= tol * max_j
// |expected_j| (float32 rounding of a sum is proportional to the size of its terms, not of the
// result).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "drtrain/backend/backend.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/kernels/rules.hpp"
#include "support/float64_checks.hpp"
#include "support/sequence_reference.hpp"

namespace drt::backend {
namespace {

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

// The reasoning of test_layers.cpp: a float32 sum of K terms rounds with an error of a few 1e-7
// of the output scale for the K here (<= a few hundred), so 1e-5 leaves margin for BLAS/oneDNN
// summation orders while any wrong index, missing term or wrong normalisation moves entries by
// O(1e-3) of the scale or more. Gradients: central differences with h = 1e-6 * max(1, |v|) have
// truncation error ~h^2 (zero for the linear ops) and round-off ~1e-16 * |L| / h ~ 1e-9; 1e-4
// covers both and the float32 error of the backward.
constexpr double kForwardTol = 1e-5;
constexpr double kGradTol = 1e-4;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// ---------------------------------------------------------------- helpers (more in support/float64_checks.hpp)

DeviceBuffer poisoned(Backend& device, std::size_t n) { return upload(device, FVec(n, kNaN)); }

// What one op's backend run produced: its output and the gradient of each input (empty when
// the op gives none for that input).
struct OpRun {
  FVec y;
  std::vector<FVec> grads;
};
using RefOp = std::function<Vec(const std::vector<Vec>& inputs)>;

// The output against reference(inputs), and each returned gradient against central differences
// of dot(r, reference(inputs)), r being the dy the run was given.
void check_op(const std::vector<FVec>& inputs, const FVec& r, const OpRun& got, const RefOp& reference,
              const std::string& what) {
  std::vector<Vec> in(inputs.size());
  std::transform(inputs.begin(), inputs.end(), in.begin(), to_double);
  const Vec rd = to_double(r);
  EXPECT_TRUE(all_close(got.y, reference(in), kForwardTol)) << what << ": forward";
  ASSERT_EQ(got.grads.size(), inputs.size()) << what;
  const auto objective = [&] { return dot(rd, reference(in)); };
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (got.grads[i].empty()) continue;
    EXPECT_TRUE(all_close(got.grads[i], finite_difference(objective, in[i]), kGradTol))
        << what << ": gradient of input " << i;
  }
}

// Both CPU convolutions: im2col + GEMM, and oneDNN where this build has it.
const char* conv_name(CpuConv conv) { return conv == CpuConv::kOneDnn ? "onednn" : "im2col"; }

// ---------------------------------------------------------------- convolution

struct ConvCase {
  int n, c, h, w, out, k, stride, pad, groups;
  bool bias;
  Conv2dShape shape() const { return {n, c, h, w, out, k, stride, pad, groups}; }
  int oh() const { return (h + 2 * pad - k) / stride + 1; }
  int ow() const { return (w + 2 * pad - k) / stride + 1; }
  int ipg() const { return c / groups; }
  int opg() const { return out / groups; }
  std::size_t in_size() const { return static_cast<std::size_t>(n) * c * h * w; }
  std::size_t out_size() const { return static_cast<std::size_t>(n) * out * oh() * ow(); }
  std::size_t weights() const { return static_cast<std::size_t>(out) * ipg() * k * k; }
  std::string name() const {
    return "n" + std::to_string(n) + "c" + std::to_string(c) + "h" + std::to_string(h) + "w" + std::to_string(w) + "o" +
           std::to_string(out) + "k" + std::to_string(k) + "s" + std::to_string(stride) + "p" + std::to_string(pad) +
           "g" + std::to_string(groups) + (bias ? "_bias" : "_nobias");
  }
};
void PrintTo(const ConvCase& d, std::ostream* os) { *os << d.name(); }

// y[s,o,r,q] = b[o] + sum_{ci < c/groups, i, j} W[o,ci,i,j] * x[s, g*c/groups + ci, r*stride - pad + i,
// q*stride - pad + j], g = o / (out/groups), x = 0 outside the image; b empty: no bias.
Vec ref_conv(const ConvCase& d, const Vec& x, const Vec& w, const Vec& b) {
  Vec y(d.out_size());
  const int oh = d.oh(), ow = d.ow();
  for (int s = 0; s < d.n; ++s)
    for (int o = 0; o < d.out; ++o) {
      const int first_in = (o / d.opg()) * d.ipg();
      for (int r = 0; r < oh; ++r)
        for (int q = 0; q < ow; ++q) {
          double sum = b.empty() ? 0.0 : b[o];
          for (int ci = 0; ci < d.ipg(); ++ci)
            for (int i = 0; i < d.k; ++i)
              for (int j = 0; j < d.k; ++j) {
                const int row = r * d.stride - d.pad + i, col = q * d.stride - d.pad + j;
                if (row < 0 || row >= d.h || col < 0 || col >= d.w) continue;
                sum += w[((static_cast<std::size_t>(o) * d.ipg() + ci) * d.k + i) * d.k + j] *
                       x[((static_cast<std::size_t>(s) * d.c + first_in + ci) * d.h + row) * d.w + col];
              }
          y[((static_cast<std::size_t>(s) * d.out + o) * oh + r) * ow + q] = sum;
        }
    }
  return y;
}

// The adjoint of ref_conv for dy (each term W * x of an output sends dy * x to dW and dy * W to
// dx; db sums dy). Checked against finite differences, then used for the large batches where
// finite differences would be too slow.
void ref_conv_backward(const ConvCase& d, const Vec& x, const Vec& w, const Vec& dy, Vec& dx, Vec& dw, Vec& db) {
  dx.assign(d.in_size(), 0.0);
  dw.assign(d.weights(), 0.0);
  db.assign(d.out, 0.0);
  const int oh = d.oh(), ow = d.ow();
  for (int s = 0; s < d.n; ++s)
    for (int o = 0; o < d.out; ++o) {
      const int first_in = (o / d.opg()) * d.ipg();
      for (int r = 0; r < oh; ++r)
        for (int q = 0; q < ow; ++q) {
          const double g = dy[((static_cast<std::size_t>(s) * d.out + o) * oh + r) * ow + q];
          db[o] += g;
          for (int ci = 0; ci < d.ipg(); ++ci)
            for (int i = 0; i < d.k; ++i)
              for (int j = 0; j < d.k; ++j) {
                const int row = r * d.stride - d.pad + i, col = q * d.stride - d.pad + j;
                if (row < 0 || row >= d.h || col < 0 || col >= d.w) continue;
                const std::size_t xi = ((static_cast<std::size_t>(s) * d.c + first_in + ci) * d.h + row) * d.w + col;
                const std::size_t wi = ((static_cast<std::size_t>(o) * d.ipg() + ci) * d.k + i) * d.k + j;
                dw[wi] += g * x[xi];
                dx[xi] += g * w[wi];
              }
        }
    }
}

struct ConvData {
  FVec x, w, b;
};
ConvData conv_data(const ConvCase& d, std::uint64_t seed) {
  return {normal_floats(d.in_size(), seed), normal_floats(d.weights(), seed + 1, 0.5),
          d.bias ? normal_floats(static_cast<std::size_t>(d.out), seed + 2, 0.5) : FVec{}};
}

// Forward then backward on `device` with dy, every output poisoned first; the workspace is
// exactly conv2d_workspace_floats. use_dbias / use_dx: whether backward gets those outputs.
OpRun run_conv(Backend& device, const ConvCase& d, const ConvData& data, const FVec& dy, bool use_dbias = true,
               bool use_dx = true) {
  const Conv2dShape s = d.shape();
  DeviceBuffer xb = upload(device, data.x), wb = upload(device, data.w), bb = upload(device, data.b);
  DeviceBuffer dyb = upload(device, dy), yb = poisoned(device, d.out_size());
  DeviceBuffer dxb = poisoned(device, d.in_size()), dwb = poisoned(device, d.weights());
  DeviceBuffer dbb = poisoned(device, data.b.size());
  DeviceBuffer ws = device.allocate_floats(device.conv2d_workspace_floats(s));
  device.conv2d_forward(s, xb.floats(), wb.floats(), d.bias ? bb.floats() : nullptr, yb.floats(), ws.floats());
  const bool dbias = d.bias && use_dbias;
  device.conv2d_backward(s, xb.floats(), wb.floats(), dyb.floats(), dwb.floats(), dbias ? dbb.floats() : nullptr,
                         use_dx ? dxb.floats() : nullptr, ws.floats());
  return {download(device, yb.floats(), d.out_size()),
          {use_dx ? download(device, dxb.floats(), d.in_size()) : FVec{}, download(device, dwb.floats(), d.weights()),
           dbias ? download(device, dbb.floats(), data.b.size()) : FVec{}}};
}

RefOp conv_reference(const ConvCase& d) {
  return [d](const std::vector<Vec>& in) { return ref_conv(d, in[0], in[1], in[2]); };
}

// Odd images (7x5, 6x7), 3 or 4 channels, batches of 2 and 3; stride 2 and 3, padding 0 to 2;
// groups 1, 2 and depthwise (groups == in channels, with channel multipliers 1 and 2); bias on
// and off.
const ConvCase kOddConvs[] = {
    {3, 3, 7, 5, 4, 3, 1, 1, 1, true},  {3, 3, 7, 5, 4, 3, 2, 1, 1, false}, {3, 4, 7, 5, 6, 3, 2, 1, 2, true},
    {3, 4, 7, 5, 6, 3, 1, 0, 2, false}, {3, 3, 7, 5, 3, 3, 1, 1, 3, true},  {3, 3, 7, 5, 6, 3, 2, 1, 3, false},
    {2, 4, 6, 7, 4, 5, 3, 2, 2, true},  {3, 3, 7, 5, 4, 1, 2, 0, 1, true},  {2, 4, 6, 7, 4, 3, 2, 1, 4, true},
};

class ConvReference : public testing::TestWithParam<ConvCase> {};

// The analytic adjoint (used by ConvOpLargeBatch) agrees with finite differences.
TEST_P(ConvReference, BackwardMatchesFiniteDifferences) {
  const ConvCase d = GetParam();
  const ConvData data = conv_data(d, 101);
  Vec x = to_double(data.x), w = to_double(data.w), b = to_double(data.b);
  const Vec dy = to_double(normal_floats(d.out_size(), 104));
  Vec dx, dw, db;
  ref_conv_backward(d, x, w, dy, dx, dw, db);
  const auto objective = [&] { return dot(dy, ref_conv(d, x, w, b)); };
  EXPECT_TRUE(all_close(dx, finite_difference(objective, x), 1e-7));
  EXPECT_TRUE(all_close(dw, finite_difference(objective, w), 1e-7));
  if (d.bias) {
    EXPECT_TRUE(all_close(db, finite_difference(objective, b), 1e-7));
  }
}

INSTANTIATE_TEST_SUITE_P(OddShapes, ConvReference, testing::ValuesIn(kOddConvs),
                         [](const testing::TestParamInfo<ConvCase>& p) { return p.param.name(); });

using ConvParam = std::tuple<ConvCase, CpuConv>;
std::string conv_param_name(const testing::TestParamInfo<ConvParam>& p) {
  return std::get<0>(p.param).name() + "_" + conv_name(std::get<1>(p.param));
}

class ConvOp : public testing::TestWithParam<ConvParam> {};

TEST_P(ConvOp, MatchesReferenceAndFiniteDifferences) {
  const auto [d, conv] = GetParam();
  if (conv == CpuConv::kOneDnn && !onednn_available()) GTEST_SKIP() << "built without oneDNN";
  auto device = make_cpu_backend(conv);
  const ConvData data = conv_data(d, 111);
  const FVec r = normal_floats(d.out_size(), 114);
  check_op({data.x, data.w, data.b}, r, run_conv(*device, d, data, r), conv_reference(d), d.name());
}

// Backward without dx, and (with a bias) without dbias: the other gradients are unchanged.
TEST_P(ConvOp, OptionalGradientsLeaveTheOthersAlone) {
  const auto [d, conv] = GetParam();
  if (conv == CpuConv::kOneDnn && !onednn_available()) GTEST_SKIP() << "built without oneDNN";
  auto device = make_cpu_backend(conv);
  const ConvData data = conv_data(d, 121);
  const FVec dy = normal_floats(d.out_size(), 124);
  Vec dx, dw, db;
  ref_conv_backward(d, to_double(data.x), to_double(data.w), to_double(dy), dx, dw, db);
  const OpRun no_dx = run_conv(*device, d, data, dy, true, false);
  EXPECT_TRUE(all_close(no_dx.grads[1], dw, kGradTol)) << "dw without dx";
  if (d.bias) {
    EXPECT_TRUE(all_close(no_dx.grads[2], db, kGradTol)) << "dbias without dx";
  }
  const OpRun no_dbias = run_conv(*device, d, data, dy, false, true);
  EXPECT_TRUE(all_close(no_dbias.grads[0], dx, kGradTol)) << "dx without dbias";
  EXPECT_TRUE(all_close(no_dbias.grads[1], dw, kGradTol)) << "dw without dbias";
}

INSTANTIATE_TEST_SUITE_P(OddShapes, ConvOp,
                         testing::Combine(testing::ValuesIn(kOddConvs),
                                          testing::Values(CpuConv::kIm2col, CpuConv::kOneDnn)),
                         conv_param_name);

// Batches large enough for the im2col convolution to split them into several groups of images
// (with a short last group), with channel groups; backward against the analytic adjoint.
class ConvOpLargeBatch : public testing::TestWithParam<ConvParam> {};

TEST_P(ConvOpLargeBatch, MatchesReference) {
  const auto [d, conv] = GetParam();
  if (conv == CpuConv::kOneDnn && !onednn_available()) GTEST_SKIP() << "built without oneDNN";
  auto device = make_cpu_backend(conv);
  const ConvData data = conv_data(d, 131);
  const FVec dy = normal_floats(d.out_size(), 134);
  const OpRun got = run_conv(*device, d, data, dy);
  Vec dx, dw, db;
  const Vec x = to_double(data.x), w = to_double(data.w);
  ref_conv_backward(d, x, w, to_double(dy), dx, dw, db);
  EXPECT_TRUE(all_close(got.y, ref_conv(d, x, w, to_double(data.b)), kForwardTol));
  EXPECT_TRUE(all_close(got.grads[0], dx, kGradTol));
  EXPECT_TRUE(all_close(got.grads[1], dw, kGradTol));
  if (d.bias) {
    EXPECT_TRUE(all_close(got.grads[2], db, kGradTol));
  }
}

// 4*25*61*59 floats of columns per image: groups of 5 images (5 + 4); 16*9*48*48 per image,
// stride 2, depthwise: groups of 6 (6 + 1).
const ConvCase kLargeConvs[] = {{9, 4, 61, 59, 6, 5, 1, 2, 2, true}, {7, 16, 96, 95, 16, 3, 2, 1, 16, false}};
INSTANTIATE_TEST_SUITE_P(Groups, ConvOpLargeBatch,
                         testing::Combine(testing::ValuesIn(kLargeConvs),
                                          testing::Values(CpuConv::kIm2col, CpuConv::kOneDnn)),
                         conv_param_name);

// One backend convolving shapes that differ only in stride, groups or bias presence, forwards
// and backwards, twice over: oneDNN caches a plan per shape, and a plan looked up under too
// coarse a key would compute another convolution (or write out of bounds).
TEST(ConvOpPlans, ShapesDifferingOnlyInStrideGroupsOrBiasGetTheirOwnPlan) {
  for (const CpuConv conv : {CpuConv::kIm2col, CpuConv::kOneDnn}) {
    if (conv == CpuConv::kOneDnn && !onednn_available()) continue;
    auto device = make_cpu_backend(conv);
    const ConvCase cases[] = {{3, 4, 7, 5, 4, 3, 1, 1, 1, true},
                              {3, 4, 7, 5, 4, 3, 2, 1, 1, true},
                              {3, 4, 7, 5, 4, 3, 1, 1, 2, true},
                              {3, 4, 7, 5, 4, 3, 1, 1, 4, true},
                              {3, 4, 7, 5, 4, 3, 1, 1, 1, false}};
    for (int round = 0; round < 2; ++round)
      for (const ConvCase& d : cases) {
        const ConvData data = conv_data(d, 141);
        const FVec dy = normal_floats(d.out_size(), 144);
        const OpRun got = run_conv(*device, d, data, dy);
        Vec dx, dw, db;
        const Vec x = to_double(data.x), w = to_double(data.w);
        ref_conv_backward(d, x, w, to_double(dy), dx, dw, db);
        const std::string what = d.name() + " " + conv_name(conv) + " round " + std::to_string(round);
        EXPECT_TRUE(all_close(got.y, ref_conv(d, x, w, to_double(data.b)), kForwardTol)) << what;
        EXPECT_TRUE(all_close(got.grads[0], dx, kGradTol)) << what;
        EXPECT_TRUE(all_close(got.grads[1], dw, kGradTol)) << what;
        if (d.bias) {
          EXPECT_TRUE(all_close(got.grads[2], db, kGradTol)) << what;
        }
      }
  }
}

// ---------------------------------------------------------------- pooling

struct PoolCase {
  int n, c, h, w, window, stride, pad;
  Pool2dShape shape() const { return {n, c, h, w, window, stride, pad}; }
  int oh() const { return (h + 2 * pad - window) / stride + 1; }
  int ow() const { return (w + 2 * pad - window) / stride + 1; }
  std::size_t in_size() const { return static_cast<std::size_t>(n) * c * h * w; }
  std::size_t out_size() const { return static_cast<std::size_t>(n) * c * oh() * ow(); }
  std::string name() const {
    return "n" + std::to_string(n) + "c" + std::to_string(c) + "h" + std::to_string(h) + "w" + std::to_string(w) +
           "win" + std::to_string(window) + "s" + std::to_string(stride) + "p" + std::to_string(pad);
  }
};
void PrintTo(const PoolCase& d, std::ostream* os) { *os << d.name(); }

// Calls fn(output index, input index) for every real (not padded) cell of every window.
template <typename Fn>
void for_each_window_cell(const PoolCase& d, Fn&& fn) {
  const int oh = d.oh(), ow = d.ow();
  for (int plane = 0; plane < d.n * d.c; ++plane)
    for (int r = 0; r < oh; ++r)
      for (int q = 0; q < ow; ++q)
        for (int i = 0; i < d.window; ++i)
          for (int j = 0; j < d.window; ++j) {
            const int row = r * d.stride - d.pad + i, col = q * d.stride - d.pad + j;
            if (row < 0 || row >= d.h || col < 0 || col >= d.w) continue;
            fn((static_cast<std::size_t>(plane) * oh + r) * ow + q,
               (static_cast<std::size_t>(plane) * d.h + row) * d.w + col);
          }
}

// Max over the window's real cells; padding never takes part.
Vec ref_maxpool(const PoolCase& d, const Vec& x) {
  Vec y(d.out_size(), -std::numeric_limits<double>::infinity());
  for_each_window_cell(d, [&](std::size_t o, std::size_t i) { y[o] = std::max(y[o], x[i]); });
  return y;
}

// The sum of the window's real cells over window * window (padding counts as zeros).
Vec ref_avgpool(const PoolCase& d, const Vec& x) {
  Vec y(d.out_size(), 0.0);
  for_each_window_cell(d, [&](std::size_t o, std::size_t i) { y[o] += x[i]; });
  for (double& v : y) v /= d.window * d.window;
  return y;
}

// Distinct negative values at least 0.01 apart: no ties, a 1e-6 step never changes which input
// wins, and a padded zero counted as a candidate would win every window it touches.
FVec untied_negative_inputs(std::size_t n, std::uint64_t seed) {
  std::vector<int> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = static_cast<int>(i);
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  FVec x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(-1.0 - order[i] * 0.0137);
  return x;
}

// Windows 2 to 4, strides 1 to 3, padding up to window / 2, on odd images; the 2x2 stride-2
// unpadded case takes the fast path.
const PoolCase kPools[] = {{3, 3, 7, 5, 3, 2, 1}, {3, 3, 7, 5, 2, 1, 1}, {3, 3, 7, 5, 3, 1, 1}, {3, 3, 7, 5, 2, 2, 0},
                           {3, 3, 7, 5, 2, 2, 1}, {2, 3, 6, 7, 4, 3, 2}, {2, 2, 8, 6, 2, 2, 0}};

OpRun run_maxpool(Backend& device, const PoolCase& d, const FVec& x, const FVec& dy) {
  const Pool2dShape s = d.shape();
  DeviceBuffer xb = upload(device, x), dyb = upload(device, dy), yb = poisoned(device, d.out_size());
  DeviceBuffer dxb = poisoned(device, d.in_size());
  DeviceBuffer argmax = device.allocate(d.out_size() * sizeof(std::int32_t));
  device.maxpool2d_forward(s, xb.floats(), yb.floats(), argmax.ints());
  device.maxpool2d_backward(s, xb.floats(), yb.floats(), dyb.floats(), argmax.ints(), dxb.floats());
  return {download(device, yb.floats(), d.out_size()), {download(device, dxb.floats(), d.in_size())}};
}

class MaxPoolOp : public testing::TestWithParam<PoolCase> {};

TEST_P(MaxPoolOp, MatchesReferenceAndFiniteDifferences) {
  const PoolCase d = GetParam();
  auto device = make_cpu_backend();
  const FVec x = untied_negative_inputs(d.in_size(), 201), r = normal_floats(d.out_size(), 202);
  check_op(
      {x}, r, run_maxpool(*device, d, x, r), [d](const std::vector<Vec>& in) { return ref_maxpool(d, in[0]); },
      d.name());
}

// Ties and -inf (values from {-inf, -2, -1}): the first maximum among the window's real cells
// in row-major order is the output and takes the whole gradient (torch's rule); a window of
// -inf gives -inf, its gradient still going to a real cell.
TEST_P(MaxPoolOp, TiesAndMinusInfinityGoToTheFirstRealMaximum) {
  const PoolCase d = GetParam();
  std::mt19937_64 rng(203);
  FVec x(d.in_size());
  const float values[] = {-kInf, -2.0f, -1.0f};
  for (float& v : x) v = values[rng() % 3];
  for (int i = 0; i < d.h * d.w; ++i) x[i] = -kInf;  // the whole first plane
  const FVec dy = normal_floats(d.out_size(), 204);
  FVec y(d.out_size()), dx(d.in_size(), 0.0f);
  std::vector<std::size_t> at(d.out_size(), SIZE_MAX);
  for_each_window_cell(d, [&](std::size_t o, std::size_t i) {
    if (at[o] == SIZE_MAX || x[i] > x[at[o]]) at[o] = i;
  });
  for (std::size_t o = 0; o < at.size(); ++o) {
    y[o] = x[at[o]];
    dx[at[o]] += dy[o];
  }
  auto device = make_cpu_backend();
  const OpRun got = run_maxpool(*device, d, x, dy);
  EXPECT_EQ(got.y, y);
  EXPECT_EQ(got.grads[0], dx);  // the same additions in the same order where windows overlap
}

INSTANTIATE_TEST_SUITE_P(OddShapes, MaxPoolOp, testing::ValuesIn(kPools),
                         [](const testing::TestParamInfo<PoolCase>& p) { return p.param.name(); });

class AvgPoolOp : public testing::TestWithParam<PoolCase> {};

TEST_P(AvgPoolOp, MatchesReferenceAndFiniteDifferences) {
  const PoolCase d = GetParam();
  auto device = make_cpu_backend();
  const FVec x = normal_floats(d.in_size(), 211, 1.0, 0.5), r = normal_floats(d.out_size(), 212);
  const Pool2dShape s = d.shape();
  DeviceBuffer xb = upload(*device, x), rb = upload(*device, r), yb = poisoned(*device, d.out_size());
  DeviceBuffer dxb = poisoned(*device, d.in_size());
  device->avgpool2d_forward(s, xb.floats(), yb.floats());
  device->avgpool2d_backward(s, rb.floats(), dxb.floats());
  const OpRun got{download(*device, yb.floats(), d.out_size()), {download(*device, dxb.floats(), d.in_size())}};
  check_op(
      {x}, r, got, [d](const std::vector<Vec>& in) { return ref_avgpool(d, in[0]); }, d.name());
}

INSTANTIATE_TEST_SUITE_P(OddShapes, AvgPoolOp, testing::ValuesIn(kPools),
                         [](const testing::TestParamInfo<PoolCase>& p) { return p.param.name(); });

// A corner window of a padded pool has fewer real cells, and still divides by window * window.
TEST(AvgPoolOpPadding, CountsPaddedCellsAsZeros) {
  auto device = make_cpu_backend();
  const Pool2dShape s{1, 1, 2, 2, 3, 1, 1};  // 3x3 windows over a padded 2x2 image: 2x2 outputs
  DeviceBuffer xb = upload(*device, {1.0f, 2.0f, 3.0f, 4.0f}), yb = poisoned(*device, 4);
  device->avgpool2d_forward(s, xb.floats(), yb.floats());
  EXPECT_TRUE(all_close(download(*device, yb.floats(), 4), Vec(4, 10.0 / 9.0), 1e-6));  // each window: all four
}

TEST(GlobalAvgPoolOp, MatchesReferenceAndFiniteDifferences) {
  const std::size_t planes = 9, plane_size = 35;  // batch 3 x 3 channels of 7x5
  auto device = make_cpu_backend();
  const FVec x = normal_floats(planes * plane_size, 221, 1.0, 0.5), r = normal_floats(planes, 222);
  DeviceBuffer xb = upload(*device, x), rb = upload(*device, r), yb = poisoned(*device, planes);
  DeviceBuffer dxb = poisoned(*device, x.size());
  device->global_avgpool_forward(xb.floats(), yb.floats(), planes, plane_size);
  device->global_avgpool_backward(rb.floats(), dxb.floats(), planes, plane_size);
  const OpRun got{download(*device, yb.floats(), planes), {download(*device, dxb.floats(), x.size())}};
  check_op(
      {x}, r, got,
      [&](const std::vector<Vec>& in) {
        Vec y(planes, 0.0);
        for (std::size_t p = 0; p < planes; ++p) {
          for (std::size_t i = 0; i < plane_size; ++i) y[p] += in[0][p * plane_size + i];
          y[p] /= static_cast<double>(plane_size);
        }
        return y;
      },
      "global average pool");
}

// ---------------------------------------------------------------- batch norm

struct BnCase {
  int batch, channels, spatial;
  double offset;        // channel c's values are centred near offset * (c + 1)
  double spread = 1.0;  // and spread by spread * (0.5 + 0.5 c)
  BatchNormShape shape() const { return {batch, channels, spatial}; }
  std::size_t size() const { return static_cast<std::size_t>(batch) * channels * spatial; }
  std::string name() const {
    const int m = static_cast<int>(offset);
    return "n" + std::to_string(batch) + "c" + std::to_string(channels) + "hw" + std::to_string(spatial) + "mean" +
           (m < 0 ? "neg" : "") + std::to_string(std::abs(m)) + (spread < 1.0 ? "_narrow" : "");
  }
};
void PrintTo(const BnCase& d, std::ostream* os) { *os << d.name(); }

constexpr float kEps = 1e-5f, kMomentum = 0.1f;

// The channels' values, centred near offset * (c + 1) with standard deviations (0.5 to 1.5) x
// spread.
FVec bn_inputs(const BnCase& d, std::uint64_t seed) {
  FVec x = normal_floats(d.size(), seed);
  for (int n = 0; n < d.batch; ++n)
    for (int c = 0; c < d.channels; ++c)
      for (int i = 0; i < d.spatial; ++i) {
        float& v = x[(static_cast<std::size_t>(n) * d.channels + c) * d.spatial + i];
        v = static_cast<float>(v * d.spread * (0.5 + 0.5 * c) + d.offset * (c + 1));
      }
  return x;
}

// Per-channel mean and biased variance of x, two-pass in float64.
void ref_bn_stats(const BnCase& d, const Vec& x, Vec& mean, Vec& var) {
  mean.assign(d.channels, 0.0);
  var.assign(d.channels, 0.0);
  const double count = static_cast<double>(d.batch) * d.spatial;
  const auto at = [&](int n, int c, int i) { return (static_cast<std::size_t>(n) * d.channels + c) * d.spatial + i; };
  for (int c = 0; c < d.channels; ++c) {
    for (int n = 0; n < d.batch; ++n)
      for (int i = 0; i < d.spatial; ++i) mean[c] += x[at(n, c, i)];
    mean[c] /= count;
    for (int n = 0; n < d.batch; ++n)
      for (int i = 0; i < d.spatial; ++i) var[c] += (x[at(n, c, i)] - mean[c]) * (x[at(n, c, i)] - mean[c]);
    var[c] /= count;
  }
}

// y = gamma * (x - mean) / sqrt(var + eps) + beta with the given per-channel statistics.
Vec ref_bn_apply(const BnCase& d, const Vec& x, const Vec& gamma, const Vec& beta, const Vec& mean, const Vec& var) {
  Vec y(x.size());
  for (int n = 0; n < d.batch; ++n)
    for (int c = 0; c < d.channels; ++c)
      for (int i = 0; i < d.spatial; ++i) {
        const std::size_t at = (static_cast<std::size_t>(n) * d.channels + c) * d.spatial + i;
        y[at] = gamma[c] * (x[at] - mean[c]) / std::sqrt(var[c] + kEps) + beta[c];
      }
  return y;
}

// Training mode: normalised with the batch's own statistics.
Vec ref_bn_train(const BnCase& d, const Vec& x, const Vec& gamma, const Vec& beta) {
  Vec mean, var;
  ref_bn_stats(d, x, mean, var);
  return ref_bn_apply(d, x, gamma, beta, mean, var);
}

class BatchNormOp : public testing::TestWithParam<BnCase> {};

// Forward output, saved mean and 1/sqrt(var + eps), the new running statistics (unbiased
// variance, new = (1 - m) running + m batch), and dx, dgamma, dbeta against finite differences.
TEST_P(BatchNormOp, TrainingMatchesReferenceAndFiniteDifferences) {
  const BnCase d = GetParam();
  const auto channels = static_cast<std::size_t>(d.channels);
  auto device = make_cpu_backend();
  const FVec x = bn_inputs(d, 301), gamma = normal_floats(channels, 302, 0.5, 1.0);
  const FVec beta = normal_floats(channels, 303), r = normal_floats(d.size(), 304);
  // Running statistics far from the batch's, so that swapping the momentum's roles shows.
  const FVec running_mean = normal_floats(channels, 305, 3.0), running_var = normal_floats(channels, 306, 0.1, 5.0);
  DeviceBuffer xb = upload(*device, x), gb = upload(*device, gamma), bb = upload(*device, beta);
  DeviceBuffer rmb = upload(*device, running_mean), rvb = upload(*device, running_var), rb = upload(*device, r);
  DeviceBuffer yb = poisoned(*device, d.size()), meanb = poisoned(*device, channels);
  DeviceBuffer invb = poisoned(*device, channels), nmb = poisoned(*device, channels), nvb = poisoned(*device, channels);
  DeviceBuffer dxb = poisoned(*device, d.size()), dgb = poisoned(*device, channels), dbb = poisoned(*device, channels);
  device->batchnorm_forward_train(d.shape(), xb.floats(), gb.floats(), bb.floats(), kEps, yb.floats(), meanb.floats(),
                                  invb.floats(), kMomentum, rmb.floats(), rvb.floats(), nmb.floats(), nvb.floats());
  device->batchnorm_backward(d.shape(), xb.floats(), rb.floats(), gb.floats(), meanb.floats(), invb.floats(), kEps,
                             dxb.floats(), dgb.floats(), dbb.floats());

  Vec mean, var;
  ref_bn_stats(d, to_double(x), mean, var);
  Vec inv_std(channels), new_mean(channels), new_var(channels);
  const double count = static_cast<double>(d.batch) * d.spatial;
  for (std::size_t c = 0; c < channels; ++c) {
    inv_std[c] = 1.0 / std::sqrt(var[c] + kEps);
    new_mean[c] = (1.0 - kMomentum) * running_mean[c] + kMomentum * mean[c];
    new_var[c] = (1.0 - kMomentum) * running_var[c] + kMomentum * var[c] * count / (count - 1.0);
  }
  EXPECT_TRUE(all_close(download(*device, meanb.floats(), channels), mean, kForwardTol)) << "saved mean";
  EXPECT_TRUE(all_close(download(*device, invb.floats(), channels), inv_std, kForwardTol)) << "saved inv_std";
  EXPECT_TRUE(all_close(download(*device, nmb.floats(), channels), new_mean, kForwardTol)) << "new running mean";
  EXPECT_TRUE(all_close(download(*device, nvb.floats(), channels), new_var, kForwardTol)) << "new running var";
  EXPECT_EQ(download(*device, rmb.floats(), channels), running_mean) << "the old running mean is input only";
  const OpRun got{download(*device, yb.floats(), d.size()),
                  {download(*device, dxb.floats(), d.size()), download(*device, dgb.floats(), channels),
                   download(*device, dbb.floats(), channels)}};
  check_op(
      {x, gamma, beta}, r, got, [d](const std::vector<Vec>& in) { return ref_bn_train(d, in[0], in[1], in[2]); },
      d.name());
}

// Without running statistics (new_mean null) and without dx: the same y, saved statistics,
// dgamma and dbeta; the running statistics may be updated in place (new == running).
TEST_P(BatchNormOp, OptionalOutputsAndInPlaceRunningStatistics) {
  const BnCase d = GetParam();
  const auto channels = static_cast<std::size_t>(d.channels);
  auto device = make_cpu_backend();
  const FVec x = bn_inputs(d, 311), gamma = normal_floats(channels, 312, 0.5, 1.0);
  const FVec beta = normal_floats(channels, 313), dy = normal_floats(d.size(), 314);
  const FVec running_mean = normal_floats(channels, 315), running_var = normal_floats(channels, 316, 0.1, 2.0);
  DeviceBuffer xb = upload(*device, x), gb = upload(*device, gamma), bb = upload(*device, beta);
  DeviceBuffer dyb = upload(*device, dy);
  const auto run = [&](bool running, bool in_place, bool with_dx) {
    DeviceBuffer rmb = upload(*device, running_mean), rvb = upload(*device, running_var);
    DeviceBuffer nmb = poisoned(*device, channels), nvb = poisoned(*device, channels);
    DeviceBuffer yb = poisoned(*device, d.size()), meanb = poisoned(*device, channels);
    DeviceBuffer invb = poisoned(*device, channels), dxb = poisoned(*device, d.size());
    DeviceBuffer dgb = poisoned(*device, channels), dbb = poisoned(*device, channels);
    float* new_mean = !running ? nullptr : in_place ? rmb.floats() : nmb.floats();
    float* new_var = !running ? nullptr : in_place ? rvb.floats() : nvb.floats();
    device->batchnorm_forward_train(d.shape(), xb.floats(), gb.floats(), bb.floats(), kEps, yb.floats(), meanb.floats(),
                                    invb.floats(), kMomentum, rmb.floats(), rvb.floats(), new_mean, new_var);
    device->batchnorm_backward(d.shape(), xb.floats(), dyb.floats(), gb.floats(), meanb.floats(), invb.floats(), kEps,
                               with_dx ? dxb.floats() : nullptr, dgb.floats(), dbb.floats());
    std::vector<FVec> out = {download(*device, yb.floats(), d.size()), download(*device, meanb.floats(), channels),
                             download(*device, invb.floats(), channels), download(*device, dgb.floats(), channels),
                             download(*device, dbb.floats(), channels)};
    if (with_dx) out.push_back(download(*device, dxb.floats(), d.size()));
    if (running) {
      out.push_back(download(*device, new_mean, channels));
      out.push_back(download(*device, new_var, channels));
    }
    return out;
  };
  const std::vector<FVec> full = run(true, false, true), bare = run(false, false, false);
  const std::vector<FVec> in_place = run(true, true, true);
  ASSERT_EQ(full.size(), 8u);
  ASSERT_EQ(bare.size(), 5u);
  for (std::size_t i = 0; i < bare.size(); ++i) EXPECT_EQ(bare[i], full[i]) << "output " << i;
  EXPECT_EQ(in_place, full);
}

// Odd images (7x5, 3 channels, batch 3), fully connected (spatial 1), a batch of one image;
// channel means of about a hundred times the spread (single-pass float32 sums of squares would
// lose the variance there; the float32 saved mean still rounds by 1e-7 of the mean, i.e. up to
// 1e-5 of the spread, which kForwardTol of the output scale, about 3 spreads, still covers); and
// variances of about 1e-6, below eps, so that eps matters.
INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormOp,
                         testing::Values(BnCase{3, 3, 35, 2.0}, BnCase{5, 4, 1, -1.0}, BnCase{1, 2, 7, 0.0},
                                         BnCase{3, 3, 35, 100.0}, BnCase{3, 3, 35, 0.0, 1e-3}),
                         [](const testing::TestParamInfo<BnCase>& p) { return p.param.name(); });

// Running variances near 2, and near 1e-5 (where eps matters).
TEST(BatchNormOpInference, NormalisesWithTheRunningStatistics) {
  const BnCase d{3, 3, 35, 2.0};
  const auto channels = static_cast<std::size_t>(d.channels);
  auto device = make_cpu_backend();
  const FVec x = bn_inputs(d, 321), gamma = normal_floats(channels, 322, 0.5, 1.0);
  const FVec beta = normal_floats(channels, 323), mean = normal_floats(channels, 324, 1.0, 3.0);
  for (const double scale : {1.0, 1e-5}) {
    const FVec var = normal_floats(channels, 325, 0.2 * scale, 2.0 * scale);
    DeviceBuffer xb = upload(*device, x), gb = upload(*device, gamma), bb = upload(*device, beta);
    DeviceBuffer mb = upload(*device, mean), vb = upload(*device, var), yb = poisoned(*device, d.size());
    device->batchnorm_forward_infer(d.shape(), xb.floats(), gb.floats(), bb.floats(), mb.floats(), vb.floats(), kEps,
                                    yb.floats());
    EXPECT_TRUE(all_close(
        download(*device, yb.floats(), d.size()),
        ref_bn_apply(d, to_double(x), to_double(gamma), to_double(beta), to_double(mean), to_double(var)), kForwardTol))
        << "variance scale " << scale;
  }
}

// ---------------------------------------------------------------- activations

double ref_activation(Activation f, double x) {
  switch (f) {
    case Activation::kGelu: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case Activation::kTanh: return std::tanh(x);
    case Activation::kSigmoid: return 1.0 / (1.0 + std::exp(-x));
    case Activation::kGeluTanh: return sequence_reference::gelu_tanh(x);
  }
  return kNaN;
}

const char* activation_name(Activation f) {
  switch (f) {
    case Activation::kGelu: return "gelu";
    case Activation::kTanh: return "tanh";
    case Activation::kSigmoid: return "sigmoid";
    case Activation::kGeluTanh: return "gelu_tanh";
  }
  return "?";
}

bool reads_input(Activation f) { return f == Activation::kGelu || f == Activation::kGeluTanh; }

class ActivationOp : public testing::TestWithParam<Activation> {};

// Backward is given only what the contract says it reads (x for GELU, y for tanh and sigmoid;
// the other pointer null).
TEST_P(ActivationOp, MatchesReferenceAndFiniteDifferences) {
  const Activation f = GetParam();
  const std::size_t n = 1031;
  auto device = make_cpu_backend();
  const FVec x = normal_floats(n, 401, 3.0), r = normal_floats(n, 402);
  DeviceBuffer xb = upload(*device, x), rb = upload(*device, r), yb = poisoned(*device, n), dxb = poisoned(*device, n);
  device->activation_forward(f, xb.floats(), yb.floats(), n);
  const bool reads_x = reads_input(f);
  device->activation_backward(f, reads_x ? xb.floats() : nullptr, reads_x ? nullptr : yb.floats(), rb.floats(),
                              dxb.floats(), n);
  const OpRun got{download(*device, yb.floats(), n), {download(*device, dxb.floats(), n)}};
  check_op(
      {x}, r, got,
      [f](const std::vector<Vec>& in) {
        Vec y(in[0].size());
        for (std::size_t i = 0; i < y.size(); ++i) y[i] = ref_activation(f, in[0][i]);
        return y;
      },
      activation_name(f));
}

TEST_P(ActivationOp, InPlaceEqualsOutOfPlace) {
  const Activation f = GetParam();
  const std::size_t n = 517;
  auto device = make_cpu_backend();
  const FVec x = normal_floats(n, 411, 2.0), dy = normal_floats(n, 412);
  DeviceBuffer xb = upload(*device, x), dyb = upload(*device, dy), yb = poisoned(*device, n);
  DeviceBuffer dxb = poisoned(*device, n);
  device->activation_forward(f, xb.floats(), yb.floats(), n);
  device->activation_backward(f, xb.floats(), yb.floats(), dyb.floats(), dxb.floats(), n);
  const FVec y = download(*device, yb.floats(), n), dx = download(*device, dxb.floats(), n);
  // GELU's backward needs x, so it keeps x and overwrites dy; tanh and sigmoid overwrite x with
  // y and dy with dx.
  DeviceBuffer a = upload(*device, x), g = upload(*device, dy);
  if (reads_input(f)) {
    DeviceBuffer out = poisoned(*device, n);
    device->activation_forward(f, a.floats(), out.floats(), n);
    device->activation_backward(f, a.floats(), nullptr, g.floats(), g.floats(), n);
    EXPECT_EQ(download(*device, out.floats(), n), y);
    DeviceBuffer in_place = upload(*device, x);
    device->activation_forward(f, in_place.floats(), in_place.floats(), n);
    EXPECT_EQ(download(*device, in_place.floats(), n), y);
  } else {
    device->activation_forward(f, a.floats(), a.floats(), n);
    device->activation_backward(f, nullptr, a.floats(), g.floats(), g.floats(), n);
    EXPECT_EQ(download(*device, a.floats(), n), y);
  }
  EXPECT_EQ(download(*device, g.floats(), n), dx);
}

INSTANTIATE_TEST_SUITE_P(All, ActivationOp,
                         testing::Values(Activation::kGelu, Activation::kTanh, Activation::kSigmoid,
                                         Activation::kGeluTanh),
                         [](const testing::TestParamInfo<Activation>& p) { return activation_name(p.param); });

// ---------------------------------------------------------------- dropout

// A device buffer of mask bytes.
std::uint8_t* mask_bytes(const DeviceBuffer& b) { return static_cast<std::uint8_t*>(static_cast<void*>(b.floats())); }

struct DropoutRun {
  FVec y;
  std::vector<std::uint8_t> mask;
};

DropoutRun run_dropout(Backend& device, const DropoutShape& s, const FVec& x) {
  DeviceBuffer xb = upload(device, x), yb = poisoned(device, s.size());
  DeviceBuffer mb = device.allocate(s.size());
  std::vector<std::uint8_t> mask(s.size(), 0xAA);  // neither 0 nor 1
  device.copy_from_host(mb.floats(), mask.data(), mask.size());
  device.dropout_forward(s, xb.floats(), yb.floats(), mask_bytes(mb));
  device.synchronize();
  device.copy_to_host(mask.data(), mb.floats(), mask.size());
  return {download(device, yb.floats(), s.size()), mask};
}

// The mask is the contract's hash rule, element by element; kept values are x / (1 - p).
TEST(DropoutOp, MaskFollowsTheHashAndKeptValuesAreScaled) {
  auto device = make_cpu_backend();
  const DropoutShape s{6, 37, 0.3f, kernels::dropout_key(7, 12, 3), 40};
  const FVec x = normal_floats(s.size(), 501);
  const DropoutRun got = run_dropout(*device, s, x);
  std::size_t kept = 0;
  Vec expected(s.size());
  for (int r = 0; r < s.rows; ++r)
    for (std::size_t e = 0; e < s.per_sample; ++e) {
      const std::size_t i = static_cast<std::size_t>(r) * s.per_sample + e;
      const bool keep = kernels::dropout_keep(s.key, s.first_sample + r, e, s.p);
      ASSERT_EQ(got.mask[i], keep ? 1 : 0) << "row " << r << " element " << e;
      expected[i] = keep ? x[i] / (1.0 - s.p) : 0.0;
      kept += keep;
      if (!keep) {
        EXPECT_EQ(got.y[i], 0.0f) << i;
      }
    }
  EXPECT_GT(kept, 0u);
  EXPECT_LT(kept, s.size());
  EXPECT_TRUE(all_close(got.y, expected, 1e-6));  // one or two float32 roundings
}

// Forward of rows [0, 6) in one call equals two calls of 3 rows with first_sample 0 and 3 (and
// likewise at another global offset): the mask depends on the global sample, not on the call.
TEST(DropoutOp, MaskDoesNotDependOnHowTheRowsAreSplit) {
  auto device = make_cpu_backend();
  const std::uint64_t key = kernels::dropout_key(11, 5, 2);
  const std::size_t per_sample = 53;
  const FVec x = normal_floats(6 * per_sample, 511);
  for (const std::int64_t first : {std::int64_t{0}, std::int64_t{1000}}) {
    const DropoutRun whole = run_dropout(*device, {6, per_sample, 0.5f, key, first}, x);
    const FVec top(x.data(), x.data() + 3 * per_sample), bottom(x.data() + 3 * per_sample, x.data() + x.size());
    const DropoutRun a = run_dropout(*device, {3, per_sample, 0.5f, key, first}, top);
    const DropoutRun b = run_dropout(*device, {3, per_sample, 0.5f, key, first + 3}, bottom);
    FVec y = a.y;
    y.insert(y.end(), b.y.begin(), b.y.end());
    std::vector<std::uint8_t> mask = a.mask;
    mask.insert(mask.end(), b.mask.begin(), b.mask.end());
    EXPECT_EQ(whole.y, y) << "first sample " << first;
    EXPECT_EQ(whole.mask, mask) << "first sample " << first;
    // Rows differ from one another (the sample index enters the hash).
    EXPECT_NE(std::vector<std::uint8_t>(whole.mask.begin(), whole.mask.begin() + per_sample),
              std::vector<std::uint8_t>(whole.mask.begin() + per_sample, whole.mask.begin() + 2 * per_sample));
  }
  // Another key (step, layer) gives another mask.
  const DropoutRun one = run_dropout(*device, {6, per_sample, 0.5f, key, 0}, x);
  const DropoutRun other = run_dropout(*device, {6, per_sample, 0.5f, kernels::dropout_key(11, 6, 2), 0}, x);
  EXPECT_NE(one.mask, other.mask);
}

// Over 10^6 values the dropped fraction is p within 5 standard deviations (sqrt(p(1-p)/n) <=
// 5e-4); p = 0 keeps everything unchanged.
TEST(DropoutOp, DropsAboutAFractionPAndNothingAtZero) {
  auto device = make_cpu_backend();
  const DropoutShape base{1000, 1000, 0.0f, kernels::dropout_key(3, 0, 0), 0};
  const FVec x = normal_floats(base.size(), 521);
  for (const float p : {0.1f, 0.5f, 0.9f}) {
    DropoutShape s = base;
    s.p = p;
    const DropoutRun got = run_dropout(*device, s, x);
    std::size_t dropped = 0;
    for (std::uint8_t m : got.mask) dropped += m == 0;
    const double fraction = static_cast<double>(dropped) / static_cast<double>(s.size());
    const double sigma = std::sqrt(p * (1.0 - p) / static_cast<double>(s.size()));
    EXPECT_NEAR(fraction, p, 5 * sigma) << "p " << p;
  }
  const DropoutRun none = run_dropout(*device, base, x);
  EXPECT_EQ(none.y, x);
  EXPECT_EQ(none.mask, std::vector<std::uint8_t>(base.size(), 1));
}

// dx = dy * mask / (1 - p), out of place and in place; forward in place equals out of place.
TEST(DropoutOp, BackwardScalesByTheMaskAndInPlaceWorks) {
  auto device = make_cpu_backend();
  const DropoutShape s{5, 41, 0.25f, kernels::dropout_key(9, 1, 4), 17};
  const FVec x = normal_floats(s.size(), 531), dy = normal_floats(s.size(), 532);
  const DropoutRun apart = run_dropout(*device, s, x);
  DeviceBuffer mb = device->allocate(s.size());
  device->copy_from_host(mb.floats(), apart.mask.data(), s.size());
  const std::uint8_t* mask = mask_bytes(mb);
  DeviceBuffer dyb = upload(*device, dy), dxb = poisoned(*device, s.size());
  device->dropout_backward(s, dyb.floats(), mask, dxb.floats());
  const FVec dx = download(*device, dxb.floats(), s.size());
  Vec expected(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) expected[i] = apart.mask[i] ? dy[i] / (1.0 - s.p) : 0.0;
  EXPECT_TRUE(all_close(dx, expected, 1e-6));
  device->dropout_backward(s, dyb.floats(), mask, dyb.floats());
  EXPECT_EQ(download(*device, dyb.floats(), s.size()), dx);
  DeviceBuffer xb = upload(*device, x), mask_b = device->allocate(s.size());
  device->dropout_forward(s, xb.floats(), xb.floats(), mask_bytes(mask_b));
  EXPECT_EQ(download(*device, xb.floats(), s.size()), apart.y);
}

// ---------------------------------------------------------------- copy_rows

// Rows land at their strides and nothing between them is touched; used as a concatenation
// along channels and its split.
TEST(CopyRowsOp, CopiesStridedRowsAndNothingElse) {
  auto device = make_cpu_backend();
  const std::size_t rows = 4, src_stride = 7, dst_stride = 11, width = 5;
  const FVec src = normal_floats(rows * src_stride, 601);
  DeviceBuffer sb = upload(*device, src), db = poisoned(*device, rows * dst_stride);
  device->copy_rows(db.floats(), dst_stride, sb.floats(), src_stride, width, rows);
  const FVec dst = download(*device, db.floats(), rows * dst_stride);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t j = 0; j < dst_stride; ++j) {
      if (j < width) {
        EXPECT_EQ(dst[r * dst_stride + j], src[r * src_stride + j]) << r << "," << j;
      } else {
        EXPECT_TRUE(std::isnan(dst[r * dst_stride + j])) << r << "," << j;  // untouched
      }
    }

  // [3 x 2 x 6] and [3 x 4 x 6] concatenated along channels into [3 x 6 x 6], and split back.
  const std::size_t n = 3, a_row = 12, b_row = 24, row = a_row + b_row;
  const FVec a = normal_floats(n * a_row, 602), b = normal_floats(n * b_row, 603);
  DeviceBuffer ab = upload(*device, a), bb = upload(*device, b), cat = poisoned(*device, n * row);
  device->copy_rows(cat.floats(), row, ab.floats(), a_row, a_row, n);
  device->copy_rows(cat.floats() + a_row, row, bb.floats(), b_row, b_row, n);
  FVec expected;
  for (std::size_t i = 0; i < n; ++i) {
    expected.insert(expected.end(), &a[i * a_row], &a[i * a_row] + a_row);
    expected.insert(expected.end(), &b[i * b_row], &b[i * b_row] + b_row);
  }
  EXPECT_EQ(download(*device, cat.floats(), n * row), expected);
  DeviceBuffer back = poisoned(*device, n * b_row);
  device->copy_rows(back.floats(), b_row, cat.floats() + a_row, row, b_row, n);
  EXPECT_EQ(download(*device, back.floats(), n * b_row), b);
}

// ---------------------------------------------------------------- layer norm

struct LayerNormCase {
  int rows, dim;
  bool bias;
};

class LayerNormOp : public testing::TestWithParam<LayerNormCase> {};

// Forward against torch's formula in float64, the saved statistics, and dx, dgamma and dbeta
// against central differences; rows shifted and scaled away from zero mean and unit variance.
TEST_P(LayerNormOp, MatchesReferenceAndFiniteDifferences) {
  const LayerNormCase c = GetParam();
  const LayerNormShape s{c.rows, c.dim, 1e-5f};
  auto device = make_cpu_backend();
  FVec x = normal_floats(s.size(), 801, 2.0, 0.5);
  for (int r = 0; r < c.rows; ++r)
    for (int j = 0; j < c.dim; ++j) x[static_cast<std::size_t>(r) * c.dim + j] += static_cast<float>(r);
  const FVec gamma = normal_floats(c.dim, 802, 0.5, 1.0), beta = normal_floats(c.dim, 803),
             r = normal_floats(s.size(), 804);
  DeviceBuffer xb = upload(*device, x), gb = upload(*device, gamma), bb = upload(*device, beta),
               rb = upload(*device, r);
  DeviceBuffer yb = poisoned(*device, s.size()), mb = poisoned(*device, c.rows), ib = poisoned(*device, c.rows);
  DeviceBuffer dxb = poisoned(*device, s.size()), dgb = poisoned(*device, c.dim), dbb = poisoned(*device, c.dim);
  device->layernorm_forward(s, xb.floats(), gb.floats(), c.bias ? bb.floats() : nullptr, yb.floats(), mb.floats(),
                            ib.floats());
  device->layernorm_backward(s, xb.floats(), rb.floats(), gb.floats(), mb.floats(), ib.floats(), dxb.floats(),
                             dgb.floats(), c.bias ? dbb.floats() : nullptr);
  const FVec mean = download(*device, mb.floats(), c.rows), inv = download(*device, ib.floats(), c.rows);
  for (int row = 0; row < c.rows; ++row) {
    double m = 0.0, v = 0.0;
    for (int j = 0; j < c.dim; ++j) m += x[static_cast<std::size_t>(row) * c.dim + j];
    m /= c.dim;
    for (int j = 0; j < c.dim; ++j) v += std::pow(x[static_cast<std::size_t>(row) * c.dim + j] - m, 2);
    v /= c.dim;
    EXPECT_NEAR(mean[row], m, 1e-6 * (std::abs(m) + 1.0)) << row;
    EXPECT_NEAR(inv[row], 1.0 / std::sqrt(v + 1e-5), 1e-5 / std::sqrt(v + 1e-5)) << row;
  }
  const auto reference = [&](const std::vector<Vec>& in) {
    return sequence_reference::layernorm(in[0], in[1], c.bias ? in[2] : Vec{}, c.rows, c.dim, 1e-5);
  };
  const OpRun got{download(*device, yb.floats(), s.size()),
                  {download(*device, dxb.floats(), s.size()), download(*device, dgb.floats(), c.dim),
                   c.bias ? download(*device, dbb.floats(), c.dim) : FVec{}}};
  check_op({x, gamma, beta}, r, got, reference, "layernorm");
  if (!c.bias) {
    EXPECT_TRUE(std::isnan(download(*device, dbb.floats(), 1)[0]));  // no shift: dbeta untouched
  }
  // Without dx the parameter gradients are the same.
  DeviceBuffer dg2 = poisoned(*device, c.dim);
  device->layernorm_backward(s, xb.floats(), rb.floats(), gb.floats(), mb.floats(), ib.floats(), nullptr, dg2.floats(),
                             nullptr);
  EXPECT_EQ(download(*device, dg2.floats(), c.dim), got.grads[1]);
}

INSTANTIATE_TEST_SUITE_P(Shapes, LayerNormOp,
                         testing::Values(LayerNormCase{7, 13, true}, LayerNormCase{1, 1, true},
                                         LayerNormCase{3, 64, false}, LayerNormCase{130, 5, true}),
                         [](const testing::TestParamInfo<LayerNormCase>& p) {
                           return "r" + std::to_string(p.param.rows) + "d" + std::to_string(p.param.dim) +
                                  (p.param.bias ? "" : "_nobias");
                         });

// A constant row has variance 0: y = beta exactly (eps keeps 1 / sqrt finite).
TEST(LayerNormOpEdge, AConstantRowGivesTheShift) {
  auto device = make_cpu_backend();
  const LayerNormShape s{1, 6, 1e-5f};
  const FVec x(6, 3.0f), gamma = normal_floats(6, 811), beta = normal_floats(6, 812);
  DeviceBuffer xb = upload(*device, x), gb = upload(*device, gamma), bb = upload(*device, beta);
  DeviceBuffer yb = poisoned(*device, 6), mb = poisoned(*device, 1), ib = poisoned(*device, 1);
  device->layernorm_forward(s, xb.floats(), gb.floats(), bb.floats(), yb.floats(), mb.floats(), ib.floats());
  EXPECT_EQ(download(*device, yb.floats(), 6), beta);
}

// ---------------------------------------------------------------- token embedding

TEST(EmbeddingOp, GathersRowsAndScatterAddsGradients) {
  auto device = make_cpu_backend();
  const EmbeddingShape s{9, 5, 70};              // 70 columns: more than one column block of the scatter
  const FVec ids = {4, 0, 4, 2, 4, 1, 0, 3, 4};  // repeated ids add up
  const FVec table = normal_floats(static_cast<std::size_t>(s.vocab) * s.dim, 901);
  const FVec dy = normal_floats(static_cast<std::size_t>(s.rows) * s.dim, 902);
  DeviceBuffer ib = upload(*device, ids), tb = upload(*device, table), yb = poisoned(*device, dy.size());
  device->embedding_forward(s, ib.floats(), tb.floats(), yb.floats());
  const FVec y = download(*device, yb.floats(), dy.size());
  for (int r = 0; r < s.rows; ++r)
    for (int j = 0; j < s.dim; ++j)
      ASSERT_EQ(y[static_cast<std::size_t>(r) * s.dim + j],
                table[static_cast<std::size_t>(ids[static_cast<std::size_t>(r)]) * s.dim + j]);
  Vec expected(table.size(), 0.0);
  for (int r = 0; r < s.rows; ++r)
    for (int j = 0; j < s.dim; ++j)
      expected[static_cast<std::size_t>(ids[static_cast<std::size_t>(r)]) * s.dim + j] +=
          dy[static_cast<std::size_t>(r) * s.dim + j];
  DeviceBuffer dyb = upload(*device, dy), gb = poisoned(*device, table.size());
  device->embedding_backward(s, ib.floats(), dyb.floats(), gb.floats(), false);
  const FVec written = download(*device, gb.floats(), table.size());
  EXPECT_TRUE(all_close(written, expected, 1e-6));
  // accumulate: adds to what is there (a tied head's part), the rows no token uses untouched.
  const FVec before = normal_floats(table.size(), 903);
  DeviceBuffer acc = upload(*device, before);
  device->embedding_backward(s, ib.floats(), dyb.floats(), acc.floats(), true);
  Vec sum(table.size());
  for (std::size_t i = 0; i < sum.size(); ++i) sum[i] = before[i] + expected[i];
  EXPECT_TRUE(all_close(download(*device, acc.floats(), table.size()), sum, 1e-6));
}

TEST(EmbeddingOp, RejectsIdsOutsideTheVocabulary) {
  auto device = make_cpu_backend();
  const FVec table(12, 1.0f);
  DeviceBuffer tb = upload(*device, table), yb = poisoned(*device, 12);
  for (const float bad : {3.0f, -1.0f, 1.5f, kNaN}) {
    const FVec ids = {0.0f, bad};
    DeviceBuffer ib = upload(*device, ids);
    try {
      device->embedding_forward({2, 3, 4}, ib.floats(), tb.floats(), yb.floats());
      ADD_FAILURE() << "id " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("position 1"), std::string::npos) << e.what();
    }
  }
}

// ---------------------------------------------------------------- attention

struct AttentionCase {
  int batch, length, heads, head_dim;
  float dropout;
  int tile_q, tile_k;  // 0: the backend's
  std::string name() const {
    return "n" + std::to_string(batch) + "T" + std::to_string(length) + "H" + std::to_string(heads) + "hd" +
           std::to_string(head_dim) + "p" + std::to_string(static_cast<int>(std::lround(dropout * 100))) + "tiles" +
           std::to_string(tile_q) + "x" + std::to_string(tile_k);
  }
  AttentionShape shape() const {
    AttentionShape s;
    s.batch = batch, s.length = length, s.heads = heads, s.head_dim = head_dim, s.dropout = dropout;
    s.key = kernels::dropout_key(5, 9, 3), s.first_sample = 11, s.tile_q = tile_q, s.tile_k = tile_k;
    return s;
  }
  sequence_reference::Attention reference() const {
    const AttentionShape s = shape();
    return {batch, length, heads, head_dim, dropout, s.key, s.first_sample};
  }
};
void PrintTo(const AttentionCase& c, std::ostream* os) { *os << c.name(); }

struct AttentionRun {
  FVec y, lse, dqkv;
};

AttentionRun run_attention(Backend& device, const AttentionShape& s, const FVec& qkv, const FVec& dy) {
  const std::size_t out = static_cast<std::size_t>(s.batch) * s.length * s.dim();
  const std::size_t rows = static_cast<std::size_t>(s.batch) * s.heads * s.length;
  DeviceBuffer xb = upload(device, qkv), dyb = upload(device, dy), yb = poisoned(device, out);
  DeviceBuffer lb = poisoned(device, rows), dxb = poisoned(device, qkv.size());
  device.attention_forward(s, xb.floats(), yb.floats(), lb.floats());
  device.attention_backward(s, xb.floats(), yb.floats(), lb.floats(), dyb.floats(), dxb.floats());
  return {download(device, yb.floats(), out), download(device, lb.floats(), rows),
          download(device, dxb.floats(), qkv.size())};
}

class AttentionOp : public testing::TestWithParam<AttentionCase> {};

// y, lse and dqkv against the float64 definition (causal mask, heads split as nanoGPT's, dropout
// mask from the hash) and central differences; the tiles are small so that one sequence spans
// several, with T not a multiple of either.
TEST_P(AttentionOp, MatchesReferenceAndFiniteDifferences) {
  const AttentionCase c = GetParam();
  const AttentionShape s = c.shape();
  auto device = make_cpu_backend();
  const FVec qkv = normal_floats(static_cast<std::size_t>(c.batch) * c.length * 3 * s.dim(), 1001, 1.5);
  const FVec r = normal_floats(static_cast<std::size_t>(c.batch) * c.length * s.dim(), 1002);
  const AttentionRun got = run_attention(*device, s, qkv, r);
  Vec lse;
  sequence_reference::attention(c.reference(), to_double(qkv), &lse);
  EXPECT_TRUE(all_close(got.lse, lse, kForwardTol)) << "lse";
  check_op(
      {qkv}, r, {got.y, {got.dqkv}},
      [&](const std::vector<Vec>& in) { return sequence_reference::attention(c.reference(), in[0]); }, c.name());
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionOp,
                         testing::Values(AttentionCase{2, 7, 2, 3, 0.0f, 2, 3}, AttentionCase{2, 7, 2, 3, 0.3f, 2, 3},
                                         AttentionCase{1, 13, 3, 4, 0.0f, 4, 4}, AttentionCase{1, 13, 3, 4, 0.2f, 5, 2},
                                         AttentionCase{3, 1, 1, 5, 0.0f, 0, 0}, AttentionCase{1, 9, 1, 8, 0.0f, 16, 16},
                                         AttentionCase{1, 70, 2, 2, 0.0f, 0, 0},
                                         AttentionCase{1, 70, 2, 2, 0.1f, 0, 0}),
                         [](const testing::TestParamInfo<AttentionCase>& p) { return p.param.name(); });

// Where future positions are huge, a causal attention must not see them: changing q, k, v of
// the last position leaves every earlier output alone (bitwise), and dropout off in evaluation
// (p = 0) equals the p = 0 shape whatever the key.
TEST(AttentionOpMask, LaterPositionsDoNotReachEarlierOutputs) {
  auto device = make_cpu_backend();
  AttentionShape s;
  s.batch = 2, s.length = 11, s.heads = 2, s.head_dim = 3, s.tile_q = 4, s.tile_k = 3;
  const std::size_t row = 3 * static_cast<std::size_t>(s.dim());
  FVec qkv = normal_floats(std::size_t{22} * row, 1011);
  const FVec dy = normal_floats(std::size_t{22} * static_cast<std::size_t>(s.dim()), 1012);
  const AttentionRun before = run_attention(*device, s, qkv, dy);
  for (int n = 0; n < 2; ++n)
    for (std::size_t j = 0; j < row; ++j) qkv[(static_cast<std::size_t>(n) * 11 + 10) * row + j] = 1e3f;
  const AttentionRun after = run_attention(*device, s, qkv, dy);
  for (int n = 0; n < 2; ++n)
    for (int i = 0; i < 10; ++i)
      for (int c = 0; c < s.dim(); ++c) {
        const std::size_t at = (static_cast<std::size_t>(n) * 11 + i) * s.dim() + c;
        ASSERT_EQ(before.y[at], after.y[at]) << "sample " << n << " position " << i;
      }
  s.key = 12345;  // no effect without dropout
  EXPECT_EQ(run_attention(*device, s, qkv, dy).dqkv, after.dqkv);
}

// The tile sizes change the order of the sums only.
TEST(AttentionOpTiles, AnyTilingGivesTheSameResultToRounding) {
  auto device = make_cpu_backend();
  AttentionShape s;
  s.batch = 2, s.length = 37, s.heads = 3, s.head_dim = 8, s.dropout = 0.25f, s.key = 77;
  const FVec qkv = normal_floats(std::size_t{222} * static_cast<std::size_t>(s.dim()), 1021);
  const FVec dy = normal_floats(std::size_t{74} * static_cast<std::size_t>(s.dim()), 1022);
  const AttentionRun whole = run_attention(*device, s, qkv, dy);
  for (const auto& [tq, tk] : {std::pair<int, int>{1, 1}, {3, 7}, {16, 5}, {64, 128}}) {
    s.tile_q = tq, s.tile_k = tk;
    const AttentionRun tiled = run_attention(*device, s, qkv, dy);
    EXPECT_TRUE(all_close(tiled.y, to_double(whole.y), kForwardTol)) << tq << "x" << tk;
    EXPECT_TRUE(all_close(tiled.dqkv, to_double(whole.dqkv), kForwardTol)) << tq << "x" << tk;
  }
}

// ---------------------------------------------------------------- label smoothing

// -sum_j q_j log softmax_j(z), q = (1 - s) onehot(label) + s / classes, in float64.
double ref_smoothed_xent(const double* z, int classes, int label, double s) {
  const double top = *std::max_element(z, z + classes);
  double total = 0.0;
  for (int j = 0; j < classes; ++j) total += std::exp(z[j] - top);
  const double log_total = std::log(total) + top;
  double loss = 0.0;
  for (int j = 0; j < classes; ++j) loss -= ((j == label ? 1.0 - s : 0.0) + s / classes) * (z[j] - log_total);
  return loss;
}

double ref_smoothed_sum(const Vec& z, const Labels& labels, int classes, double s) {
  double sum = 0.0;
  for (std::size_t r = 0; r < labels.size(); ++r)
    sum += ref_smoothed_xent(z.data() + r * classes, classes, labels[r], s);
  return sum;
}

class LabelSmoothing : public testing::TestWithParam<float> {};

TEST_P(LabelSmoothing, LossAndGradientMatchReferenceAndFiniteDifferences) {
  const float smoothing = GetParam();
  const int rows = 6, classes = 7;
  const float grad_scale = 0.25f;
  FVec logits = normal_floats(static_cast<std::size_t>(rows) * classes, 701, 3.0);
  for (int j = 0; j < classes; ++j) logits[3 * classes + j] += 1000.0f;  // exp(1000) overflows a double
  Vec z = to_double(logits);
  Labels labels(rows);
  std::int64_t correct = 0;
  for (int r = 0; r < rows; ++r) {
    const double* row = z.data() + static_cast<std::size_t>(r) * classes;
    const int best = static_cast<int>(std::max_element(row, row + classes) - row);
    labels[r] = r % 3 == 0 ? best : (best + 1 + r) % classes;  // rows 0 and 3 right, the others wrong
    correct += labels[r] == best;
  }
  ASSERT_EQ(correct, 2);
  const double expected = ref_smoothed_sum(z, labels, classes, smoothing);

  auto device = make_cpu_backend();
  DeviceBuffer zb = upload(*device, logits), db = poisoned(*device, logits.size());
  DeviceBuffer lb = device->allocate(labels.size() * sizeof(std::int32_t));
  device->copy_from_host(lb.ints(), labels.data(), labels.size() * sizeof(std::int32_t));
  device->accumulate_softmax_cross_entropy(zb.floats(), lb.ints(), rows, classes, db.floats(), grad_scale, smoothing);
  const LossSums got = device->take_loss_sums();
  EXPECT_NEAR(got.loss, expected, kForwardTol * std::max(1.0, std::abs(expected)));
  EXPECT_EQ(got.correct, correct);
  Vec fd = finite_difference([&] { return ref_smoothed_sum(z, labels, classes, smoothing); }, z);
  for (double& g : fd) g *= grad_scale;
  EXPECT_TRUE(all_close(download(*device, db.floats(), logits.size()), fd, kGradTol));

  // The helper passes the smoothing on; smoothing 0 is the plain cross-entropy, bit for bit the
  // default argument's result.
  const LossSums again = device->softmax_cross_entropy(zb.floats(), lb.ints(), rows, classes, nullptr, 0.0f, smoothing);
  EXPECT_EQ(again.loss, got.loss);
  if (smoothing == 0.0f) {
    DeviceBuffer plain = poisoned(*device, logits.size());
    const LossSums old =
        device->softmax_cross_entropy(zb.floats(), lb.ints(), rows, classes, plain.floats(), grad_scale);
    EXPECT_EQ(old.loss, got.loss);
    EXPECT_EQ(download(*device, plain.floats(), logits.size()), download(*device, db.floats(), logits.size()));
    EXPECT_NEAR(got.loss, ref_smoothed_sum(z, labels, classes, 0.0), kForwardTol * std::abs(expected));
  } else {
    // Smoothing changes the loss: the test would see a backend that dropped it.
    EXPECT_GT(std::abs(got.loss - ref_smoothed_sum(z, labels, classes, 0.0)), 1e-3 * std::abs(expected));
  }
}

INSTANTIATE_TEST_SUITE_P(Amounts, LabelSmoothing, testing::Values(0.0f, 0.1f, 0.3f),
                         [](const testing::TestParamInfo<float>& p) {
                           return "s" + std::to_string(static_cast<int>(std::lround(p.param * 100)));
                         });

}  // namespace
}  // namespace drt::backend
