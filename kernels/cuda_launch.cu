// Checked CUDA calls and launch geometry (cuda_check.hpp).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "cuda_check.hpp"

namespace drt::cuda {
namespace {

bool debug_sync_from_env() {
  const char* v = std::getenv("DRT_CUDA_DEBUG_SYNC");
  return v && *v && std::strcmp(v, "0") != 0;
}

std::atomic<bool> g_debug_sync{debug_sync_from_env()};

}  // namespace

void fail_call(const char* library, const std::string& message, const char* call, const char* file, int line) {
  throw Error(str(rank_tag(), ": ", library, " error: ", message, "\n  in ", call, "\n  at ", file, ":", line,
                  debug_sync() ? ""
                               : "\n  (errors of asynchronous work may surface at a later call; rerun with "
                                 "--cuda-debug-sync to stop at the call that failed)"));
}

void set_debug_sync(bool on) { g_debug_sync = on; }
bool debug_sync() { return g_debug_sync; }

void check_runtime(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess && debug_sync()) status = cudaDeviceSynchronize();
  if (status != cudaSuccess)
    fail_call("CUDA", str(cudaGetErrorName(status), " (", cudaGetErrorString(status), ")"), call, file, line);
}

void check_launch(const char* kernel, const char* file, int line) {
  cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess && debug_sync()) status = cudaDeviceSynchronize();
  if (status != cudaSuccess)
    fail_call("CUDA", str(cudaGetErrorName(status), " (", cudaGetErrorString(status), ")"),
              str("launch of ", kernel).c_str(), file, line);
}

unsigned grid_for(std::size_t n, unsigned block) {
  const std::size_t blocks = (n + block - 1) / block;
  return static_cast<unsigned>(std::clamp<std::size_t>(blocks, 1, 65536));
}

}  // namespace drt::cuda
