// Checked library calls of the CUDA backend (library_check.hpp).
#include "library_check.hpp"

#include "drtrain/core/strings.hpp"

namespace drt::cuda {
namespace {

void maybe_sync(const char* call, const char* file, int line) {
  if (!debug_sync()) return;
  const cudaError_t status = cudaDeviceSynchronize();
  if (status != cudaSuccess)
    fail_call("CUDA", str(cudaGetErrorName(status), " (", cudaGetErrorString(status), ") after the call"), call, file,
              line);
}

}  // namespace

void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS)
    fail_call("cuBLAS", str(cublasGetStatusName(status), " (", cublasGetStatusString(status), ")"), call, file, line);
  maybe_sync(call, file, line);
}

void check_cudnn(cudnnStatus_t status, const char* call, const char* file, int line) {
  if (status != CUDNN_STATUS_SUCCESS) {
    char detail[512] = "";
    cudnnGetLastErrorString(detail, sizeof detail);
    fail_call("cuDNN", str(cudnnGetErrorString(status), detail[0] ? str(": ", detail) : std::string()), call, file,
              line);
  }
  maybe_sync(call, file, line);
}

void check_nccl(ncclResult_t status, ncclComm_t comm, const char* call, const char* file, int line) {
  if (status != ncclSuccess && status != ncclInProgress) {
    const char* last = comm ? ncclGetLastError(comm) : nullptr;
    fail_call("NCCL", str(ncclGetErrorString(status), last && *last ? str(": ", last) : std::string()), call, file,
              line);
  }
  maybe_sync(call, file, line);
}

void use_device(int device) { DRT_CUDA_CHECK(cudaSetDevice(device)); }

}  // namespace drt::cuda
