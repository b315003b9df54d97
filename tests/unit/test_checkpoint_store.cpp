// Checkpoint file names: padding, parsing beyond 8 digits, the order of a directory, retention.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "drtrain/io/checkpoint_store.hpp"

namespace fs = std::filesystem;
using namespace drt::io;

TEST(CheckpointStore, NamesParseBackToTheirStepAtAnySize) {
  for (std::int64_t step : {std::int64_t{0}, std::int64_t{1200}, std::int64_t{99999999}, std::int64_t{100000000},
                            std::int64_t{123456789012}}) {
    const std::string name = fs::path(checkpoint_path("d", step)).filename().string();
    EXPECT_EQ(step_of(name), step) << name;
  }
  EXPECT_EQ(fs::path(checkpoint_path("d", 1200)).filename(), "ckpt-00001200.h5");
  EXPECT_EQ(fs::path(checkpoint_path("d", 100000000)).filename(), "ckpt-100000000.h5");
  for (const char* other : {"ckpt-1200.h5", "ckpt-0000120x.h5", "ckpt-00001200.h5.tmp", ".ckpt-00001200.h5.tmp",
                            "ckpt-00001200.h6", "xckpt-00001200.h5", "ckpt-1234567890123456789.h5", "ckpt-.h5"})
    EXPECT_EQ(step_of(other), -1) << other;
}

TEST(CheckpointStore, ListsNewestFirstAcrossTheEightDigitBoundaryAndRetentionKeepsTheNewest) {
  const fs::path dir = fs::temp_directory_path() / ("drt-ckpt-store-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  prepare_checkpoint_dir(dir.string());
  for (std::int64_t step : {std::int64_t{99999999}, std::int64_t{100000000}, std::int64_t{7}, std::int64_t{100000001}})
    std::ofstream(checkpoint_path(dir.string(), step)) << "x";
  std::ofstream(temporary_path(dir.string(), 100000002)) << "x";
  const auto all = list_checkpoints(dir.string());
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0], checkpoint_path(dir.string(), 100000001));
  EXPECT_EQ(all[1], checkpoint_path(dir.string(), 100000000));
  EXPECT_EQ(all[2], checkpoint_path(dir.string(), 99999999));
  EXPECT_EQ(all[3], checkpoint_path(dir.string(), 7));
  const auto removed = apply_retention(dir.string(), 2);
  EXPECT_EQ(removed.size(), 3u);  // steps 99999999 and 7, and the temporary file
  const auto kept = list_checkpoints(dir.string());
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0], checkpoint_path(dir.string(), 100000001));
  EXPECT_FALSE(fs::exists(temporary_path(dir.string(), 100000002)));
  fs::remove_all(dir);
}
