// The CUDA backend and the towers' collectives, seen from plain C++ (no CUDA types): which GPUs
// this process can use, and factories for a GPU tower's Backend (cuBLAS, cuDNN, kernels/) and
// for a worker's TowerGroup. Declared in every build; in a build without CUDA the query reports
// why no GPU is usable and the factories throw.
#pragma once

#include <memory>
#include <string>

#include "drtrain/backend/backend.hpp"

namespace drt::backend {

// GPUs visible to this process (after CUDA_VISIBLE_DEVICES); count 0 with the reason when none.
struct CudaDevices {
  int count = 0;
  std::string why_none;     // "this drtrain was built without CUDA", "no CUDA driver: ...", ...
  std::string visible_env;  // the value of CUDA_VISIBLE_DEVICES, "(unset)" when unset
};
CudaDevices query_cuda_devices();
// "NVIDIA H200 (sm_90, 139 GiB)": for logs.
std::string describe_cuda_device(int device);
// "0000:1b:00.0": the same physical GPU has the same id whatever CUDA_VISIBLE_DEVICES says.
std::string cuda_pci_bus_id(int device);

struct CudaOptions {
  int device = 0;              // index among the visible GPUs
  bool allow_tf32 = false;     // TF32 tensor cores in cuBLAS and cuDNN (faster, ~1e-3 relative error)
  bool deterministic = false;  // only cuDNN algorithms that give bitwise repeatable results
};
std::unique_ptr<Backend> make_cuda_backend(const CudaOptions& options);
// The cudaStream_t (as void*) a CUDA backend queues its work on, for kernels::* launchers.
void* cuda_stream(Backend& cuda_backend);
// The index (among the visible GPUs) of a CUDA backend's device.
int cuda_device_of(Backend& cuda_backend);

// Waits after every CUDA call so that errors point at the call that caused them (debugging).
void set_cuda_debug_sync(bool on);

}  // namespace drt::backend
