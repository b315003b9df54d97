// drtrain's CUDA kernels (kernels/*.cu) against their CPU references (kernels/reference.cpp) on
// random data with a fixed seed: sizes 0, 1, 3, 1000 and 2^20 + 3 (a tail after the float4s),
// odd column counts, pointers off the 16-byte alignment (the scalar path) and in place. Outputs
// are poisoned with NaN before each kernel, and guard floats around every array must come back
// untouched, so an element left unwritten or written out of bounds fails.
//
// Exact where both sides do the same float operations in the same order (ReLU, bias add and
// gradient, scale, bf16, dropout masks); within a few ulp where nvcc fuses a * b + c into an FMA
// (axpby, optimizers) or the device's erff/expf/tanhf differ from glibc's (GELU, tanh, sigmoid);
// softmax cross-entropy (with and without label smoothing) within 1e-9 (loss, a sum in another
// order, and GPU exp/log) and 1e-6 (dlogits). The pooling kernels, which have no CPU reference,
// against plain loops here. Memory and the stream come from the CUDA backend: no CUDA headers
// here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "drtrain/backend/backend.hpp"
#include "drtrain/backend/cuda_backend.hpp"
#include "drtrain/kernels/launchers.hpp"
#include "drtrain/kernels/reference.hpp"

namespace drt::kernels {
namespace {

using backend::Backend;
using backend::DeviceBuffer;

const std::vector<std::size_t> kSizes = {0, 1, 3, 1000, (std::size_t{1} << 20) + 3};
constexpr std::size_t kGuard = 8;                 // floats after each array
constexpr std::uint32_t kSentinel = 0x7fbadbadu;  // a NaN pattern kernels never produce
const float kNaN = std::numeric_limits<float>::quiet_NaN();

std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
float from_bits(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

std::vector<float> normal_floats(std::size_t n, std::uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::string show(float x) {
  char text[64];
  std::snprintf(text, sizeof text, "%.9g (0x%08x)", static_cast<double>(x), static_cast<unsigned>(bits(x)));
  return text;
}
std::string show(double x) {
  char text[64];
  std::snprintf(text, sizeof text, "%.17g", x);
  return text;
}
std::string show(std::uint16_t x) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%04x", static_cast<unsigned>(x));
  return text;
}

// Compares element by element; reports the number of mismatches and the first few.
template <typename T, typename Ok>
::testing::AssertionResult compare(const std::vector<T>& got, const std::vector<T>& want, Ok ok,
                                   const std::string& what) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << what << ": size " << got.size() << ", expected " << want.size();
  std::size_t bad = 0;
  std::string first;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (ok(got[i], want[i])) continue;
    if (++bad <= 5) first += "\n  [" + std::to_string(i) + "] got " + show(got[i]) + ", expected " + show(want[i]);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << got.size() << " elements differ" << first;
}

::testing::AssertionResult same_bits(const std::vector<float>& got, const std::vector<float>& want,
                                     const std::string& what) {
  return compare(
      got, want, [](float a, float b) { return bits(a) == bits(b); }, what);
}
::testing::AssertionResult same_bits(const std::vector<std::uint16_t>& got, const std::vector<std::uint16_t>& want,
                                     const std::string& what) {
  return compare(
      got, want, [](std::uint16_t a, std::uint16_t b) { return a == b; }, what);
}
// |got - want| <= rel * max(1, |want|); NaN never passes.
::testing::AssertionResult near(const std::vector<float>& got, const std::vector<float>& want, double rel,
                                const std::string& what) {
  return compare(
      got, want,
      [rel](float a, float b) { return std::fabs(double(a) - double(b)) <= rel * std::max(1.0, std::fabs(double(b))); },
      what);
}

double* doubles(const DeviceBuffer& b) { return reinterpret_cast<double*>(b.floats()); }

std::string label(const char* name, std::size_t n, std::size_t offset = 0) {
  return std::string(name) + " n=" + std::to_string(n) + (offset ? " (unaligned)" : "");
}

class Kernels : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { gpu_ = backend::make_cuda_backend({}); }
  static void TearDownTestSuite() { gpu_.reset(); }
  static Backend& gpu() { return *gpu_; }
  static Stream stream() { return backend::cuda_stream(*gpu_); }

