// drt_bench_kernels: memory bandwidth of drtrain's bandwidth-bound CUDA kernels (kernels/*.cu),
// as a fraction of what a plain device-to-device copy reaches on the same GPU.
//
// For N floats (--floats, default 64 Mi), each kernel runs a few times to warm up, then --reps
// times (default 20), each run timed on the device (Backend::mark before and after it on the
// backend's stream, seconds_between after a synchronize); the best run counts. Bandwidth =
// the bytes the kernel must move (reads + writes, e.g. relu_forward 4N + 4N, adam 28N: reads
// p, g, m, v and writes p, m, v) / time, and its ratio to the copy's (backend copy() of N
// floats: 8N bytes). A kernel near 1.0 is as fast as memory allows. bias_grad_rows is the
// exception by design: one thread per column (deterministic), so with few columns it cannot
// keep enough loads in flight; it is shown for 1024 columns.
//
//   build/bin/drt_bench_kernels [--floats N] [--reps R] [--json FILE]
//
// Prints a table; --json writes one object {"device", "floats", "copy_gbps", "kernels": [{"name",
// "gbps", "ratio_to_copy", "ms"}, ...]}. Exits 77 with "no usable GPU: <why>" without a GPU.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "drtrain/backend/backend.hpp"
#include "drtrain/backend/cuda_backend.hpp"
#include "drtrain/core/json_line.hpp"
#include "drtrain/kernels/launchers.hpp"

namespace {

namespace kn = drt::kernels;
using drt::backend::Backend;

struct Result {
  std::string name;
  double bytes_per_float;
  double seconds;
};

// Best device time of `run` over `reps` timed runs after 3 warm-up runs.
double best_seconds(Backend& gpu, int reps, const std::function<void()>& run) {
  for (int i = 0; i < 3; ++i) run();
  gpu.synchronize();
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < reps; ++i) {
    gpu.mark(0);
    run();
    gpu.mark(1);
    gpu.synchronize();
    best = std::min(best, gpu.seconds_between(0, 1));
  }
  return best;
}

void usage() { std::fprintf(stderr, "usage: drt_bench_kernels [--floats N] [--reps R] [--json FILE]\n"); }

}  // namespace

