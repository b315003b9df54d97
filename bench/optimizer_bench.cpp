// drt_bench_optimizer: what a PS spends applying several workers' gradients to a shard one after
// the other (--sync-mode ssp/async, when k gradients are pending at once), as k separate updates
// (Optimizer::begin_step + update per gradient, the PS before the fused run) against one run
// (Optimizer::begin_run + update_run: SGD's one-pass kernel, kernels::ref::sgd_update_run), both
// through the PS's own chunking (4096 elements). Nesterov momentum SGD with weight decay; a 1 MiB
// block (in cache) and a 64 MiB shard (memory). Best of --reps; single process, no MPI.
//
//   build/bin/drt_bench_optimizer [--reps 20]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "drtrain/optim/optimizer.hpp"

namespace {

constexpr std::size_t kChunk = 4096;  // ParameterServer's kApplyBlock

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

template <typename Apply>
double best_seconds(int reps, const Apply& apply) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double t0 = now();
    apply();
    best = std::min(best, now() - t0);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--reps R]\n", argv[0]);
      return 2;
    }
  }
  drt::optim::OptimizerConfig config;
  config.lr = 0.05;
  config.momentum = 0.97;
  config.nesterov = true;
  config.weight_decay = 5e-4;
  std::printf("%-10s %2s %16s %12s %7s\n", "shard", "k", "one by one (ms)", "run (ms)", "ratio");
  for (std::size_t n : {std::size_t{1} << 18, std::size_t{1} << 24}) {
    auto optimizer = drt::optim::make_optimizer(config, n);
    optimizer->set_step_fraction(0.25);
    std::vector<float> params(n, 0.5f);
    std::vector<std::vector<float>> grads(4, std::vector<float>(n, 1e-3f));
    for (std::size_t k = 1; k <= grads.size(); ++k) {
      std::vector<drt::optim::StepPoint> points;
      for (std::size_t j = 0; j < k; ++j) points.push_back({0, static_cast<std::int64_t>(j)});
      const double one_by_one = best_seconds(reps, [&] {
        for (std::size_t j = 0; j < k; ++j) {
          optimizer->begin_step(points[j].step, points[j].updates_before);
          for (std::size_t at = 0; at < n; at += kChunk)
            optimizer->update(at, std::min(kChunk, n - at), params.data() + at, grads[j].data() + at, 0.25f);
        }
      });
      const double run = best_seconds(reps, [&] {
        optimizer->begin_run(points);
        std::vector<const float*> chunk(k);
        for (std::size_t at = 0; at < n; at += kChunk) {
          for (std::size_t j = 0; j < k; ++j) chunk[j] = grads[j].data() + at;
          optimizer->update_run(at, std::min(kChunk, n - at), params.data() + at, chunk.data(), 0.25f);
        }
      });
      std::printf("%-10s %2zu %16.3f %12.3f %7.2f\n", n == (std::size_t{1} << 18) ? "1 MiB" : "64 MiB", k,
                  one_by_one * 1e3, run * 1e3, run / one_by_one);
    }
  }
  return 0;
}