  // n floats on the device, `offset` floats (0..3) past a 256-byte aligned start, followed by
  // kGuard guard floats; the floats before and after hold kSentinel.
  struct Array {
    DeviceBuffer buffer;
    std::size_t offset = 0, n = 0;
    float* data() const { return buffer.floats() + offset; }
  };
  static Array upload(const std::vector<float>& values, std::size_t offset = 0) {
    std::vector<float> host(offset + values.size() + kGuard, from_bits(kSentinel));
    std::copy(values.begin(), values.end(), host.begin() + static_cast<std::ptrdiff_t>(offset));
    Array a{gpu().allocate_floats(host.size()), offset, values.size()};
    gpu().copy_from_host(a.buffer.floats(), host.data(), host.size() * sizeof(float));
    gpu().synchronize();  // `host` goes away on return; an asynchronous copy may still read it
    return a;
  }
  static Array poisoned(std::size_t n, std::size_t offset = 0) { return upload(std::vector<float>(n, kNaN), offset); }
  // The n floats of `a`; fails the test when a guard float changed.
  static std::vector<float> download(const Array& a) {
    std::vector<float> host(a.offset + a.n + kGuard);
    gpu().synchronize();
    gpu().copy_to_host(host.data(), a.buffer.floats(), host.size() * sizeof(float));
    gpu().synchronize();
    for (std::size_t i = 0; i < host.size(); ++i) {
      if (i >= a.offset && i < a.offset + a.n) continue;
      EXPECT_EQ(bits(host[i]), kSentinel)
          << "guard float " << i << " was overwritten (array at " << a.offset << ", " << a.n << " floats)";
    }
    return std::vector<float>(host.begin() + static_cast<std::ptrdiff_t>(a.offset),
                              host.begin() + static_cast<std::ptrdiff_t>(a.offset + a.n));
  }

  template <typename T>
  static DeviceBuffer upload_raw(const std::vector<T>& values) {
    DeviceBuffer b = gpu().allocate(std::max<std::size_t>(values.size() * sizeof(T), 16));
    if (!values.empty()) gpu().copy_from_host(b.floats(), values.data(), values.size() * sizeof(T));
    gpu().synchronize();  // `values` may be a temporary
    return b;
  }
  template <typename T>
  static std::vector<T> download_raw(const DeviceBuffer& b, std::size_t count) {
    std::vector<T> host(count);
    gpu().synchronize();
    if (count) gpu().copy_to_host(host.data(), b.floats(), count * sizeof(T));
    gpu().synchronize();
    return host;
  }

