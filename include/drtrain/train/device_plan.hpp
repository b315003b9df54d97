// DevicePlan: which device(s) a rank's towers run on. --device auto|cpu|cuda; on a CUDA build a
// worker's T towers take T GPUs chosen from its node-local worker index and the GPUs visible to
// it (CUDA_VISIBLE_DEVICES). PS ranks never touch a GPU. Resolved collectively, so a worker that
// cannot get its GPUs makes every rank fail with one message.
#pragma once

#include <string>
#include <vector>

#include "drtrain/backend/backend.hpp"
#include "drtrain/comm/topology.hpp"

namespace drt::train {

struct TrainConfig;

struct DevicePlan {
  backend::DeviceKind kind = backend::DeviceKind::kCpu;
  std::vector<int> gpus;                                // kCuda: one visible-GPU index per tower
  backend::CpuGemm cpu_gemm = backend::CpuGemm::kAuto;  // kCpu: the GEMM library
  bool allow_tf32 = false;
  bool deterministic = false;
  std::string describe() const;  // "cpu (GEMMs: oneDNN)" or "cuda: GPUs [0,1] (NVIDIA H200 ...)"
};

// The pure rule (tested without MPI or GPUs): the GPUs of the worker that is `local_worker`-th
// on its node, with `towers` towers, when `visible` GPUs are visible to it. When a rank sees
// exactly `towers` GPUs (a launcher bound GPUs per task) it uses them all; otherwise worker k
// takes GPUs [k*towers, (k+1)*towers). Throws ConfigError when they do not exist.
std::vector<int> choose_gpus(int local_worker, int towers, int visible, const std::string& visible_env);

// Collective over the world: every rank's plan (PS: cpu).
DevicePlan plan_devices(const TrainConfig& config, const comm::Topology& topo);

}  // namespace drt::train
