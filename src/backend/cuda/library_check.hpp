// Checked cuBLAS, cuDNN and NCCL calls (internal to the CUDA backend), alongside
// DRT_CUDA_CHECK from kernels/cuda_check.hpp: a failing call throws drt::Error with the
// library's message, the call, the line and the rank; with debug sync the device is waited for
// after each call.
#pragma once

#include <cublas_v2.h>
#include <cudnn.h>
#include <nccl.h>

#include "cuda_check.hpp"

namespace drt::cuda {

void check_cublas(cublasStatus_t status, const char* call, const char* file, int line);
void check_cudnn(cudnnStatus_t status, const char* call, const char* file, int line);
void check_nccl(ncclResult_t status, ncclComm_t comm, const char* call, const char* file, int line);

// Makes `device` current for the calls that follow (cuBLAS/cuDNN handles, streams and
// allocations belong to the device that was current when they were created).
void use_device(int device);

}  // namespace drt::cuda

#define DRT_CUBLAS_CHECK(call) ::drt::cuda::check_cublas((call), #call, __FILE__, __LINE__)
#define DRT_CUDNN_CHECK(call) ::drt::cuda::check_cudnn((call), #call, __FILE__, __LINE__)
#define DRT_NCCL_CHECK(call, comm) ::drt::cuda::check_nccl((call), (comm), #call, __FILE__, __LINE__)
