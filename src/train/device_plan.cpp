// Device plans (device_plan.hpp): --device resolved on every worker, GPUs chosen from the
// node-local worker index, and one verdict for the whole job.
#include "drtrain/train/device_plan.hpp"

#include <mpi.h>

#include <optional>

#include "drtrain/backend/cuda_backend.hpp"
#include "drtrain/comm/agreement.hpp"
#include "drtrain/comm/mpi_check.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/log.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/train/train_config.hpp"

namespace drt::train {

std::vector<int> choose_gpus(int local_worker, int towers, int visible, const std::string& visible_env) {
  std::vector<int> gpus;
  if (visible == towers) {  // this rank's own GPUs (bound per task by the launcher)
    for (int t = 0; t < towers; ++t) gpus.push_back(t);
    return gpus;
  }
  const int first = local_worker * towers;
  if (first + towers > visible)
    throw ConfigError(str("worker ", local_worker, " on its node needs GPUs ", first, "..", first + towers - 1,
                          " (--towers ", towers, " GPUs per worker) but ", visible,
                          " GPU(s) are visible (CUDA_VISIBLE_DEVICES=", visible_env,
                          "); run fewer workers per node, pass fewer --towers, give each rank its own GPUs "
                          "(e.g. srun --gpus-per-task), or use --device cpu"));
  for (int t = 0; t < towers; ++t) gpus.push_back(first + t);
  return gpus;
}

std::string DevicePlan::describe() const {
  if (kind == backend::DeviceKind::kCpu) return str("cpu (GEMMs: ", backend::to_string(cpu_gemm), ")");
  std::string list;
  for (int g : gpus) list += str(list.empty() ? "" : ",", g);
  return str("cuda: GPU(s) [", list, "] ", backend::describe_cuda_device(gpus.front()), allow_tf32 ? ", TF32 on" : "",
             deterministic ? ", deterministic cuDNN algorithms" : "");
}

namespace {

// Two workers of a node on one GPU train correctly but share it (each rank sees the same GPUs
// and exactly --towers of them, so choose_gpus gives every one GPUs 0..T-1): say so. Collective
// over the node; GPUs are compared by PCI bus id, which CUDA_VISIBLE_DEVICES does not change.
void warn_about_shared_gpus(const DevicePlan& plan, int towers, const comm::Topology& topo) {
  constexpr std::size_t kIdChars = 32;
  const std::size_t per_rank = static_cast<std::size_t>(towers) * kIdChars;
  std::vector<char> mine(per_rank, '\0');
  if (plan.kind == backend::DeviceKind::kCuda)
    for (std::size_t t = 0; t < plan.gpus.size(); ++t)
      backend::cuda_pci_bus_id(plan.gpus[t]).copy(mine.data() + t * kIdChars, kIdChars - 1);
  const comm::Comm& node = topo.node_comm();
  std::vector<char> all(per_rank * static_cast<std::size_t>(node.size()));
  DRT_MPI_CHECK(MPI_Allgather(mine.data(), static_cast<int>(per_rank), MPI_CHAR, all.data(), static_cast<int>(per_rank),
                              MPI_CHAR, node.get()));
  if (plan.kind != backend::DeviceKind::kCuda) return;
  for (std::size_t t = 0; t < plan.gpus.size(); ++t) {
    const std::string id(mine.data() + t * kIdChars);
    for (int r = 0; r < node.size(); ++r) {
      if (r == node.rank()) continue;
      for (std::size_t u = 0; u < static_cast<std::size_t>(towers); ++u)
        if (id == std::string(all.data() + static_cast<std::size_t>(r) * per_rank + u * kIdChars)) {
          log_warning(topo.my_name(), " shares GPU ", id,
                      " with another rank of its node: give each rank its own "
                      "GPUs (e.g. srun --gpus-per-task) or let every rank see all of them; training is correct but "
                      "slower");
          return;
        }
    }
  }
}

}  // namespace

DevicePlan plan_devices(const TrainConfig& c, const comm::Topology& topo) {
  // The node-local index of this worker among the workers of its node (PS ranks count 0).
  int is_worker = topo.is_worker() ? 1 : 0, local_worker = 0;
  DRT_MPI_CHECK(MPI_Exscan(&is_worker, &local_worker, 1, MPI_INT, MPI_SUM, topo.node_comm().get()));
  if (topo.node_comm().rank() == 0) local_worker = 0;  // MPI_Exscan leaves rank 0's result undefined
  if (topo.is_worker())
    log_debug(topo.my_name(), ": node-local worker ", local_worker, " of node ", topo.node_index(), " (picks GPUs ",
              local_worker * c.towers, "..", (local_worker + 1) * c.towers - 1, " of those it sees)");

  DevicePlan plan;
  plan.allow_tf32 = c.cuda_tf32;
  plan.cpu_gemm = backend::parse_cpu_gemm(c.cpu_gemm, "--cpu-gemm");
  plan.deterministic = c.exchange.deterministic;
  std::optional<std::string> error;
  if (topo.is_worker() && c.device != "cpu") {  // PS ranks never touch a GPU
    try {
      backend::set_cuda_debug_sync(c.cuda_debug_sync);
      const backend::CudaDevices gpus = backend::query_cuda_devices();
      if (gpus.count > 0) {
        plan.gpus = choose_gpus(local_worker, c.towers, gpus.count, gpus.visible_env);
        plan.kind = backend::DeviceKind::kCuda;
      } else if (c.device == "cuda") {
        throw ConfigError(str("--device cuda: no usable GPU on ", topo.my_name(), ": ", gpus.why_none,
                              " (CUDA_VISIBLE_DEVICES=", gpus.visible_env, "); pass --device cpu"));
      } else if (topo.is_chief()) {
        log_info("--device auto: no GPU visible (", gpus.why_none, "); workers train on the CPU");
      }
    } catch (const ConfigError& e) {
      error = e.what();
    }
  }
  comm::raise_if_any(topo.world(), error);

  warn_about_shared_gpus(plan, c.towers, topo);

  // Mixed devices work (the exchange is host memory) but are worth a warning: numerics and speed
  // differ between workers.
  const int cuda = plan.kind == backend::DeviceKind::kCuda ? 1 : 0;
  int min_of[2] = {topo.is_worker() ? cuda : 1, topo.is_worker() ? -cuda : 0};  // min cuda, -max cuda
  DRT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, min_of, 2, MPI_INT, MPI_MIN, topo.world().get()));
  const int lo = min_of[0], hi = -min_of[1];
  if (lo != hi && topo.is_chief())
    log_warning("some workers train on GPUs and some on CPUs (--device auto with GPUs on some nodes only); "
                "pass --device cuda or --device cpu to make them alike");
  return plan;
}

}  // namespace drt::train
