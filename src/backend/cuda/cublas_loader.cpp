// cuBLAS, loaded when the CUDA backend first uses it (issue 34, item 10). Linking libcublas at
// startup also loads libcublasLt, whose static initialisation makes ~150 MiB resident in every
// rank, PS ranks and CPU-only workers included, which never call cuBLAS. So drtrain does not link
// cuBLAS: these definitions of the few cuBLAS entry points the backend calls (cuda_backend.cpp,
// library_check.cpp) dlopen libcublas.so.<major> on the first call and forward to it. The
// package needed at run time is the same; a GPU run that cannot find it fails with that reason.
// tests/unit/test_cublas_lazy.cpp checks that a process of this build starts without it.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <string>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace {

#define DRT_STR2(x) #x
#define DRT_STR(x) DRT_STR2(x)
constexpr const char* kCublasSoname = "libcublas.so." DRT_STR(CUBLAS_VER_MAJOR);

// libcublas lives next to libcudart in a CUDA toolkit: the fallback when the loader's search path
// (LD_LIBRARY_PATH, ld.so.cache, this executable's RUNPATH) does not have it.
std::string next_to_cudart() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cudaGetDeviceCount), &info) == 0 || info.dli_fname == nullptr) return {};
  std::string dir = info.dli_fname;
  const auto slash = dir.rfind('/');
  return slash == std::string::npos ? std::string() : dir.substr(0, slash + 1) + kCublasSoname;
}

void* cublas_library() {
  static void* const handle = [] {
    void* h = dlopen(kCublasSoname, RTLD_NOW | RTLD_LOCAL);
    std::string why = h ? std::string() : dlerror();
    if (!h) {
      const std::string beside = next_to_cudart();
      if (!beside.empty()) h = dlopen(beside.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!h && !beside.empty()) why = drt::str(why, "; ", dlerror());
    }
    if (!h)
      throw drt::Error(drt::str("the CUDA backend cannot load cuBLAS (", kCublasSoname, "): ", why,
                                ". Install the CUDA toolkit's cuBLAS or put its directory on LD_LIBRARY_PATH, "
                                "or pass --device cpu"));
    return h;
  }();
  return handle;
}

template <typename Fn>
Fn cublas_symbol(const char* name) {
  void* f = dlsym(cublas_library(), name);
  if (f == nullptr)
    throw drt::Error(drt::str("cuBLAS (", kCublasSoname, ") has no ", name, ": ", dlerror(),
                              ". Install the cuBLAS of the CUDA this drtrain was built with"));
  return reinterpret_cast<Fn>(f);
}

}  // namespace

// Each entry point looks its symbol up once (a function-local static: thread-safe). params and args
// are parenthesised lists, so they take no extra parentheses (the NOLINT).
#define DRT_CUBLAS_FORWARD(ret, name, params, args)                                      \
  extern "C" ret CUBLASWINAPI name params {                                              \
    static const auto fn = cublas_symbol<ret(CUBLASWINAPI*) params>(#name); /* NOLINT */ \
    return fn args;                                                                      \
  }

DRT_CUBLAS_FORWARD(cublasStatus_t, cublasCreate_v2, (cublasHandle_t * handle), (handle))
DRT_CUBLAS_FORWARD(cublasStatus_t, cublasDestroy_v2, (cublasHandle_t handle), (handle))
DRT_CUBLAS_FORWARD(cublasStatus_t, cublasSetStream_v2, (cublasHandle_t handle, cudaStream_t stream), (handle, stream))
DRT_CUBLAS_FORWARD(cublasStatus_t, cublasSetMathMode, (cublasHandle_t handle, cublasMath_t mode), (handle, mode))
DRT_CUBLAS_FORWARD(const char*, cublasGetStatusName, (cublasStatus_t status), (status))
DRT_CUBLAS_FORWARD(const char*, cublasGetStatusString, (cublasStatus_t status), (status))
DRT_CUBLAS_FORWARD(cublasStatus_t, cublasSgemm_v2,
                   (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                    const float* alpha, const float* A, int lda, const float* B, int ldb, const float* beta, float* C,
                    int ldc),
                   (handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc))
