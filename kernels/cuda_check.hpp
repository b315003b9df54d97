// Checked CUDA calls for the CUDA side of drtrain (kernels/ and src/backend/cuda/; never
// included elsewhere). A failing call throws drt::Error naming the library's message, the call,
// the source line and the rank. With debug sync on (--cuda-debug-sync or DRT_CUDA_DEBUG_SYNC=1)
// every checked call and kernel launch also waits for the device, so an asynchronous error is
// reported at the call that caused it rather than at a later one.
#pragma once

#include <cuda_runtime.h>

#include <string>

namespace drt::cuda {

[[noreturn]] void fail_call(const char* library, const std::string& message, const char* call, const char* file,
                            int line);
void set_debug_sync(bool on);
bool debug_sync();

void check_runtime(cudaError_t status, const char* call, const char* file, int line);
// After a kernel launch: the launch error and, with debug sync, the kernel's own error.
void check_launch(const char* kernel, const char* file, int line);

// Blocks of 256 threads, enough to cover n elements with each thread striding over several
// (grid-stride loops), capped so that huge n does not launch millions of blocks.
unsigned grid_for(std::size_t n, unsigned block = 256);

}  // namespace drt::cuda

#define DRT_CUDA_CHECK(call) ::drt::cuda::check_runtime((call), #call, __FILE__, __LINE__)
#define DRT_CUDA_LAUNCH_CHECK(kernel) ::drt::cuda::check_launch(kernel, __FILE__, __LINE__)