  static std::unique_ptr<Backend> gpu_;
};
std::unique_ptr<Backend> Kernels::gpu_;

// ---- elementwise

TEST_F(Kernels, ReluForward) {
  for (std::size_t n : kSizes) {
    const std::vector<float> x = normal_floats(n, 1);
    std::vector<float> want(n);
    ref::relu_forward(x.data(), want.data(), n);
    for (std::size_t offset : {0, 1}) {
      for (std::size_t y_offset : {std::size_t{0}, std::size_t{1}}) {  // aligned (float4 path) and mixed
        const Array dx = upload(x, offset), y = poisoned(n, y_offset);
        relu_forward(dx.data(), y.data(), n, stream());
        EXPECT_TRUE(
            same_bits(download(y), want, label("relu_forward", n, offset) + " y offset " + std::to_string(y_offset)));
      }
      const Array xy = upload(x, offset);  // in place
      relu_forward(xy.data(), xy.data(), n, stream());
      EXPECT_TRUE(same_bits(download(xy), want, label("relu_forward in place", n, offset)));
    }
  }
}

TEST_F(Kernels, ReluBackward) {
  for (std::size_t n : kSizes) {
    std::vector<float> y = normal_floats(n, 2);
    ref::relu_forward(y.data(), y.data(), n);
    const std::vector<float> dy = normal_floats(n, 3);
    std::vector<float> want(n);
    ref::relu_backward(y.data(), dy.data(), want.data(), n);
    for (std::size_t offset : {0, 1}) {
      const Array dev_y = upload(y, offset), dev_dy = upload(dy, offset), dx = poisoned(n, offset);
      relu_backward(dev_y.data(), dev_dy.data(), dx.data(), n, stream());
      EXPECT_TRUE(same_bits(download(dx), want, label("relu_backward", n, offset)));
      relu_backward(dev_y.data(), dev_dy.data(), dev_dy.data(), n, stream());  // dx == dy
      EXPECT_TRUE(same_bits(download(dev_dy), want, label("relu_backward in place", n, offset)));
    }
  }
}

TEST_F(Kernels, Axpby) {
  const float a = 0.75f, b = -1.25f;
  for (std::size_t n : kSizes) {
    const std::vector<float> x = normal_floats(n, 4), y = normal_floats(n, 5);
    std::vector<float> want = y;
    ref::axpby(a, x.data(), b, want.data(), n);
    for (std::size_t offset : {0, 1}) {
      const Array dx = upload(x, offset), dy = upload(y, (offset + 1) % 2);
      axpby(a, dx.data(), b, dy.data(), n, stream());
      EXPECT_TRUE(near(download(dy), want, 1e-6, label("axpby", n, offset)));
      const Array same = upload(y, offset);
      axpby(a, same.data(), b, same.data(), n, stream());  // x == y: (a + b) * y
      std::vector<float> want_same = y;
      ref::axpby(a, y.data(), b, want_same.data(), n);
      EXPECT_TRUE(near(download(same), want_same, 1e-6, label("axpby x == y", n, offset)));
    }
  }
}

TEST_F(Kernels, Scale) {
  for (std::size_t n : kSizes) {
    const std::vector<float> x = normal_floats(n, 6);
    std::vector<float> want = x;
    ref::scale(-0.3f, want.data(), n);
    for (std::size_t offset : {0, 1, 2}) {
      const Array dx = upload(x, offset);
      scale(-0.3f, dx.data(), n, stream());
      EXPECT_TRUE(same_bits(download(dx), want, label("scale", n, offset)));
    }
  }
}

struct Shape {
  int rows, cols;
};
const std::vector<Shape> kShapes = {{0, 5},     {1, 1},    {3, 7},    {5, 4},     {128, 10},
                                    {64, 1024}, {1000, 3}, {257, 33}, {4096, 33}, {1024, 1000}};

TEST_F(Kernels, AddBiasRows) {
  for (const Shape& s : kShapes) {
    const std::size_t n = static_cast<std::size_t>(s.rows) * s.cols;
    const std::vector<float> y = normal_floats(n, 7), bias = normal_floats(static_cast<std::size_t>(s.cols), 8);
    std::vector<float> want = y;
    ref::add_bias_rows(want.data(), bias.data(), s.rows, s.cols);
    const std::string what = "add_bias_rows " + std::to_string(s.rows) + " x " + std::to_string(s.cols);
    for (std::size_t bias_offset : {0, 1}) {  // an unaligned bias takes the scalar path
      const Array dy = upload(y), db = upload(bias, bias_offset);
      add_bias_rows(dy.data(), db.data(), s.rows, s.cols, stream());
      EXPECT_TRUE(same_bits(download(dy), want, what + (bias_offset ? " (unaligned bias)" : "")));
      EXPECT_TRUE(same_bits(download(db), bias, what + ": bias unchanged"));
    }
  }
}

TEST_F(Kernels, BiasGradRows) {
  for (const Shape& s : kShapes) {
    const std::size_t n = static_cast<std::size_t>(s.rows) * s.cols;
    const std::vector<float> dy = normal_floats(n, 9);
    std::vector<float> want(static_cast<std::size_t>(s.cols));
    ref::bias_grad_rows(dy.data(), want.data(), s.rows, s.cols);
    const std::string what = "bias_grad_rows " + std::to_string(s.rows) + " x " + std::to_string(s.cols);
    const Array d = upload(dy), grad = poisoned(static_cast<std::size_t>(s.cols), 1);
    bias_grad_rows(d.data(), grad.data(), s.rows, s.cols, stream());
    // The same additions in the same (row) order as the CPU: equal bit for bit.
    EXPECT_TRUE(same_bits(download(grad), want, what));
  }
}

// ---- softmax cross-entropy

struct XentData {
  int rows = 0, classes = 0;
  std::vector<float> logits;
  std::vector<std::int32_t> labels;
};

XentData xent_data(int rows, int classes, float sigma, std::uint32_t seed) {
  XentData data{rows, classes, normal_floats(static_cast<std::size_t>(rows) * classes, seed, sigma), {}};
  std::mt19937 rng(seed + 1);
  std::uniform_int_distribution<int> pick(0, classes - 1);
  data.labels.resize(static_cast<std::size_t>(rows));
  for (auto& l : data.labels) l = pick(rng);
  // A third of the rows predict right, so the correct count is not trivially 0.
  for (int r = 0; r < rows; r += 3) data.logits[static_cast<std::size_t>(r) * classes + data.labels[r]] += 4.0f * sigma;
  return data;
}

TEST_F(Kernels, SoftmaxCrossEntropy) {
  struct Case {
    int rows, classes;
    float sigma;
  };
  const Case cases[] = {{1, 1, 1.0f},     {3, 10, 1.0f},     {128, 10, 3.0f}, {1000, 37, 2.0f},
                        {4097, 10, 1.0f}, {300, 1000, 1.0f}, {64, 10, 1e4f}};
  // Without and with label smoothing (target (1 - s) onehot + s / classes).
  for (const float smoothing : {0.0f, 0.1f, 0.45f})
    for (const Case& c : cases) {
      const XentData data = xent_data(c.rows, c.classes, c.sigma, 11);
      const std::size_t n = data.logits.size();
      const float grad_scale = 1.0f / static_cast<float>(c.rows);
      std::vector<float> want_d(n);
      const ref::XentSums want = ref::softmax_cross_entropy(data.logits.data(), data.labels.data(), c.rows, c.classes,
                                                            want_d.data(), grad_scale, smoothing);
      const std::string what = "softmax_cross_entropy " + std::to_string(c.rows) + " x " + std::to_string(c.classes) +
                               " smoothing " + std::to_string(smoothing);

      const Array logits = upload(data.logits), d = poisoned(n);
      const DeviceBuffer labels = upload_raw(data.labels);
      const DeviceBuffer scratch = upload_raw(std::vector<double>(static_cast<std::size_t>(c.rows), std::nan("")));
      auto run = [&](const std::vector<double>& start, float* dlogits) {
        const DeviceBuffer sums = upload_raw(start);
        softmax_cross_entropy(logits.data(), labels.ints(), c.rows, c.classes, dlogits, grad_scale, smoothing,
                              doubles(scratch), doubles(sums), stream());
        return download_raw<double>(sums, 3);
      };

      // Into sums that already hold something: the kernel adds to them.
      const std::vector<double> got = run({1.5, 2.0, 0.0}, d.data());
      EXPECT_NEAR(got[0], 1.5 + want.loss, 1e-9 * std::max(1.0, std::fabs(want.loss))) << what;
      EXPECT_EQ(got[1], 2.0 + static_cast<double>(want.correct)) << what;
      EXPECT_EQ(got[2], 0.0) << what << ": no bad labels";
      // dlogits: relative, plus a floor for the label's p - 1 when p ~ 1 (cancellation).
      EXPECT_TRUE(compare(
          download(d), want_d,
          [grad_scale](float a, float b) {
            return std::fabs(double(a) - double(b)) <= 1e-6 * std::fabs(double(b)) + 1e-9 * grad_scale;
          },
          what + " dlogits"));

      // From zero, with and without dlogits: the same loss bit for bit (a fixed summation order).
      const std::vector<double> first = run({0.0, 0.0, 0.0}, nullptr), second = run({0.0, 0.0, 0.0}, d.data());
      EXPECT_NEAR(first[0], want.loss, 1e-9 * std::max(1.0, std::fabs(want.loss))) << what;
      EXPECT_EQ(show(first[0]), show(second[0])) << what << ": the loss differs between two runs";
      EXPECT_EQ(first[1], static_cast<double>(want.correct)) << what;
    }
}

TEST_F(Kernels, SoftmaxCrossEntropyBadLabels) {
  XentData data = xent_data(100, 10, 1.0f, 12);
  const std::vector<int> bad_rows = {3, 50, 99};
  data.labels[3] = 10;  // == classes
  data.labels[50] = -1;
  data.labels[99] = 1 << 30;  // far out: must not be used as an index
  const Array logits = upload(data.logits), d = poisoned(data.logits.size());
  const DeviceBuffer labels = upload_raw(data.labels);
  const DeviceBuffer scratch = upload_raw(std::vector<double>(100, 0.0));
  const DeviceBuffer sums = upload_raw(std::vector<double>(3, 0.0));
  softmax_cross_entropy(logits.data(), labels.ints(), 100, 10, d.data(), 0.01f, 0.0f, doubles(scratch), doubles(sums),
                        stream());
  const std::vector<double> got = download_raw<double>(sums, 3);
  EXPECT_EQ(got[2], 3.0);
  EXPECT_TRUE(std::isnan(got[0])) << "the loss of a batch with bad labels is NaN";
  // The good rows: correct count and dlogits as the reference gives them row by row.
  const std::vector<float> got_d = download(d);
  std::int64_t correct = 0;
  for (int r = 0; r < 100; ++r) {
    const float* row_d = got_d.data() + static_cast<std::size_t>(r) * 10;
    if (std::find(bad_rows.begin(), bad_rows.end(), r) != bad_rows.end()) {
      for (int j = 0; j < 10; ++j) EXPECT_TRUE(std::isnan(row_d[j])) << "row " << r << " of a bad label";
      continue;
    }
    std::vector<float> want_d(10);
    correct += ref::softmax_cross_entropy(data.logits.data() + static_cast<std::size_t>(r) * 10, &data.labels[r], 1, 10,
                                          want_d.data(), 0.01f)
                   .correct;
    for (int j = 0; j < 10; ++j)
      EXPECT_NEAR(row_d[j], want_d[j], 1e-6 * std::fabs(want_d[j]) + 1e-11) << "row " << r << " class " << j;
  }
  EXPECT_EQ(got[1], static_cast<double>(correct));
}

// ---- activations: GELU, tanh, sigmoid and their gradients against the references. The device's
// erff / expf / tanhf may differ from glibc's by an ulp or two, so within 1e-6 (relative, or
// absolute below 1).

struct ActivationCase {
  const char* name;
  void (*forward)(const float*, float*, std::size_t, Stream);
  void (*ref_forward)(const float*, float*, std::size_t);
  void (*backward)(const float*, const float*, float*, std::size_t, Stream);
  void (*ref_backward)(const float*, const float*, float*, std::size_t);
  bool backward_reads_output;  // tanh, sigmoid: from y; GELU: from x
};
const ActivationCase kActivations[] = {
    {"gelu", gelu_forward, ref::gelu_forward, gelu_backward, ref::gelu_backward, false},
    {"tanh", tanh_forward, ref::tanh_forward, tanh_backward, ref::tanh_backward, true},
    {"sigmoid", sigmoid_forward, ref::sigmoid_forward, sigmoid_backward, ref::sigmoid_backward, true},
};

TEST_F(Kernels, ActivationForward) {
  for (const ActivationCase& a : kActivations) {
    for (std::size_t n : kSizes) {
      const std::vector<float> x = normal_floats(n, 70, 3.0f);  // into the tails
      std::vector<float> want(n);
      a.ref_forward(x.data(), want.data(), n);
      for (std::size_t offset : {0, 1}) {
        for (std::size_t y_offset : {std::size_t{0}, std::size_t{1}}) {
          const Array dx = upload(x, offset), y = poisoned(n, y_offset);
          a.forward(dx.data(), y.data(), n, stream());
          EXPECT_TRUE(
              near(download(y), want, 1e-6, label(a.name, n, offset) + " y offset " + std::to_string(y_offset)));
          EXPECT_TRUE(same_bits(download(dx), x, label(a.name, n, offset) + ": x unchanged"));
        }
        const Array xy = upload(x, offset);  // in place
        a.forward(xy.data(), xy.data(), n, stream());
        EXPECT_TRUE(near(download(xy), want, 1e-6, label(a.name, n, offset) + " in place"));
      }
    }
  }
}

TEST_F(Kernels, ActivationBackward) {
  for (const ActivationCase& a : kActivations) {
    for (std::size_t n : kSizes) {
      // The gradient's input: x for GELU, the forward's output (the reference's) for tanh/sigmoid.
      std::vector<float> in = normal_floats(n, 71, 3.0f);
      if (a.backward_reads_output) a.ref_forward(in.data(), in.data(), n);
      const std::vector<float> dy = normal_floats(n, 72);
      std::vector<float> want(n);
      a.ref_backward(in.data(), dy.data(), want.data(), n);
      const std::string what = std::string(a.name) + "_backward";
      for (std::size_t offset : {0, 1}) {
        const Array dev_in = upload(in, offset), dev_dy = upload(dy, offset), dx = poisoned(n, offset);
        a.backward(dev_in.data(), dev_dy.data(), dx.data(), n, stream());
        EXPECT_TRUE(near(download(dx), want, 1e-6, label(what.c_str(), n, offset)));
        a.backward(dev_in.data(), dev_dy.data(), dev_dy.data(), n, stream());  // dx == dy
        EXPECT_TRUE(near(download(dev_dy), want, 1e-6, label(what.c_str(), n, offset) + " in place"));
      }
    }
  }
}

// ---- dropout: the mask is a pure function of (key, global sample, element), so the GPU's
// equals the reference's bit for bit, also when the rows are drawn in two parts.

template <typename T>
std::vector<T> concat(std::vector<T> a, const std::vector<T>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST_F(Kernels, Dropout) {
  struct Case {
    int rows;
    std::size_t per_sample;
    float p;
    std::int64_t first_sample;
  };
  const Case cases[] = {{1, 1, 0.5f, 0},     {3, 7, 0.1f, 5},      {37, 1000, 0.5f, 1000},
                        {257, 33, 0.9f, 17}, {64, 4097, 0.25f, 3}, {5, 100, 0.0f, 0}};
  const std::uint64_t key = dropout_key(1234, 56, 7);
  for (const Case& c : cases) {
    const std::size_t n = static_cast<std::size_t>(c.rows) * c.per_sample;
    const std::string what = "dropout " + std::to_string(c.rows) + " x " + std::to_string(c.per_sample) + " p " +
                             std::to_string(c.p) + " from sample " + std::to_string(c.first_sample);
    const std::vector<float> x = normal_floats(n, 80), dy = normal_floats(n, 81);
    std::vector<float> want_y(n), want_dx(n);
    std::vector<std::uint8_t> want_mask(n, 0xab);
    ref::dropout_forward(key, c.first_sample, c.rows, c.per_sample, c.p, x.data(), want_y.data(), want_mask.data());
    ref::dropout_backward(c.rows, c.per_sample, c.p, dy.data(), want_mask.data(), want_dx.data());

    const Array dx_in = upload(x), y = poisoned(n);
    const DeviceBuffer mask = upload_raw(std::vector<std::uint8_t>(n, 0xab));
    auto* mask_ptr = reinterpret_cast<std::uint8_t*>(mask.floats());
    dropout_forward(key, c.first_sample, c.rows, c.per_sample, c.p, dx_in.data(), y.data(), mask_ptr, stream());
    const std::vector<std::uint8_t> got_mask = download_raw<std::uint8_t>(mask, n);
    EXPECT_EQ(got_mask, want_mask) << what << ": mask";
    EXPECT_TRUE(near(download(y), want_y, 1e-6, what + " y"));
    if (c.p == 0.0f) {
      EXPECT_EQ(got_mask, std::vector<std::uint8_t>(n, 1)) << what << ": p = 0 keeps everything";
    }

    // The same rows drawn as two parts (another tower's split): the same mask.
    if (c.rows > 1) {
      const int first_rows = c.rows / 2;
      const std::size_t split = static_cast<std::size_t>(first_rows) * c.per_sample;
      const Array y2 = poisoned(n);
      const DeviceBuffer mask2 = upload_raw(std::vector<std::uint8_t>(n, 0xab));
      auto* mask2_ptr = reinterpret_cast<std::uint8_t*>(mask2.floats());
      dropout_forward(key, c.first_sample, first_rows, c.per_sample, c.p, dx_in.data(), y2.data(), mask2_ptr, stream());
      dropout_forward(key, c.first_sample + first_rows, c.rows - first_rows, c.per_sample, c.p, dx_in.data() + split,
                      y2.data() + split, mask2_ptr + split, stream());
      EXPECT_EQ(download_raw<std::uint8_t>(mask2, n), want_mask) << what << ": mask drawn in two parts";
    }

    // In place.
    const Array xy = upload(x);
    dropout_forward(key, c.first_sample, c.rows, c.per_sample, c.p, xy.data(), xy.data(), mask_ptr, stream());
    EXPECT_TRUE(near(download(xy), want_y, 1e-6, what + " in place"));

    // Backward, from the reference's mask, and in place.
    const Array ddy = upload(dy), dx = poisoned(n);
    const DeviceBuffer ref_mask = upload_raw(want_mask);
    const auto* ref_mask_ptr = reinterpret_cast<const std::uint8_t*>(ref_mask.floats());
    dropout_backward(c.rows, c.per_sample, c.p, ddy.data(), ref_mask_ptr, dx.data(), stream());
    EXPECT_TRUE(near(download(dx), want_dx, 1e-6, what + " dx"));
    dropout_backward(c.rows, c.per_sample, c.p, ddy.data(), ref_mask_ptr, ddy.data(), stream());
    EXPECT_TRUE(near(download(ddy), want_dx, 1e-6, what + " dx in place"));
  }
}

// ---- pooling kernels against plain loops written here (reference.hpp has none: the CPU backend
// pools itself): the backward of average pooling as a scatter (each window spreading its dy,
// the opposite direction of the kernel's gather), global average pooling as a sum per plane.

std::vector<float> avgpool_backward_scatter(const PoolGeometry& g, const std::vector<float>& dy) {
  const int oh = g.out_height(), ow = g.out_width();
  std::vector<double> dx(g.planes * static_cast<std::size_t>(g.height) * g.width, 0.0);
  for (std::size_t p = 0; p < g.planes; ++p)
    for (int i = 0; i < oh; ++i)
      for (int j = 0; j < ow; ++j) {
        const double share = dy[(p * oh + i) * ow + j] / double(g.window * g.window);
        for (int a = 0; a < g.window; ++a)
          for (int b = 0; b < g.window; ++b) {
            const int h = i * g.stride - g.pad + a, w = j * g.stride - g.pad + b;
            if (h >= 0 && h < g.height && w >= 0 && w < g.width) dx[(p * g.height + h) * g.width + w] += share;
          }
      }
  return std::vector<float>(dx.begin(), dx.end());
}

TEST_F(Kernels, AvgPoolBackward) {
  struct Case {
    std::size_t planes;
    int height, width, window, stride, pad;
  };
  // Overlapping windows, padding, strides that leave trailing rows uncovered, 1x1.
  const Case cases[] = {{6, 8, 8, 2, 2, 0},  {5, 9, 11, 3, 2, 1}, {3, 7, 7, 3, 1, 1},
                        {4, 10, 9, 4, 3, 2}, {2, 1, 1, 1, 1, 0},  {64, 32, 32, 3, 2, 1}};
  for (const Case& c : cases) {
    PoolGeometry g;
    g.planes = c.planes;
    g.height = c.height;
    g.width = c.width;
    g.window = c.window;
    g.stride = c.stride;
    g.pad = c.pad;
    const std::size_t ny = c.planes * static_cast<std::size_t>(g.out_height()) * g.out_width();
    const std::size_t nx = c.planes * static_cast<std::size_t>(c.height) * c.width;
    const std::vector<float> dy = normal_floats(ny, 90);
    const std::vector<float> want = avgpool_backward_scatter(g, dy);
    const Array ddy = upload(dy), dx = poisoned(nx);
    avgpool2d_backward(g, ddy.data(), dx.data(), stream());
    EXPECT_TRUE(near(download(dx), want, 1e-6,
                     "avgpool2d_backward " + std::to_string(c.height) + "x" + std::to_string(c.width) + " window " +
                         std::to_string(c.window) + " stride " + std::to_string(c.stride) + " pad " +
                         std::to_string(c.pad)));
  }
}

TEST_F(Kernels, GlobalAvgPool) {
  struct Case {
    std::size_t planes, plane_size;
  };
  const Case cases[] = {{1, 1}, {10, 63}, {7, 32}, {3, 33}, {256, 49}, {4, 3136}, {100000, 4}};
  for (const Case& c : cases) {
    const std::size_t n = c.planes * c.plane_size;
    const std::vector<float> x = normal_floats(n, 91), dy = normal_floats(c.planes, 92);
    std::vector<float> want_y(c.planes), want_dx(n);
    for (std::size_t p = 0; p < c.planes; ++p) {
      double sum = 0.0;
      for (std::size_t i = 0; i < c.plane_size; ++i) sum += x[p * c.plane_size + i];
      want_y[p] = static_cast<float>(sum / static_cast<double>(c.plane_size));
      for (std::size_t i = 0; i < c.plane_size; ++i)
        want_dx[p * c.plane_size + i] = static_cast<float>(dy[p] / static_cast<double>(c.plane_size));
    }
    const std::string what = "global_avgpool " + std::to_string(c.planes) + " x " + std::to_string(c.plane_size);
    const Array dx_in = upload(x), y = poisoned(c.planes, 1);
    global_avgpool_forward(dx_in.data(), y.data(), c.planes, c.plane_size, stream());
    const std::vector<float> got_y = download(y);
    EXPECT_TRUE(near(got_y, want_y, 1e-6, what));
    const Array y_again = poisoned(c.planes);
    global_avgpool_forward(dx_in.data(), y_again.data(), c.planes, c.plane_size, stream());
    EXPECT_TRUE(same_bits(download(y_again), got_y, what + ": two runs"));
    const Array ddy = upload(dy), dx = poisoned(n, 1);
    global_avgpool_backward(ddy.data(), dx.data(), c.planes, c.plane_size, stream());
    EXPECT_TRUE(near(download(dx), want_dx, 1e-6, what + " backward"));
  }
}

// ---- optimizers: each step from the same inputs on both sides (the GPU's state after the
// previous step), so that a difference is that of one update, not compounded.

TEST_F(Kernels, SgdUpdate) {
  struct Case {
    const char* name;
    float momentum, weight_decay;
    bool nesterov;
  };
  const Case cases[] = {{"sgd", 0.0f, 0.0f, false},
                        {"sgd wd", 0.0f, 1e-2f, false},
                        {"momentum", 0.9f, 1e-4f, false},
                        {"nesterov", 0.9f, 1e-2f, true}};
  for (const Case& k : cases) {
    for (std::size_t n : kSizes) {
      for (std::size_t offset : {0, 1}) {
        std::vector<float> p = normal_floats(n, 20), buf = normal_floats(n, 21, 0.5f);
        const Array dp = upload(p, offset), dbuf = upload(buf, offset);
        for (int step = 0; step < 3; ++step) {
          const std::vector<float> g = normal_floats(n, 30 + static_cast<std::uint32_t>(step));
          SgdCoefficients c;
          c.lr = 0.05f / static_cast<float>(step + 1);
          c.momentum = k.momentum;
          c.weight_decay = k.weight_decay;
          c.nesterov = k.nesterov;
          const float grad_scale = 0.5f;
          const Array dg = upload(g, offset);
          sgd_update(c, dp.data(), dg.data(), grad_scale, k.momentum > 0.0f ? dbuf.data() : nullptr, n, stream());
          ref::sgd_update(c, p.data(), g.data(), grad_scale, k.momentum > 0.0f ? buf.data() : nullptr, n);
          const std::string what = std::string(k.name) + " step " + std::to_string(step) + label("", n, offset);
          const std::vector<float> got_p = download(dp), got_buf = download(dbuf);
          EXPECT_TRUE(near(got_p, p, 1e-6, what + " params"));
          EXPECT_TRUE(near(got_buf, buf, 1e-6, what + " momentum"));
          p = got_p;
          buf = got_buf;
        }
      }
    }
  }
}

TEST_F(Kernels, AdamUpdate) {
  for (bool decoupled : {false, true}) {
    for (std::size_t n : kSizes) {
      for (std::size_t offset : {0, 1}) {
        std::vector<float> p = normal_floats(n, 40), m = normal_floats(n, 41, 0.3f), v = normal_floats(n, 42);
        for (auto& x : v) x = x * x + 0.01f;  // a second moment away from 0
        const Array dp = upload(p, offset), dm = upload(m, offset), dv = upload(v, offset);
        for (int step = 0; step < 3; ++step) {
          const std::vector<float> g = normal_floats(n, 50 + static_cast<std::uint32_t>(step));
          const double lr = 1e-3, t = step + 1, wd = 0.01;
          AdamCoefficients c;
          c.one_minus_beta1 = static_cast<float>(1.0 - 0.9);
          c.one_minus_beta2 = static_cast<float>(1.0 - 0.999);
          c.l2 = decoupled ? 0.0f : static_cast<float>(wd);
          c.shrink = decoupled ? static_cast<float>(1.0 - lr * wd) : 1.0f;
          c.step_size = static_cast<float>(lr / (1.0 - std::pow(0.9, t)));
          c.inv_sqrt_bias2 = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(0.999, t)));
          const float grad_scale = 0.5f;
          const Array dg = upload(g, offset);
          adam_update(c, dp.data(), dg.data(), grad_scale, dm.data(), dv.data(), n, stream());
          ref::adam_update(c, p.data(), g.data(), grad_scale, m.data(), v.data(), n);
          const std::string what =
              std::string(decoupled ? "adamw" : "adam") + " step " + std::to_string(step) + label("", n, offset);
          const std::vector<float> got_p = download(dp), got_m = download(dm), got_v = download(dv);
          EXPECT_TRUE(near(got_p, p, 1e-6, what + " params"));
          EXPECT_TRUE(near(got_m, m, 1e-6, what + " exp_avg"));
          EXPECT_TRUE(compare(
              got_v, v, [](float a, float b) { return std::fabs(double(a) - double(b)) <= 1e-6 * double(b); },
              what + " exp_avg_sq (relative)"));
          p = got_p;
          m = got_m;
          v = got_v;
        }
      }
    }
  }
}

