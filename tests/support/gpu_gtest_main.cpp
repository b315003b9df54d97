// main() of the GPU tests: exits 77 (ctest: Skipped) with the reason when no GPU is usable, so a
// machine without a GPU never reports these tests as passed.
#include <gtest/gtest.h>

#include <cstdio>

#include "drtrain/backend/cuda_backend.hpp"

int main(int argc, char** argv) {
  const drt::backend::CudaDevices gpus = drt::backend::query_cuda_devices();
  if (gpus.count == 0) {
    std::printf("SKIPPED: no usable GPU: %s (CUDA_VISIBLE_DEVICES=%s)\n", gpus.why_none.c_str(),
                gpus.visible_env.c_str());
    return 77;
  }
  for (int d = 0; d < gpus.count; ++d) std::printf("GPU %d: %s\n", d, drt::backend::describe_cuda_device(d).c_str());
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
