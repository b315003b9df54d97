// drt_bench_layers: forward and forward+backward time of the CNN's and the MLP's layers on the
// CPU backend, for comparing the convolution and GEMM libraries with each other and with PyTorch
// on the same shapes (bench/peers/torch_layers.py prints the CNN rows). Each row with weights
// also says its GFLOP/s and what fraction that is of the CPU's peak, measured here with chains of
// independent FMAs on the widest vector units the CPU has. Single process, no MPI.
// --gpt: instead, the layers of the small GPT (gpt:6-6-384, context 256, a byte vocabulary) on
// --batch sequences, and whole training steps of it in tokens per second.
//
//   build/bin/drt_bench_layers --batch 64 --threads 1
//   build/bin/drt_bench_layers --gpt --batch 8 --threads 2
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "drtrain/backend/backend.hpp"
#include "drtrain/backend/blas_kernels.hpp"
#include "drtrain/nn/layer.hpp"
#include "drtrain/nn/model_graph.hpp"
#include "drtrain/nn/model_spec.hpp"
#include "drtrain/nn/network.hpp"

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// The peak: kChains independent FMA chains (enough to cover the FMA latency on both ports of
// current x86 cores) on `Vec` registers, `iterations` times; returns FLOPs per second (an FMA
// counts 2). The chains' results are summed and returned through `sink` so nothing is elided.
constexpr int kChains = 12;
constexpr long kPeakIterations = 20'000'000;

__attribute__((target("avx512f"))) double fma_rate_avx512(float* sink) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(1.0f + 1e-3f * static_cast<float>(c));
  const __m512 mul = _mm512_set1_ps(0.999999f), add = _mm512_set1_ps(1e-7f);
  const double t0 = now();
  for (long i = 0; i < kPeakIterations; ++i)
    for (auto& a : acc) a = _mm512_fmadd_ps(a, mul, add);
  const double seconds = now() - t0;
  __m512 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  float lanes[16];  // not _mm512_reduce_add_ps: GCC 12 warns about its undefined temporary
  _mm512_storeu_ps(lanes, sum);
  *sink = lanes[0] + lanes[15];
  return 2.0 * 16 * kChains * static_cast<double>(kPeakIterations) / seconds;
}

__attribute__((target("avx2,fma"))) double fma_rate_avx2(float* sink) {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(1.0f + 1e-3f * static_cast<float>(c));
  const __m256 mul = _mm256_set1_ps(0.999999f), add = _mm256_set1_ps(1e-7f);
  const double t0 = now();
  for (long i = 0; i < kPeakIterations; ++i)
    for (auto& a : acc) a = _mm256_fmadd_ps(a, mul, add);
  const double seconds = now() - t0;
  __m256 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm256_add_ps(sum, acc[c]);
  float lanes[8];
  _mm256_storeu_ps(lanes, sum);
  *sink = lanes[0] + lanes[7];
  return 2.0 * 8 * kChains * static_cast<double>(kPeakIterations) / seconds;
}

struct Peak {
  double flops = 0;  // per second, all threads
  const char* units = "none";
};

// The best of AVX-512 and AVX2 (on CPUs that split 512-bit FMAs in two, AVX2 is as fast), each
// the best of 3 runs on `threads` threads at once; 0 when the CPU has neither.
Peak measure_peak(int threads) {
  __builtin_cpu_init();
  Peak best;
  auto run = [threads](double (*rate)(float*)) {
    std::vector<double> rates(static_cast<std::size_t>(threads));
    std::vector<float> sinks(static_cast<std::size_t>(threads));
    std::vector<std::thread> pool;
    pool.reserve(static_cast<std::size_t>(threads));
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] { rates[static_cast<std::size_t>(t)] = rate(&sinks[static_cast<std::size_t>(t)]); });
    for (auto& th : pool) th.join();
    double total = 0;
    for (double r : rates) total += r;
    return total;
  };
  auto best_of_3 = [&run](double (*rate)(float*)) { return std::max({run(rate), run(rate), run(rate)}); };
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = {best_of_3(fma_rate_avx2), "AVX2"};
  if (__builtin_cpu_supports("avx512f")) {
    const double r = best_of_3(fma_rate_avx512);
    if (r > best.flops) best = {r, "AVX-512"};
  }
  return best;
}