// ---- bf16

// Special values (signed zeros, ties both ways, overflow, infinities, NaNs, denormals) followed
// by random bit patterns.
std::vector<float> bf16_inputs(std::size_t random_count) {
  const std::uint32_t special[] = {
      0x00000000u, 0x80000000u, 0x3f800000u, 0xbf800000u, 0x3f808000u, 0x3f818000u, 0xbf808000u, 0xbf818000u,
      0x3f807fffu, 0x3f808001u, 0x3fffffffu, 0x7f7f7fffu, 0x7f7f8000u, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u,
      0xff800000u, 0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fa00000u, 0xff812345u, 0x7fffffffu, 0x00000001u,
      0x80000001u, 0x00008000u, 0x00018000u, 0x00008001u, 0x00010000u, 0x007fffffu, 0x00800000u, 0x807fffffu};
  std::vector<float> x;
  for (std::uint32_t u : special) x.push_back(from_bits(u));
  std::mt19937 rng(60);
  for (std::size_t i = 0; i < random_count; ++i) x.push_back(from_bits(static_cast<std::uint32_t>(rng())));
  return x;
}

TEST_F(Kernels, FloatToBf16) {
  for (std::size_t n : kSizes) {
    std::vector<float> x = bf16_inputs(n);
    x.resize(n);  // n == 0 .. 3: a prefix of the special values
    std::vector<std::uint16_t> want(n);
    ref::float_to_bf16(x.data(), want.data(), n);
    for (std::size_t offset : {0, 1}) {
      const Array dx = upload(x, offset);
      // bf16 output one element (2 bytes) off its 8-byte alignment when offset == 1.
      const DeviceBuffer y = upload_raw(std::vector<std::uint16_t>(n + 1, 0xdeadu));
      auto* y_ptr = reinterpret_cast<std::uint16_t*>(y.floats()) + offset;
      float_to_bf16(dx.data(), y_ptr, n, stream());
      std::vector<std::uint16_t> got = download_raw<std::uint16_t>(y, n + 1);
      EXPECT_EQ(got[offset ? 0 : n], 0xdeadu)
          << "the element " << (offset ? "before" : "after") << " the output was overwritten";
      got.erase(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(offset));
      got.resize(n);
      EXPECT_TRUE(same_bits(got, want, label("float_to_bf16", n, offset)));
    }
  }
}

