// Which GPUs this process can use, and how to name them in logs (cuda_backend.hpp).
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "drtrain/backend/cuda_backend.hpp"
#include "drtrain/core/strings.hpp"
#include "library_check.hpp"

namespace drt::backend {

CudaDevices query_cuda_devices() {
  CudaDevices out;
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  out.visible_env = visible ? str("'", visible, "'") : "(unset)";
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    // Short, for the one line a CPU run prints (device_plan.cpp): what is true, not the runtime's
    // paragraph. The kernel module publishes /proc/driver/nvidia/version once it is loaded.
    if (status == cudaErrorInsufficientDriver) {
      int runtime = 0;
      cudaRuntimeGetVersion(&runtime);
      out.why_none = access("/proc/driver/nvidia/version", F_OK) != 0
                         ? std::string("CUDA driver: not loaded")
                         : str("CUDA driver: loaded, but too old for this build's CUDA ", runtime / 1000, ".",
                               runtime % 1000 / 10, " or libcuda.so.1 missing");
    } else if (status == cudaErrorNoDevice) {
      out.why_none = str("CUDA driver: loaded, no GPU visible with CUDA_VISIBLE_DEVICES=", out.visible_env);
    } else {
      out.why_none = str("cudaGetDeviceCount: ", cudaGetErrorName(status));
    }
    return out;
  }
  if (count == 0) out.why_none = "the CUDA runtime sees no GPU";
  out.count = count;
  return out;
}

std::string describe_cuda_device(int device) {
  cudaDeviceProp p{};
  DRT_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  return str(p.name, " (sm_", p.major, p.minor, ", ", p.totalGlobalMem >> 30, " GiB, PCI ", p.pciBusID, ")");
}

std::string cuda_pci_bus_id(int device) {
  char id[32] = "";
  DRT_CUDA_CHECK(cudaDeviceGetPCIBusId(id, sizeof id, device));
  return id;
}

void set_cuda_debug_sync(bool on) { cuda::set_debug_sync(on); }

}  // namespace drt::backend
