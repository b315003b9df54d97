// Shard plan invariants: covers [0, total) exactly, contiguous and ordered, balanced, the same
// every time, serialisable; split() and owner_of() agree with the shards.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "drtrain/core/error.hpp"
#include "drtrain/ps/server.hpp"
#include "drtrain/ps/shard_plan.hpp"

namespace drt::ps {
namespace {

void expect_invariants(std::size_t total, int shards) {
  SCOPED_TRACE(::testing::Message() << "total=" << total << " P=" << shards);
  const ShardPlan plan = ShardPlan::balanced(total, shards);
  ASSERT_EQ(plan.num_shards(), shards);
  ASSERT_EQ(plan.total(), total);
  EXPECT_EQ(plan.shard(0).begin, 0u);
  EXPECT_EQ(plan.shard(shards - 1).end, total);
  std::size_t smallest = total, largest = 0, covered = 0;
  for (int p = 0; p < shards; ++p) {
    const ShardRange r = plan.shard(p);
    ASSERT_LE(r.begin, r.end);
    if (p > 0) {
      EXPECT_EQ(r.begin, plan.shard(p - 1).end);  // no gap, no overlap
    }
    covered += r.size();
    smallest = std::min(smallest, r.size());
    largest = std::max(largest, r.size());
  }
  EXPECT_EQ(covered, total);
  EXPECT_EQ(largest, plan.largest_shard());
  const bool aligned = total / static_cast<std::size_t>(shards) >= 1024;
  if (aligned) {
    EXPECT_LE(largest - smallest, 2 * ShardPlan::kAlignElems + 1);
    for (int p = 1; p < shards; ++p) EXPECT_EQ(plan.shard(p).begin % ShardPlan::kAlignElems, 0u);
  } else {
    EXPECT_LE(largest - smallest, 1u);
  }
  // Deterministic and serialisable.
  EXPECT_EQ(ShardPlan::balanced(total, shards).boundaries(), plan.boundaries());
  EXPECT_EQ(ShardPlan::from_text(plan.to_text()).boundaries(), plan.boundaries());
  EXPECT_EQ(ShardPlan::from_boundaries(plan.boundaries()).boundaries(), plan.boundaries());
}

TEST(ShardPlan, InvariantsAcrossSizesAndShardCounts) {
  const std::size_t sizes[] = {
      0, 1, 2, 3, 7, 15, 16, 17, 100, 1023, 1024, 4097, 65536, 100003, 1000000, 33554433, std::size_t{1} << 36};
  for (std::size_t total : sizes)
    for (int shards : {1, 2, 3, 4, 5, 7, 8, 13, 64, 1000}) expect_invariants(total, shards);
}

TEST(ShardPlan, MoreShardsThanElementsGivesEmptyShards) {
  const ShardPlan plan = ShardPlan::balanced(3, 8);
  int empty = 0;
  for (int p = 0; p < 8; ++p) empty += plan.shard(p).size() == 0;
  EXPECT_EQ(empty, 5);
  for (std::size_t e = 0; e < 3; ++e) {
    const ShardRange r = plan.shard(plan.owner_of(e));
    EXPECT_TRUE(r.begin <= e && e < r.end) << "element " << e;
  }
}

TEST(ShardPlan, SplitMatchesOwners) {
  std::mt19937_64 rng(7);
  for (int shards : {1, 2, 3, 7}) {
    const ShardPlan plan = ShardPlan::balanced(50021, shards);
    for (int trial = 0; trial < 200; ++trial) {
      const std::size_t a = rng() % 50021, b = rng() % 50022;
      const std::size_t offset = std::min(a, b), count = std::max(a, b) - offset;
      std::size_t next = offset;
      for (const ShardPiece& piece : plan.split(offset, count)) {
        EXPECT_EQ(piece.begin, next);
        EXPECT_GT(piece.count, 0u);
        EXPECT_EQ(plan.owner_of(piece.begin), piece.shard);
        EXPECT_EQ(plan.owner_of(piece.begin + piece.count - 1), piece.shard);
        next += piece.count;
      }
      EXPECT_EQ(next, offset + count);
    }
  }
}

TEST(ShardPlan, TensorsSpanShardsInDescription) {
  ParamLayout layout;
  layout.add("tiny.bias", {3});
  layout.add("huge.weight", {1000, 1000});
  layout.add("out.bias", {1});
  const ShardPlan plan = ShardPlan::balanced(layout.total(), 3);
  const std::string text = plan.describe(layout);
  EXPECT_NE(text.find("PS 0: [0, "), std::string::npos) << text;
  EXPECT_NE(text.find("tiny.bias huge.weight[0:"), std::string::npos) << text;
  EXPECT_NE(text.find("huge.weight["), std::string::npos) << text;
  EXPECT_NE(text.find("out.bias"), std::string::npos) << text;
}

TEST(ShardPlan, RejectsBadInput) {
  EXPECT_THROW(ShardPlan::balanced(10, 0), ConfigError);
  EXPECT_THROW(ShardPlan::from_boundaries({0, 5, 3}), ConfigError);
  EXPECT_THROW(ShardPlan::from_boundaries({1, 5}), ConfigError);
  EXPECT_THROW(ShardPlan::from_text("shard-plan v1 P=2 total=10 : 0 5"), ConfigError);
  EXPECT_THROW(ShardPlan::from_text("shard-plan v2 P=1 total=10 : 0 10"), ConfigError);
  EXPECT_THROW(ShardPlan::from_text("nonsense"), ConfigError);
}

TEST(ParamLayout, OffsetsFollowInsertionOrder) {
  ParamLayout layout;
  EXPECT_EQ(layout.add("a", {2, 3}).offset, 0u);
  EXPECT_EQ(layout.add("b", {4}).offset, 6u);
  EXPECT_EQ(layout.total(), 10u);
  EXPECT_EQ(layout.find("b")->shape_string(), "4");
  EXPECT_THROW(layout.add("a", {1}), Error);
  EXPECT_THROW(layout.add("c", {0}), Error);
}

}  // namespace
}  // namespace drt::ps

namespace drt::ps {
namespace {

TEST(PsMemory, CountsParamsGradientsAndSlots) {
  optim::OptimizerConfig momentum;  // sgd with momentum 0.9: one slot
  ExchangeConfig sum, slots, bf16;
  slots.deterministic = true;
  bf16.wire = Wire::kBf16;
  EXPECT_EQ(ps_memory_bytes(1000, 2, sum, momentum), 4u * 1000 * 3);
  EXPECT_EQ(ps_memory_bytes(1000, 2, slots, momentum), 4u * 1000 * 4);  // two gradient slots
  // float32 master + momentum, a bf16 copy and two bf16 slots
  EXPECT_EQ(ps_memory_bytes(1000, 2, bf16, momentum), 4u * 1000 * 2 + 2u * 1000 * 3);
  optim::OptimizerConfig adam;
  adam.kind = optim::OptimizerKind::kAdam;
  EXPECT_EQ(ps_memory_bytes(1000, 3, sum, adam), 4u * 1000 * 4);
  const std::string text = describe_ps_memory(ShardPlan::balanced(3000, 2), 3, ExchangeConfig{}, adam);
  // Shards of 1504 and 1496 elements (boundary aligned to 16), 16 bytes each.
  EXPECT_NE(text.find("PS 0 23.50 KiB, PS 1 23.38 KiB"), std::string::npos) << text;
}

}  // namespace
}  // namespace drt::ps