struct Row {
  std::string name;
  double flops;  // of forward + backward: forward multiply-adds x 2 x (3 with the input's gradient, else 2)
  double forward_ms, train_ms;
};

Row time_layer(drt::backend::Backend& device, drt::nn::Layer& layer, const drt::nn::TensorShape& in, int reps,
               bool input_grad) {
  const drt::nn::TensorShape out = layer.output_shape({in});
  std::size_t params = 0;
  for (const auto& p : layer.params()) params += p.numel();
  auto x = device.allocate_floats(in.size()), y = device.allocate_floats(out.size());
  auto dy = device.allocate_floats(out.size()), dx = device.allocate_floats(in.size());
  auto w = device.allocate_floats(std::max<std::size_t>(params, 1)),
       g = device.allocate_floats(std::max<std::size_t>(params, 1));
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (std::size_t i = 0; i < in.size(); ++i) x.floats()[i] = dist(rng);
  for (std::size_t i = 0; i < out.size(); ++i) dy.floats()[i] = dist(rng);
  for (std::size_t i = 0; i < params; ++i) w.floats()[i] = 0.05f * dist(rng);
  layer.prepare(device, {in}, 0);
  const drt::nn::Pass pass;
  layer.bind(w.floats(), g.floats());
  auto train = [&] {
    layer.forward(device, pass, {in}, {x.floats()}, y.floats());
    layer.backward(device, pass, {in}, {x.floats()}, y.floats(), dy.floats(), {input_grad ? dx.floats() : nullptr});
  };
  for (int i = 0; i < 3; ++i) train();
  double t0 = now();
  for (int i = 0; i < reps; ++i) layer.forward(device, pass, {in}, {x.floats()}, y.floats());
  const double forward = (now() - t0) / reps;
  t0 = now();
  for (int i = 0; i < reps; ++i) train();
  const double both = (now() - t0) / reps;
  double flops = 0;
  if (!layer.params().empty() &&
      !in.sequence)  // the weights' multiply-adds (bias excluded): forward, weight grad, input grad
    flops = (input_grad ? 3.0 : 2.0) * 2.0 * static_cast<double>(params - static_cast<std::size_t>(out.c)) * out.h *
            out.w * in.n;
  if (in.sequence && layer.describe().rfind("linear", 0) == 0)  // per position
    flops =
        (input_grad ? 3.0 : 2.0) * 2.0 * static_cast<double>(params - static_cast<std::size_t>(out.w)) * out.c * in.n;
  if (layer.describe().rfind("attention", 0) == 0)  // 7 causal GEMMs of T^2/2 x head_dim per head (2 fwd, 5 bwd)
    flops = 7.0 * static_cast<double>(in.c) * in.c * out.w * in.n;
  return {layer.describe() + (input_grad ? "" : " (no input grad)"), flops, forward * 1e3, both * 1e3};
}

std::string str_gemm(drt::backend::CpuGemm gemm) { return " [" + drt::backend::to_string(gemm) + " GEMM]"; }

