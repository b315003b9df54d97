// cuBLAS is loaded on first use, not at startup (src/backend/cuda/cublas_loader.cpp, issue 34 item 10):
// a process of the CUDA build maps no libcublas/libcublasLt until it calls cuBLAS, and then the
// forwarded call works (cublasGetStatusName needs no GPU). CUDA build only (tests/CMakeLists.txt).
#include <cublas_v2.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

namespace {

// The lines of /proc/self/maps that map a file whose path contains `name`.
int mappings_of(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);)
    if (line.find(name) != std::string::npos) ++n;
  return n;
}

TEST(CublasLazy, NotMappedUntilFirstCallThenForwards) {
  // Taking the address links the entry point as drtrain does (linking libcublas would map it now).
  using CreateFn = cublasStatus_t (*)(cublasHandle_t*);
  static CreateFn volatile create = &cublasCreate_v2;
  ASSERT_TRUE(create != nullptr);
  EXPECT_EQ(mappings_of("libcublas"), 0) << "libcublas is mapped before any cuBLAS call: is it linked again?";

  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_NOT_INITIALIZED), "CUBLAS_STATUS_NOT_INITIALIZED");
  EXPECT_GT(mappings_of("libcublas.so"), 0) << "the first cuBLAS call should have loaded libcublas";
  EXPECT_GT(mappings_of("libcublasLt.so"), 0) << "libcublas needs libcublasLt";
}

}  // namespace
