// GPU choice per worker (choose_gpus): the pure rule behind --towers on GPUs, without MPI or GPUs.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "drtrain/core/error.hpp"
#include "drtrain/train/device_plan.hpp"

namespace drt::train {
namespace {

TEST(ChooseGpus, WorkersOfANodeTakeConsecutiveGpus) {
  EXPECT_EQ(choose_gpus(0, 1, 4, "(unset)"), (std::vector<int>{0}));
  EXPECT_EQ(choose_gpus(3, 1, 4, "(unset)"), (std::vector<int>{3}));
  EXPECT_EQ(choose_gpus(0, 2, 8, "(unset)"), (std::vector<int>{0, 1}));
  EXPECT_EQ(choose_gpus(2, 2, 8, "(unset)"), (std::vector<int>{4, 5}));
}

TEST(ChooseGpus, ARankThatSeesExactlyItsTowersGpusUsesThemAll) {
  // srun --gpus-per-task=2: every rank sees its own two GPUs as 0 and 1.
  EXPECT_EQ(choose_gpus(1, 2, 2, "'2,3'"), (std::vector<int>{0, 1}));
  EXPECT_EQ(choose_gpus(5, 1, 1, "'5'"), (std::vector<int>{0}));
}

TEST(ChooseGpus, TooFewGpusIsAConfigErrorThatSaysWhatToDo) {
  try {
    choose_gpus(1, 2, 3, "'0,1,2'");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("needs GPUs 2..3"), std::string::npos) << m;
    EXPECT_NE(m.find("3 GPU(s) are visible (CUDA_VISIBLE_DEVICES='0,1,2')"), std::string::npos) << m;
    EXPECT_NE(m.find("--device cpu"), std::string::npos) << m;
  }
}

TEST(DevicePlan, DescribesTheCpuAndItsGemmLibrary) {
  DevicePlan plan;
  EXPECT_EQ(plan.describe(), backend::onednn_available() ? "cpu (GEMMs: oneDNN)" : "cpu (GEMMs: OpenBLAS)");
  plan.cpu_gemm = backend::CpuGemm::kOpenBlas;
  EXPECT_EQ(plan.describe(), "cpu (GEMMs: OpenBLAS)");
}

TEST(DevicePlan, CpuGemmFlagValues) {
  EXPECT_EQ(backend::parse_cpu_gemm("auto", "--cpu-gemm"), backend::CpuGemm::kAuto);
  EXPECT_EQ(backend::parse_cpu_gemm("openblas", "--cpu-gemm"), backend::CpuGemm::kOpenBlas);
  if (backend::onednn_available())
    EXPECT_EQ(backend::parse_cpu_gemm("onednn", "--cpu-gemm"), backend::CpuGemm::kOneDnn);
  else EXPECT_THROW(backend::parse_cpu_gemm("onednn", "--cpu-gemm"), ConfigError);
  try {
    backend::parse_cpu_gemm("mkl", "--cpu-gemm");
    FAIL() << "mkl accepted";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "--cpu-gemm mkl: expected auto, openblas or onednn");
  }
}

}  // namespace
}  // namespace drt::train