// Whole training steps of gpt:6-6-384 on `sequences` x 256 random bytes: the step time and
// tokens per second (best of `reps` after a warm-up).
void time_gpt_steps(int sequences, int reps) {
  using namespace drt;
  constexpr int kContext = 256, kVocab = 256;
  const nn::ModelSpec spec(nn::ModelGraph::load("gpt:6-6-384"), nn::TensorShape::seq(1, kContext, 1), kVocab);
  auto device = backend::make_cpu_backend();
  nn::Network net(spec, *device, sequences);
  std::vector<float> params(spec.layout().total()), grads(params.size());
  spec.init_params(1, params.data());
  std::mt19937 rng(2);
  std::vector<float> ids(static_cast<std::size_t>(sequences) * kContext);
  std::vector<std::int32_t> labels(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<float>(rng() % kVocab), labels[i] = static_cast<std::int32_t>(rng() % kVocab);
  net.bind(params.data(), grads.data());
  double best = 1e30, forward = 0, backward = 0;
  for (int i = 0; i < reps + 1; ++i) {
    const double t0 = now();
    net.train(ids.data(), labels.data(), sequences, 1.0f / static_cast<float>(sequences));
    const double t = now() - t0;
    if (i > 0 && t < best) best = t, forward = net.last_forward_s(), backward = net.last_backward_s();
  }
  const double tokens = static_cast<double>(sequences) * kContext;
  std::printf("gpt:6-6-384 step, %d x %d tokens: %.1f ms (forward+loss %.1f, backward %.1f), %.0f tokens/s, %.1f "
              "GFLOP/s (6 x %zu parameters x tokens)\n",
              sequences, kContext, best * 1e3, forward * 1e3, backward * 1e3, tokens / best,
              6.0 * static_cast<double>(spec.layout().total()) * tokens / best / 1e9, spec.layout().total());
}

}  // namespace