int main(int argc, char** argv) {
  std::size_t n = std::size_t{64} << 20;
  int reps = 20;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      usage();
      return 2;
    }
    const std::string value = argv[++i];
    try {
      if (flag == "--floats") n = static_cast<std::size_t>(std::stoull(value));
      else if (flag == "--reps") reps = std::stoi(value);
      else if (flag == "--json") json_path = value;
      else {
        usage();
        return 2;
      }
    } catch (const std::exception&) {
      std::fprintf(stderr, "drt_bench_kernels: bad value '%s' for %s\n", value.c_str(), flag.c_str());
      return 2;
    }
  }
  constexpr int kCols = 1024;  // bias kernels: (n / kCols) x kCols
  if (n < static_cast<std::size_t>(kCols) || reps < 1) {
    std::fprintf(stderr, "drt_bench_kernels: --floats must be at least %d and --reps at least 1\n", kCols);
    return 2;
  }

  const drt::backend::CudaDevices gpus = drt::backend::query_cuda_devices();
  if (gpus.count == 0) {
    std::printf("no usable GPU: %s (CUDA_VISIBLE_DEVICES=%s)\n", gpus.why_none.c_str(), gpus.visible_env.c_str());
    return 77;
  }

  try {
    const std::string device = drt::backend::describe_cuda_device(0);
    auto gpu = drt::backend::make_cuda_backend({});
    void* stream = drt::backend::cuda_stream(*gpu);

    // Four float arrays and one bf16 array; values in [0.5, 1.5) keep every kernel finite over
    // many repetitions (Adam's second moment stays positive).
    std::vector<float> host(n);
    for (std::size_t i = 0; i < n; ++i) host[i] = 0.5f + static_cast<float>(i % 1000) / 1000.0f;
    auto a = gpu->allocate_floats(n), b = gpu->allocate_floats(n), c = gpu->allocate_floats(n),
         d = gpu->allocate_floats(n);
    for (auto* buffer : {&a, &b, &c, &d}) gpu->copy_from_host(buffer->floats(), host.data(), n * sizeof(float));
    auto half = gpu->allocate(n * sizeof(std::uint16_t));
    auto* bf16 = reinterpret_cast<std::uint16_t*>(half.floats());
    gpu->synchronize();
    const int rows = static_cast<int>(n / kCols);

    kn::SgdCoefficients sgd;
    sgd.lr = 1e-3f;
    kn::SgdCoefficients momentum = sgd;
    momentum.momentum = 0.9f;
    kn::AdamCoefficients adam;
    adam.step_size = 1e-3f;

    // name, bytes moved per float, launch
    struct Case {
      const char* name;
      double bytes_per_float;
      std::function<void()> run;
    };
    const std::vector<Case> cases = {
        {"relu_forward", 8, [&] { kn::relu_forward(a.floats(), b.floats(), n, stream); }},
        {"relu_backward", 12, [&] { kn::relu_backward(a.floats(), b.floats(), c.floats(), n, stream); }},
        {"axpby", 12, [&] { kn::axpby(0.5f, a.floats(), 0.5f, b.floats(), n, stream); }},
        {"scale", 8, [&] { kn::scale(1.0f, a.floats(), n, stream); }},
        {"add_bias_rows x1024", 8, [&] { kn::add_bias_rows(a.floats(), b.floats(), rows, kCols, stream); }},
        {"bias_grad_rows x1024", 4, [&] { kn::bias_grad_rows(a.floats(), b.floats(), rows, kCols, stream); }},
        {"sgd_update", 12, [&] { kn::sgd_update(sgd, a.floats(), b.floats(), 1.0f, nullptr, n, stream); }},
        {"sgd_update momentum", 20,
         [&] { kn::sgd_update(momentum, a.floats(), b.floats(), 1.0f, c.floats(), n, stream); }},
        {"adam_update", 28,
         [&] { kn::adam_update(adam, a.floats(), b.floats(), 1.0f, c.floats(), d.floats(), n, stream); }},
        {"float_to_bf16", 6, [&] { kn::float_to_bf16(a.floats(), bf16, n, stream); }},
        {"bf16_to_float", 6, [&] { kn::bf16_to_float(bf16, b.floats(), n, stream); }},
    };

    const double copy_seconds = best_seconds(*gpu, reps, [&] { gpu->copy(b.floats(), a.floats(), n * sizeof(float)); });
    const double floats = static_cast<double>(n);
    const double copy_gbps = 8.0 * floats / copy_seconds / 1e9;
    std::printf("drt_bench_kernels: %s, %zu floats (%.0f MiB per array), best of %d runs\n", device.c_str(), n,
                floats * 4 / (1 << 20), reps);
    std::printf("%-24s %8s %10s %10s %8s\n", "kernel", "bytes/N", "ms", "GB/s", "of copy");
    std::printf("%-24s %8d %10.3f %10.1f %8.2f\n", "copy (device to device)", 8, copy_seconds * 1e3, copy_gbps, 1.0);

    std::string json_kernels;
    for (const Case& k : cases) {
      const double seconds = best_seconds(*gpu, reps, k.run);
      const double gbps = k.bytes_per_float * floats / seconds / 1e9;
      std::printf("%-24s %8.0f %10.3f %10.1f %8.2f\n", k.name, k.bytes_per_float, seconds * 1e3, gbps,
                  gbps / copy_gbps);
      if (!json_kernels.empty()) json_kernels += ",";
      json_kernels += drt::JsonLine()
                          .add("name", k.name)
                          .add("gbps", gbps)
                          .add("ratio_to_copy", gbps / copy_gbps)
                          .add("ms", seconds * 1e3)
                          .str();
    }

    if (!json_path.empty()) {
      std::string json = drt::JsonLine()
                             .add("device", device)
                             .add("floats", static_cast<std::int64_t>(n))
                             .add("copy_gbps", copy_gbps)
                             .str();
      json.pop_back();  // the closing brace: the kernels array follows
      json += ",\"kernels\":[" + json_kernels + "]}\n";
      std::FILE* out = std::fopen(json_path.c_str(), "w");
      bool written = out && std::fputs(json.c_str(), out) >= 0;
      if (out) written = std::fclose(out) == 0 && written;
      if (!written) {
        std::fprintf(stderr, "drt_bench_kernels: cannot write %s\n", json_path.c_str());
        return 1;
      }
      std::printf("wrote %s\n", json_path.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "drt_bench_kernels: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