TEST_F(Kernels, Bf16ToFloat) {
  std::vector<std::uint16_t> all(0x10000 + 3);  // every pattern, and a tail
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i * 40503u);
  for (std::uint32_t b = 0; b < 0x10000u; ++b) all[b] = static_cast<std::uint16_t>(b);
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{1000}, all.size()}) {
    const std::vector<std::uint16_t> x(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n));
    std::vector<float> want(n);
    ref::bf16_to_float(x.data(), want.data(), n);
    for (std::size_t offset : {0, 1}) {
      std::vector<std::uint16_t> shifted(offset, 0);
      shifted.insert(shifted.end(), x.begin(), x.end());
      const DeviceBuffer dx = upload_raw(shifted);
      const Array y = poisoned(n, offset);
      bf16_to_float(reinterpret_cast<const std::uint16_t*>(dx.floats()) + offset, y.data(), n, stream());
      EXPECT_TRUE(same_bits(download(y), want, label("bf16_to_float", n, offset)));
    }
  }
}

// ---- n == 0 (and rows == 0) does nothing, even with null pointers.

TEST_F(Kernels, EmptyIsNoOp) {
  relu_forward(nullptr, nullptr, 0, stream());
  relu_backward(nullptr, nullptr, nullptr, 0, stream());
  axpby(1.0f, nullptr, 1.0f, nullptr, 0, stream());
  scale(2.0f, nullptr, 0, stream());
  add_bias_rows(nullptr, nullptr, 0, 0, stream());
  bias_grad_rows(nullptr, nullptr, 0, 0, stream());
  SgdCoefficients sgd;
  sgd.momentum = 0.9f;
  sgd_update(sgd, nullptr, nullptr, 1.0f, nullptr, 0, stream());
  adam_update(AdamCoefficients{}, nullptr, nullptr, 1.0f, nullptr, nullptr, 0, stream());
  float_to_bf16(nullptr, nullptr, 0, stream());
  bf16_to_float(nullptr, nullptr, 0, stream());
  for (const ActivationCase& a : kActivations) {
    a.forward(nullptr, nullptr, 0, stream());
    a.backward(nullptr, nullptr, nullptr, 0, stream());
  }
  dropout_forward(1, 0, 0, 10, 0.5f, nullptr, nullptr, nullptr, stream());
  dropout_forward(1, 0, 10, 0, 0.5f, nullptr, nullptr, nullptr, stream());
  dropout_backward(0, 10, 0.5f, nullptr, nullptr, nullptr, stream());
  avgpool2d_backward(PoolGeometry{}, nullptr, nullptr, stream());
  global_avgpool_forward(nullptr, nullptr, 0, 10, stream());
  global_avgpool_forward(nullptr, nullptr, 10, 0, stream());
  global_avgpool_backward(nullptr, nullptr, 0, 10, stream());
  const DeviceBuffer sums = upload_raw(std::vector<double>{1.0, 2.0, 3.0});
  softmax_cross_entropy(nullptr, nullptr, 0, 10, nullptr, 1.0f, 0.1f, nullptr, doubles(sums), stream());
  EXPECT_EQ(download_raw<double>(sums, 3), (std::vector<double>{1.0, 2.0, 3.0}));
  gpu().synchronize();
}

}  // namespace
}  // namespace drt::kernels