int main(int argc, char** argv) {
  drt::backend::ensure_blas_kernels(argv);
  int batch = 64, threads = 1, reps = 20;
  bool gpt = false;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--gpt") {
      gpt = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "usage: drt_bench_layers [--batch N] [--threads N] [--reps N] [--gpt]\n");
      return 2;
    }
    if (flag == "--batch") batch = std::stoi(argv[i + 1]);
    else if (flag == "--threads") threads = std::stoi(argv[i + 1]);
    else if (flag == "--reps") reps = std::stoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: drt_bench_layers [--batch N] [--threads N] [--reps N] [--gpt]\n");
      return 2;
    }
  }
  drt::backend::set_blas_threads(threads);
  const Peak peak = measure_peak(threads);
  std::printf("drt_bench_layers: batch %d, %d BLAS thread(s), OpenBLAS %s kernels; measured peak %.1f GFLOP/s (%s FMA, "
              "%d thread(s))\n",
              batch, threads, drt::backend::blas_core_name().c_str(), peak.flops / 1e9, peak.units, threads);
  std::printf("%-52s %10s %10s %10s %8s\n", "layer", "fwd ms", "fwd+bwd ms", "GFLOP/s", "of peak");
  struct Case {
    std::unique_ptr<drt::backend::Backend> device;  // outlives the layer's buffers
    std::unique_ptr<drt::nn::Layer> layer;
    drt::nn::TensorShape in;
    bool input_grad;
    drt::backend::CpuConv conv;
    drt::backend::CpuGemm gemm;
    std::string tag;
  };
  using drt::backend::CpuConv;
  using drt::backend::CpuGemm;
  std::vector<Case> cases;
  std::vector<CpuConv> convs{CpuConv::kIm2col};
  std::vector<CpuGemm> gemms{CpuGemm::kOpenBlas};
  if (drt::backend::onednn_available()) {
    convs.push_back(CpuConv::kOneDnn);
    gemms.push_back(CpuGemm::kOneDnn);
  }
  if (gpt) {  // one block of gpt:6-6-384 on `batch` sequences of 256 positions
    const auto seq = [batch](int features) { return drt::nn::TensorShape::seq(batch, 256, features); };
    const std::string tag = str_gemm(CpuGemm::kAuto);
    cases.push_back({nullptr, drt::nn::make_layernorm(384), seq(384), true, CpuConv::kAuto, CpuGemm::kAuto, ""});
    cases.push_back({nullptr, drt::nn::make_linear(384, 1152), seq(384), true, CpuConv::kAuto, CpuGemm::kAuto, tag});
    cases.push_back({nullptr, drt::nn::make_attention(6, 0.0f), seq(1152), true, CpuConv::kAuto, CpuGemm::kAuto, tag});
    cases.push_back({nullptr, drt::nn::make_attention(6, 0.1f), seq(1152), true, CpuConv::kAuto, CpuGemm::kAuto, tag});
    cases.push_back({nullptr, drt::nn::make_linear(384, 384), seq(384), true, CpuConv::kAuto, CpuGemm::kAuto, tag});
    cases.push_back({nullptr, drt::nn::make_linear(384, 1536), seq(384), true, CpuConv::kAuto, CpuGemm::kAuto, tag});
    cases.push_back({nullptr, drt::nn::make_activation(drt::backend::Activation::kGeluTanh), seq(1536), true,
                     CpuConv::kAuto, CpuGemm::kAuto, ""});
    cases.push_back({nullptr, drt::nn::make_linear(1536, 384), seq(1536), true, CpuConv::kAuto, CpuGemm::kAuto, tag});
    cases.push_back({nullptr, drt::nn::make_linear(384, 256, false), seq(384), true, CpuConv::kAuto, CpuGemm::kAuto,
                     tag + " (head)"});
    gemms.clear();
    convs.clear();
  }
  for (CpuConv conv : convs) {  // the CNN's convolutions (im2col's GEMMs: OpenBLAS)
    const std::string tag = conv == CpuConv::kOneDnn ? " [oneDNN conv]" : " [im2col+OpenBLAS]";
    cases.push_back(
        {nullptr, drt::nn::make_conv2d(1, 32, 5, 2), {batch, 1, 28, 28}, false, conv, CpuGemm::kOpenBlas, tag});
    cases.push_back(
        {nullptr, drt::nn::make_conv2d(32, 64, 5, 2), {batch, 32, 14, 14}, true, conv, CpuGemm::kOpenBlas, tag});
  }
  if (!gpt)
    cases.push_back(
        {nullptr, drt::nn::make_maxpool2d(2), {batch, 32, 28, 28}, true, CpuConv::kAuto, CpuGemm::kAuto, ""});
  for (CpuGemm gemm : gemms) {  // the linear layers of the CNN and of the MLP (784-512-256-10)
    const std::string tag = str_gemm(gemm);
    cases.push_back({nullptr, drt::nn::make_linear(3136, 512), {batch, 3136, 1, 1}, true, CpuConv::kAuto, gemm, tag});
    cases.push_back({nullptr, drt::nn::make_linear(784, 512), {batch, 784, 1, 1}, false, CpuConv::kAuto, gemm, tag});
    cases.push_back({nullptr, drt::nn::make_linear(512, 256), {batch, 512, 1, 1}, true, CpuConv::kAuto, gemm, tag});
    cases.push_back({nullptr, drt::nn::make_linear(256, 10), {batch, 256, 1, 1}, true, CpuConv::kAuto, gemm, tag});
  }
  std::string json = "{\"bench\":\"layers\",\"batch\":" + std::to_string(batch) +
                     ",\"threads\":" + std::to_string(threads) +
                     ",\"peak_gflops\":" + std::to_string(peak.flops / 1e9) + ",\"rows\":[";
  for (std::size_t k = 0; k < cases.size(); ++k) {
    cases[k].device = drt::backend::make_cpu_backend(cases[k].conv, cases[k].gemm);
    Row r = time_layer(*cases[k].device, *cases[k].layer, cases[k].in, reps, cases[k].input_grad);
    r.name += cases[k].tag;
    const double gflops = r.flops / (r.train_ms * 1e6);
    if (r.flops > 0 && peak.flops > 0)
      std::printf("%-52s %10.3f %10.3f %10.1f %7.0f%%\n", r.name.c_str(), r.forward_ms, r.train_ms, gflops,
                  100 * gflops * 1e9 / peak.flops);
    else std::printf("%-52s %10.3f %10.3f %10s %8s\n", r.name.c_str(), r.forward_ms, r.train_ms, "-", "-");
    json += (k ? "," : "") + std::string("{\"layer\":\"") + r.name + "\",\"fwd_ms\":" + std::to_string(r.forward_ms) +
            ",\"train_ms\":" + std::to_string(r.train_ms) + ",\"gflops\":" + std::to_string(gflops) + "}";
  }
  std::printf("%s]}\n", json.c_str());
  if (gpt) time_gpt_steps(batch, std::max(2, reps / 5));
  return 0;
}
