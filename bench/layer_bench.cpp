// drt_bench_layers: forward and forward+backward time of the CNN's layers on the CPU backend,
// for comparing the convolution implementation with PyTorch on the same shapes
// (bench/peers/torch_layers.py prints the same rows). Single process, no MPI.
//
//   build/bin/drt_bench_layers --batch 64 --threads 1
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "drtrain/backend/backend.hpp"
#include "drtrain/backend/blas_kernels.hpp"
#include "drtrain/nn/layer.hpp"

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Row {
  std::string name;
  double flops;  // forward multiply-adds x 2
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
  if (!layer.params().empty())
    flops = 2.0 * static_cast<double>(params - static_cast<std::size_t>(out.c)) * out.h * out.w * in.n;
  return {layer.describe() + (input_grad ? "" : " (no input grad)"), flops, forward * 1e3, both * 1e3};
}

}  // namespace

int main(int argc, char** argv) {
  drt::backend::ensure_blas_kernels(argv);
  int batch = 64, threads = 1, reps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--batch") batch = std::stoi(argv[i + 1]);
    else if (flag == "--threads") threads = std::stoi(argv[i + 1]);
    else if (flag == "--reps") reps = std::stoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: drt_bench_layers [--batch N] [--threads N] [--reps N]\n");
      return 2;
    }
  }
  drt::backend::set_blas_threads(threads);
  std::printf("drt_bench_layers: batch %d, %d BLAS thread(s), OpenBLAS %s kernels\n", batch, threads,
              drt::backend::blas_core_name().c_str());
  std::printf("%-44s %10s %10s %14s\n", "layer", "fwd ms", "fwd+bwd ms", "fwd+bwd GFLOPS");
  struct Case {
    std::unique_ptr<drt::backend::Backend> device;  // outlives the layer's buffers
    std::unique_ptr<drt::nn::Layer> layer;
    drt::nn::TensorShape in;
    bool input_grad;
    drt::backend::CpuConv conv;
  };
  using drt::backend::CpuConv;
  std::vector<Case> cases;
  std::vector<CpuConv> convs{CpuConv::kIm2col};
  if (drt::backend::onednn_available()) convs.push_back(CpuConv::kOneDnn);
  for (CpuConv conv : convs) {
    cases.push_back({nullptr, drt::nn::make_conv2d(1, 32, 5, 2), {batch, 1, 28, 28}, false, conv});
    cases.push_back({nullptr, drt::nn::make_conv2d(32, 64, 5, 2), {batch, 32, 14, 14}, true, conv});
  }
  cases.push_back({nullptr, drt::nn::make_maxpool2d(2), {batch, 32, 28, 28}, true, CpuConv::kAuto});
  cases.push_back({nullptr, drt::nn::make_linear(3136, 512), {batch, 3136, 1, 1}, true, CpuConv::kAuto});
  std::string json = "{\"bench\":\"layers\",\"batch\":" + std::to_string(batch) +
                     ",\"threads\":" + std::to_string(threads) + ",\"rows\":[";
  for (std::size_t k = 0; k < cases.size(); ++k) {
    cases[k].device = drt::backend::make_cpu_backend(cases[k].conv);
    Row r = time_layer(*cases[k].device, *cases[k].layer, cases[k].in, reps, cases[k].input_grad);
    if (cases[k].conv != CpuConv::kAuto) r.name += cases[k].conv == CpuConv::kOneDnn ? " [oneDNN]" : " [im2col]";
    std::printf("%-44s %10.2f %10.2f %14.1f\n", r.name.c_str(), r.forward_ms, r.train_ms,
                3 * r.flops / (r.train_ms * 1e6));
    json += (k ? "," : "") + std::string("{\"layer\":\"") + r.name + "\",\"fwd_ms\":" + std::to_string(r.forward_ms) +
            ",\"train_ms\":" + std::to_string(r.train_ms) + "}";
  }
  std::printf("%s]}\n", json.c_str());
  return 0;
}
