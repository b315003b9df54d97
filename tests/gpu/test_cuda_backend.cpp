// The CUDA backend against the CPU backend (itself checked against float64 references and
// finite differences in tests/unit/test_layers.cpp): cuBLAS GEMMs, cuDNN convolution and
// pooling, the loss, and whole training steps of the model zoo, on odd shapes. Outputs are
// poisoned with NaN first so unwritten elements fail. FMA-only math (no TF32), so the only
// differences are summation orders: tolerances as in the layer tests.
#include <gtest/gtest.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "drtrain/backend/backend.hpp"
#include "drtrain/backend/cuda_backend.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/nn/model_spec.hpp"
#include "drtrain/nn/network.hpp"
#include "support/device_compare.hpp"

namespace drt {
namespace {

using backend::Backend;
using backend::DeviceBuffer;
using testing_support::all_close;
using testing_support::download;
using testing_support::poison;
using testing_support::random_floats;
using testing_support::random_labels;
using testing_support::upload;

constexpr double kForwardTol = 1e-5;
constexpr double kGradTol = 1e-4;

struct Pair {
  std::unique_ptr<Backend> cpu = backend::make_cpu_backend();
  std::unique_ptr<Backend> gpu = backend::make_cuda_backend({});
};

TEST(CudaBackend, AllocatesZeroedMemoryCopiesAndTimes) {
  Pair p;
  EXPECT_EQ(p.gpu->kind(), backend::DeviceKind::kCuda);
  DeviceBuffer a = p.gpu->allocate_floats(1000), b = p.gpu->allocate_floats(1000);
  EXPECT_EQ(download(*p.gpu, a.floats(), 1000), std::vector<float>(1000, 0.0f));
  const std::vector<float> x = random_floats(1000, 1);
  p.gpu->mark(0);
  p.gpu->copy_from_host(a.floats(), x.data(), 1000 * sizeof(float));
  p.gpu->copy(b.floats(), a.floats(), 1000 * sizeof(float));
  p.gpu->mark(1);
  EXPECT_EQ(download(*p.gpu, b.floats(), 1000), x);
  EXPECT_GE(p.gpu->seconds_between(0, 1), 0.0);
  p.gpu->zero(b.floats(), 1000 * sizeof(float));
  EXPECT_EQ(download(*p.gpu, b.floats(), 1000), std::vector<float>(1000, 0.0f));
}

TEST(CudaBackend, GemmMatchesCpuForEveryTransposition) {
  Pair p;
  for (const auto [m, n, k] : {std::array<int, 3>{7, 13, 5}, std::array<int, 3>{65, 33, 129}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const auto a = random_floats(static_cast<std::size_t>(m) * k, 2),
                   b = random_floats(static_cast<std::size_t>(k) * n, 3);
        const auto c0 = random_floats(static_cast<std::size_t>(m) * n, 4);
        std::vector<float> expected = c0;
        p.cpu->gemm(ta, tb, m, n, k, 0.5f, a.data(), b.data(), 0.25f, expected.data());
        DeviceBuffer da = upload(*p.gpu, a), db = upload(*p.gpu, b), dc = upload(*p.gpu, c0);
        p.gpu->gemm(ta, tb, m, n, k, 0.5f, da.floats(), db.floats(), 0.25f, dc.floats());
        EXPECT_TRUE(all_close(download(*p.gpu, dc.floats(), c0.size()), expected, kForwardTol))
            << m << "x" << n << "x" << k << " ta " << ta << " tb " << tb;
      }
}

TEST(CudaBackend, ElementwiseOpsMatchCpu) {
  Pair p;
  const int rows = 37, cols = 29;
  const std::size_t n = static_cast<std::size_t>(rows) * cols;
  const auto x = random_floats(n, 5), dy = random_floats(n, 6), bias = random_floats(cols, 7);
  DeviceBuffer dx_in = upload(*p.gpu, x), ddy = upload(*p.gpu, dy), dbias = upload(*p.gpu, bias);
  DeviceBuffer out = p.gpu->allocate_floats(n);

  std::vector<float> expected(n);
  p.cpu->relu_forward(x.data(), expected.data(), n);
  poison(*p.gpu, out.floats(), n);
  p.gpu->relu_forward(dx_in.floats(), out.floats(), n);
  EXPECT_TRUE(all_close(download(*p.gpu, out.floats(), n), expected, 0.0)) << "relu forward";

  p.cpu->relu_backward(x.data(), dy.data(), expected.data(), n);
  poison(*p.gpu, out.floats(), n);
  p.gpu->relu_backward(dx_in.floats(), ddy.floats(), out.floats(), n);
  EXPECT_TRUE(all_close(download(*p.gpu, out.floats(), n), expected, 0.0)) << "relu backward";

  expected = x;
  p.cpu->add_bias_rows(expected.data(), bias.data(), rows, cols);
  p.gpu->add_bias_rows(dx_in.floats(), dbias.floats(), rows, cols);
  EXPECT_TRUE(all_close(download(*p.gpu, dx_in.floats(), n), expected, 0.0)) << "bias add";

  std::vector<float> grad_bias(cols);
  p.cpu->bias_grad_rows(dy.data(), grad_bias.data(), rows, cols);
  poison(*p.gpu, out.floats(), cols);
  p.gpu->bias_grad_rows(ddy.floats(), out.floats(), rows, cols);
  EXPECT_TRUE(all_close(download(*p.gpu, out.floats(), cols), grad_bias, 1e-6)) << "bias gradient";
}

TEST(CudaBackend, ConvolutionMatchesCpu) {
  Pair p;
  std::vector<backend::Conv2dShape> shapes(3);
  shapes[0] = {3, 2, 9, 11, 5, 3, 1, 1};
  shapes[1] = {4, 1, 28, 28, 32, 5, 1, 2};  // the CNN's first layer
  shapes[2] = {2, 3, 10, 7, 4, 3, 2, 0};
  for (const backend::Conv2dShape& s : shapes) {
    const std::size_t nx = static_cast<std::size_t>(s.batch) * s.in_channels * s.height * s.width;
    const std::size_t ny = static_cast<std::size_t>(s.batch) * s.out_channels * s.out_height() * s.out_width();
    const std::size_t nw = static_cast<std::size_t>(s.out_channels) * s.in_channels * s.kernel * s.kernel;
    const auto x = random_floats(nx, 10), w = random_floats(nw, 11, 0.3f), b = random_floats(s.out_channels, 12);
    const auto dy = random_floats(ny, 13);
    std::vector<float> ws(p.cpu->conv2d_workspace_floats(s));
    std::vector<float> y(ny), dw(nw), db(s.out_channels), dx(nx);
    p.cpu->conv2d_forward(s, x.data(), w.data(), b.data(), y.data(), ws.data());
    p.cpu->conv2d_backward(s, x.data(), w.data(), dy.data(), dw.data(), db.data(), dx.data(), ws.data());

    DeviceBuffer gx = upload(*p.gpu, x), gw = upload(*p.gpu, w), gb = upload(*p.gpu, b), gdy = upload(*p.gpu, dy);
    DeviceBuffer gy = p.gpu->allocate_floats(ny), gdw = p.gpu->allocate_floats(nw);
    DeviceBuffer gdb = p.gpu->allocate_floats(s.out_channels), gdx = p.gpu->allocate_floats(nx);
    DeviceBuffer gws = p.gpu->allocate_floats(p.gpu->conv2d_workspace_floats(s));
    for (auto* buf : {&gy, &gdw, &gdb, &gdx}) poison(*p.gpu, buf->floats(), buf->bytes() / sizeof(float));
    p.gpu->conv2d_forward(s, gx.floats(), gw.floats(), gb.floats(), gy.floats(), gws.floats());
    p.gpu->conv2d_backward(s, gx.floats(), gw.floats(), gdy.floats(), gdw.floats(), gdb.floats(), gdx.floats(),
                           gws.floats());
    EXPECT_TRUE(all_close(download(*p.gpu, gy.floats(), ny), y, kForwardTol)) << "forward";
    EXPECT_TRUE(all_close(download(*p.gpu, gdw.floats(), nw), dw, kGradTol)) << "weights";
    EXPECT_TRUE(all_close(download(*p.gpu, gdb.floats(), s.out_channels), db, kGradTol)) << "bias";
    EXPECT_TRUE(all_close(download(*p.gpu, gdx.floats(), nx), dx, kGradTol)) << "input";
    // Without dx (a first layer) the parameter gradients are the same.
    poison(*p.gpu, gdw.floats(), nw);
    p.gpu->conv2d_backward(s, gx.floats(), gw.floats(), gdy.floats(), gdw.floats(), gdb.floats(), nullptr,
                           gws.floats());
    EXPECT_TRUE(all_close(download(*p.gpu, gdw.floats(), nw), dw, kGradTol)) << "weights without dx";
  }
}

TEST(CudaBackend, MaxPoolMatchesCpu) {
  Pair p;
  const backend::Pool2dShape s{3, 4, 10, 9, 2, 2};
  const std::size_t nx = static_cast<std::size_t>(s.batch) * s.channels * s.height * s.width;
  const std::size_t ny = static_cast<std::size_t>(s.batch) * s.channels * s.out_height() * s.out_width();
  const auto x = random_floats(nx, 20), dy = random_floats(ny, 21);  // continuous: no ties
  std::vector<float> y(ny), dx(nx);
  std::vector<std::int32_t> argmax(ny);
  p.cpu->maxpool2d_forward(s, x.data(), y.data(), argmax.data());
  p.cpu->maxpool2d_backward(s, x.data(), y.data(), dy.data(), argmax.data(), dx.data());
  DeviceBuffer gx = upload(*p.gpu, x), gdy = upload(*p.gpu, dy), gy = p.gpu->allocate_floats(ny);
  DeviceBuffer gdx = p.gpu->allocate_floats(nx), garg = p.gpu->allocate(ny * sizeof(std::int32_t));
  poison(*p.gpu, gy.floats(), ny);
  poison(*p.gpu, gdx.floats(), nx);
  p.gpu->maxpool2d_forward(s, gx.floats(), gy.floats(), garg.ints());
  p.gpu->maxpool2d_backward(s, gx.floats(), gy.floats(), gdy.floats(), garg.ints(), gdx.floats());
  EXPECT_TRUE(all_close(download(*p.gpu, gy.floats(), ny), y, 0.0));
  EXPECT_TRUE(all_close(download(*p.gpu, gdx.floats(), nx), dx, 0.0));
}

TEST(CudaBackend, SoftmaxCrossEntropyAccumulatesLikeCpuAndRejectsBadLabels) {
  Pair p;
  const int rows = 45, classes = 10;
  const auto z = random_floats(static_cast<std::size_t>(rows) * classes, 30, 3.0f);
  auto labels = random_labels(rows, classes, 31);
  std::vector<float> d(z.size());
  const backend::LossSums expected =
      p.cpu->softmax_cross_entropy(z.data(), labels.data(), rows, classes, d.data(), 0.125f);
  DeviceBuffer gz = upload(*p.gpu, z), gl = upload(*p.gpu, labels), gd = p.gpu->allocate_floats(z.size());
  poison(*p.gpu, gd.floats(), z.size());
  p.gpu->accumulate_softmax_cross_entropy(gz.floats(), gl.ints(), rows, classes, gd.floats(), 0.125f);
  p.gpu->accumulate_softmax_cross_entropy(gz.floats(), gl.ints(), rows, classes, nullptr, 0.0f);  // twice
  const backend::LossSums got = p.gpu->take_loss_sums();
  EXPECT_NEAR(got.loss, 2 * expected.loss, 1e-9 * expected.loss);
  EXPECT_EQ(got.correct, 2 * expected.correct);
  EXPECT_TRUE(all_close(download(*p.gpu, gd.floats(), z.size()), d, 1e-6));
  EXPECT_EQ(p.gpu->take_loss_sums().loss, 0.0);  // taking resets

  labels[7] = classes;  // out of range
  DeviceBuffer bad = upload(*p.gpu, labels);
  p.gpu->accumulate_softmax_cross_entropy(gz.floats(), bad.ints(), rows, classes, nullptr, 0.0f);
  EXPECT_THROW(p.gpu->take_loss_sums(), Error);
}

// One training step of each zoo model: loss, accuracy and every gradient as on the CPU.
TEST(CudaBackend, NetworkTrainingStepMatchesCpu) {
  for (const char* model : {"mlp", "cnn", "mlp:784-33-17-10"}) {
    Pair p;
    const nn::ModelSpec spec = nn::ModelSpec::parse(model);
    const std::size_t total = spec.layout().total();
    std::vector<float> params(total);
    spec.init_params(5, params.data());
    const int n = 19;
    const auto x = random_floats(spec.input().per_sample() * n, 40);
    const auto labels = random_labels(n, spec.classes(), 41);

    nn::Network cpu_net(spec, *p.cpu, n + 3);
    std::vector<float> cpu_grads(total);
    cpu_net.bind(params.data(), cpu_grads.data());
    const backend::LossSums expected = cpu_net.train(x.data(), labels.data(), n, 1.0f / n);

    nn::Network gpu_net(spec, *p.gpu, n + 3);
    DeviceBuffer gp = upload(*p.gpu, params), gg = p.gpu->allocate_floats(total);
    DeviceBuffer gx = upload(*p.gpu, x), gl = upload(*p.gpu, labels);
    poison(*p.gpu, gg.floats(), total);
    gpu_net.bind(gp.floats(), gg.floats());
    const backend::LossSums got = gpu_net.train(gx.floats(), gl.ints(), n, 1.0f / n);
    EXPECT_NEAR(got.loss, expected.loss, kForwardTol * std::max(1.0, expected.loss)) << model;
    EXPECT_EQ(got.correct, expected.correct) << model;
    const std::vector<float> grads = download(*p.gpu, gg.floats(), total);
    for (const auto& t : spec.layout().tensors()) {
      const std::vector<float> a(grads.begin() + static_cast<std::ptrdiff_t>(t.offset),
                                 grads.begin() + static_cast<std::ptrdiff_t>(t.offset + t.numel));
      const std::vector<float> e(cpu_grads.begin() + static_cast<std::ptrdiff_t>(t.offset),
                                 cpu_grads.begin() + static_cast<std::ptrdiff_t>(t.offset + t.numel));
      // The MLP strictly; the CNN's 700k ReLU and pooling decisions may flip a near-tie or two
      // (device_compare.hpp, mostly_close): 0.2% of a tensor's entries may be off.
      const bool cnn = std::string(model) == "cnn";
      EXPECT_TRUE(cnn ? testing_support::mostly_close(a, e, kGradTol, a.size() / 500) : all_close(a, e, kGradTol))
          << model << " " << t.name;
    }
    EXPECT_GT(gpu_net.last_forward_s(), 0.0);
    EXPECT_GT(gpu_net.last_backward_s(), 0.0);
    const backend::LossSums eval = gpu_net.evaluate(gx.floats(), gl.ints(), n);
    EXPECT_NEAR(eval.loss, got.loss, 1e-9 * std::max(1.0, got.loss)) << model;
  }
}

TEST(CudaBackend, DeterministicAlgorithmsRepeatBitwise) {
  backend::CudaOptions o;
  o.deterministic = true;
  auto gpu = backend::make_cuda_backend(o);
  const nn::ModelSpec spec = nn::ModelSpec::parse("cnn");
  const std::size_t total = spec.layout().total();
  std::vector<float> params(total);
  spec.init_params(6, params.data());
  const int n = 64;
  const auto x = random_floats(spec.input().per_sample() * n, 50);
  const auto labels = random_labels(n, spec.classes(), 51);
  nn::Network net(spec, *gpu, n);
  DeviceBuffer gp = upload(*gpu, params), gg = gpu->allocate_floats(total);
  DeviceBuffer gx = upload(*gpu, x), gl = upload(*gpu, labels);
  net.bind(gp.floats(), gg.floats());
  const backend::LossSums first = net.train(gx.floats(), gl.ints(), n, 1.0f / n);
  const std::vector<float> g1 = download(*gpu, gg.floats(), total);
  const backend::LossSums second = net.train(gx.floats(), gl.ints(), n, 1.0f / n);
  EXPECT_EQ(first.loss, second.loss);
  EXPECT_EQ(g1, download(*gpu, gg.floats(), total));
}

TEST(CudaBackend, AMissingGpuIsAClearConfigError) {
  backend::CudaOptions o;
  o.device = backend::query_cuda_devices().count;  // one past the last
  EXPECT_THROW(backend::make_cuda_backend(o), ConfigError);
}

}  // namespace
}  // namespace drt
