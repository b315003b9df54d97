#include "memory_estimate.hpp"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include "drtrain/backend/backend.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/nn/network.hpp"

namespace drt::train {
namespace {

struct ActivationCost {
  double fixed = 0.0, per_sample = 0.0;  // bytes
};

double sum(const std::vector<MemoryEstimate::Part>& parts) {
  double total = 0.0;
  for (const auto& p : parts) total += p.bytes;
  return total;
}

// Bytes the C heap holds in use (glibc: arena chunks and mmapped ones). The CPU backend's buffers
// and oneDNN's own come from it.
double heap_in_use() {
  const struct mallinfo2 m = mallinfo2();
  return static_cast<double>(m.uordblks) + static_cast<double>(m.hblkhd);
}

// The heap a network of the model for n samples holds: its activation buffers, its layers'
// workspaces, and with `step` what one training step adds (oneDNN's buffers of that shape).
double network_bytes(const nn::ModelSpec& spec, backend::Backend& cpu, int n, bool step) {
  const std::size_t total = spec.layout().total();
  const nn::TensorShape in = spec.input();
  std::vector<float> params(step ? total : 0), grads(step ? total : 0), x(step ? in.per_sample() * n : 0);
  std::vector<std::int32_t> labels(step ? static_cast<std::size_t>(in.positions()) * n : 0);
  if (step) spec.init_params(1, params.data());
  const double before = heap_in_use();
  nn::Network net(spec, cpu, n);
  if (step) {
    net.bind(params.data(), grads.data());
    net.train(x.data(), labels.data(), n, 1.0f);
  }
  return std::max(0.0, heap_in_use() - before);
}

// Activations, their gradients and the layers' workspaces: measured on networks of the model for
// 1 and 3 samples (every buffer grows with the batch), each after a training step on zeros when a
// sample's step is cheap (under ~2 GFLOP: image models; not a language model's context).
ActivationCost activation_cost(const nn::ModelSpec& spec) {
  const auto cpu = backend::make_cpu_backend();
  const double flops = 6.0 * static_cast<double>(spec.layout().total()) * spec.input().positions();
  const bool step = flops < 2e9;
  const double one = network_bytes(spec, *cpu, 1, step), three = network_bytes(spec, *cpu, 3, step);
  ActivationCost cost;
  cost.per_sample = std::max(0.0, (three - one) / 2.0);
  cost.fixed = std::max(0.0, one - cost.per_sample);
  return cost;
}

// A whole number of bytes from a /proc or /sys line ("MemTotal: 24000000 kB", "max"); 0 if none.
double read_bytes(const std::string& path, const std::string& key, double unit) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size(), key) != 0) continue;
    std::istringstream fields(line.substr(key.size()));
    double value = 0.0;
    return fields >> value ? value * unit : 0.0;  // "max" (no limit) reads as 0
  }
  return 0.0;
}

}  // namespace

double MemoryEstimate::worker_bytes() const { return sum(worker); }
double MemoryEstimate::ps_bytes() const { return sum(ps); }

std::string MemoryEstimate::describe(const std::vector<Part>& parts) {
  std::vector<Part> sorted = parts;
  std::stable_sort(sorted.begin(), sorted.end(), [](const Part& a, const Part& b) { return a.bytes > b.bytes; });
  std::vector<std::string> items;
  for (const Part& p : sorted)
    if (p.bytes > 0) items.push_back(str(p.what, " ", human_bytes(p.bytes)));
  return str(human_bytes(sum(parts)), " (", join(items, ", "), ")");
}

MemoryEstimate estimate_memory(const MemoryInputs& in) {
  const TrainConfig& c = *in.config;
  const double params = static_cast<double>(in.spec->layout().total());
  const double per_tower = static_cast<double>(c.batch_size) / (in.num_workers * c.towers);
  const double sample_bytes = 4.0 * static_cast<double>(in.sample_floats);
  MemoryEstimate e;
  e.towers_on_gpu = in.towers_on_gpu;
  // What the process holds already: the program, and a worker's data set when it is held in
  // memory (Fashion-MNIST, synthetic); an HDF5 file is read through chunk caches of 64 MiB a
  // split (data/hdf5_source.hpp), filled as training reads.
  e.resident = resident_bytes();
  e.worker.push_back({"resident now", e.resident});
  if (c.dataset == "hdf5")
    e.worker.push_back({"HDF5 chunk caches", (in.test_count > 0 ? 2.0 : 1.0) * 64.0 * 1024 * 1024});
  e.ps.push_back({"resident now", e.resident});
  // The loader: a queue of 2 steps ahead plus the one training, float32 samples and labels.
  e.worker.push_back({"batches", 3.0 * per_tower * c.towers * (sample_bytes + 4.0 * in.targets)});
  // Every tower: its parameters and gradients, and its activations with their gradients. The
  // worker's flat parameters and gradients for the exchange come on top.
  const double towers = in.towers_on_gpu ? 0.0 : c.towers;
  e.worker.push_back({"parameters and gradients", (towers + 1.0) * 2.0 * 4.0 * params});
  const ActivationCost act = activation_cost(*in.spec);
  e.worker.push_back({"activations", towers * (act.fixed + per_tower * act.per_sample)});
  // The largest PS: its shard of parameters (and a 16-bit copy for a bf16 wire), the gradient
  // window (one slot per worker when they push into slots), the optimizer state, and with
  // --checkpoint-async a snapshot of parameters and state.
  const double shard = static_cast<double>(in.largest_shard);
  const double wire = static_cast<double>(c.exchange.wire_bytes());
  const int slots = c.optimizer.num_slots();
  e.ps.push_back({"parameters", shard * (4.0 + (wire < 4.0 ? wire : 0.0))});
  e.ps.push_back({"gradient window", shard * (c.exchange.per_worker_slots() ? wire * in.num_workers : 4.0)});
  e.ps.push_back({"optimizer state", shard * 4.0 * slots});
  if (c.checkpoint_async && !c.checkpoint_dir.empty())
    e.ps.push_back({"checkpoint snapshot", shard * 4.0 * (1.0 + slots)});
  return e;
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "this node";
  return name;
}

double resident_bytes() { return read_bytes("/proc/self/status", "VmRSS:", 1024.0); }

double node_available_bytes() {
  const double available = read_bytes("/proc/meminfo", "MemAvailable:", 1024.0);
  const double limit = read_bytes("/sys/fs/cgroup/memory.max", "", 1.0);
  const double used = read_bytes("/sys/fs/cgroup/memory.current", "", 1.0);
  if (limit > 0 && available > 0) return std::min(available, std::max(0.0, limit - used));
  return available;
}

void refuse_if_too_large(double ranks_bytes, double node_bytes, const MemoryEstimate& e, int workers_here, int ps_here,
                         const std::string& node_name) {
  if (node_bytes <= 0 || ranks_bytes <= node_bytes) return;
  // (node_bytes: what the node has available now plus what the job's ranks there hold already)
  throw ConfigError(str(
      "this job needs about ", human_bytes(ranks_bytes), " on ", node_name, " (", workers_here, " worker(s) x ",
      MemoryEstimate::describe(e.worker),
      ps_here > 0 ? str(" + ", ps_here, " PS x ", MemoryEstimate::describe(e.ps)) : std::string(), "), more than the ",
      human_bytes(node_bytes),
      " it has for the job: lower --batch-size (activations grow with the batch per tower), or spread the workers over "
      "more nodes; drtrain --check prints the estimate without starting the job"));
}

}  // namespace drt::train
