// Shard plan invariants: covers [0, total) exactly, contiguous and ordered (balanced) or in
// round-robin spans (striped), balanced, the same every time, serialisable; split(), owner_of()
// and spans() agree with each other.
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
  ASSERT_EQ(plan.boundaries().size(), static_cast<std::size_t>(shards) + 1);
  std::size_t smallest = total, largest = 0, covered = 0;
  for (int p = 0; p < shards; ++p) {
    const std::vector<ShardSpan> spans = plan.spans(p);
    ASSERT_LE(spans.size(), 1u);  // one contiguous range (none when empty)
    const std::size_t size = spans.empty() ? 0 : spans[0].size();
    EXPECT_EQ(plan.shard_size(p), size);
    if (!spans.empty()) {
      EXPECT_EQ(spans[0].begin, plan.boundaries()[static_cast<std::size_t>(p)]);  // in order: no gap, no overlap
      EXPECT_EQ(spans[0].local, 0u);
    }
    covered += size;
    smallest = std::min(smallest, size);
    largest = std::max(largest, size);
  }
  EXPECT_EQ(covered, total);
  EXPECT_EQ(largest, plan.largest_shard());
  const bool aligned = total / static_cast<std::size_t>(shards) >= 1024;
  if (aligned) {
    EXPECT_LE(largest - smallest, 2 * ShardPlan::kAlignElems + 1);
    for (int p = 1; p < shards; ++p)
      EXPECT_EQ(plan.boundaries()[static_cast<std::size_t>(p)] % ShardPlan::kAlignElems, 0u);
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
  for (int p = 0; p < 8; ++p) empty += plan.shard_size(p) == 0;
  EXPECT_EQ(empty, 5);
  for (std::size_t e = 0; e < 3; ++e) {
    const std::vector<ShardSpan> spans = plan.spans(plan.owner_of(e));
    ASSERT_EQ(spans.size(), 1u);
    EXPECT_TRUE(spans[0].begin <= e && e < spans[0].end) << "element " << e;
  }
}

// Every element of [0, total) is in exactly one span of exactly one shard, at the local index
// split() reports, and the spans of a shard are back to back in its buffer.
void expect_consistent(const ShardPlan& plan) {
  SCOPED_TRACE(plan.to_text());
  const std::size_t total = plan.total();
  std::vector<int> owner(total, -1);
  std::vector<std::size_t> local(total, 0);
  for (int p = 0; p < plan.num_shards(); ++p) {
    std::size_t next = 0;
    for (const ShardSpan& s : plan.spans(p)) {
      ASSERT_GT(s.size(), 0u);
      EXPECT_EQ(s.local, next);
      next += s.size();
      for (std::size_t g = s.begin; g < s.end; ++g) {
        ASSERT_EQ(owner[g], -1) << "element " << g << " in two spans";
        owner[g] = p;
        local[g] = s.local + (g - s.begin);
      }
    }
    EXPECT_EQ(next, plan.shard_size(p));
  }
  for (std::size_t g = 0; g < total; ++g) {
    ASSERT_NE(owner[g], -1) << "element " << g << " in no span";
    ASSERT_EQ(plan.owner_of(g), owner[g]) << "element " << g;
  }
  std::mt19937_64 rng(total);
  for (int trial = 0; trial < 100 && total > 0; ++trial) {
    const std::size_t a = rng() % total, b = rng() % (total + 1);
    const std::size_t offset = std::min(a, b), count = std::max(a, b) - offset;
    std::size_t next = offset;
    for (const ShardPiece& piece : plan.split(offset, count)) {
      ASSERT_EQ(piece.begin, next);
      ASSERT_GT(piece.count, 0u);
      for (std::size_t g = piece.begin; g < piece.begin + piece.count; ++g) {
        ASSERT_EQ(owner[g], piece.shard) << "element " << g;
        ASSERT_EQ(local[g], piece.local + (g - piece.begin)) << "element " << g;
      }
      next += piece.count;
    }
    EXPECT_EQ(next, offset + count);
  }
}

TEST(ShardPlan, StripedDealsSpansRoundRobin) {
  const ShardPlan plan = ShardPlan::striped(10, 2, 3);  // spans [0,3) [3,6) [6,9) [9,10)
  EXPECT_EQ(plan.boundaries(), (std::vector<std::size_t>{0, 3, 6, 9, 10}));
  EXPECT_EQ(plan.shard_size(0), 6u);
  EXPECT_EQ(plan.shard_size(1), 4u);
  const std::vector<ShardSpan> ps1 = plan.spans(1);
  ASSERT_EQ(ps1.size(), 2u);
  EXPECT_EQ(ps1[1].begin, 9u);
  EXPECT_EQ(ps1[1].local, 3u);
  const std::vector<ShardPiece> pieces = plan.split(2, 6);  // [2,3) PS 0, [3,6) PS 1, [6,8) PS 0
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[2].shard, 0);
  EXPECT_EQ(pieces[2].local, 3u);
  EXPECT_EQ(plan.largest_shard(), 6u);
  for (std::size_t total : {0, 1, 5, 1000, 100003})
    for (int shards : {1, 2, 3, 7})
      for (std::size_t stripe : {1, 16, 1024, 200000}) {
        const ShardPlan s = ShardPlan::striped(total, shards, stripe);
        EXPECT_EQ(s.num_shards(), shards);
        EXPECT_EQ(s.total(), total);
        expect_consistent(s);
        EXPECT_EQ(ShardPlan::from_text(s.to_text()).boundaries(), s.boundaries());
        EXPECT_EQ(ShardPlan::from_boundaries(s.boundaries(), shards).boundaries(), s.boundaries());
        std::size_t smallest = total, largest = 0;
        for (int p = 0; p < shards; ++p) {
          smallest = std::min(smallest, s.shard_size(p));
          largest = std::max(largest, s.shard_size(p));
        }
        EXPECT_LE(largest - smallest, stripe);  // dealt round-robin: at most one span apart
      }
  for (std::size_t total : {0, 3, 1000, 100003})
    for (int shards : {1, 2, 3, 8}) expect_consistent(ShardPlan::balanced(total, shards));
}

// What the job uses: spans of one block (one shard's block is one contiguous range of the flat
// space), no larger than a balanced shard (a small model still reaches every PS).
TEST(ShardPlan, ExchangeConfigStripesByBlock) {
  ExchangeConfig config;
  EXPECT_EQ(config.shard_plan_for(1000000, 2, 1).stripe(), 0u);  // contiguous by default
  config.plan = PlanKind::kStriped;
  EXPECT_EQ(config.shard_plan_for(1u << 24, 2, 1).stripe(), (1u << 20) / 4);    // 1 MiB blocks on one node
  EXPECT_EQ(config.shard_plan_for(1u << 24, 2, 3).stripe(), (128u << 10) / 4);  // 128 KiB across nodes
  const ShardPlan small = config.shard_plan_for(1000, 3, 1);
  EXPECT_EQ(small.stripe(), 336u);  // ceil(1000 / 3) rounded up to 16
  for (int p = 0; p < 3; ++p) EXPECT_GT(small.shard_size(p), 0u);
  EXPECT_EQ(config.shard_plan_for(1000, 1, 1).stripe(), 0u);  // one PS: nothing to stripe
  // A model of 2^30 floats across nodes: 32768-element blocks would make 32768 spans; the stripe
  // widens to whole blocks so that there are at most kMaxStripedSpans (a checkpoint header
  // holds their boundaries).
  const ShardPlan big = config.shard_plan_for(std::size_t{1} << 30, 4, 2);
  EXPECT_EQ(big.stripe() % ((128u << 10) / 4), 0u);
  EXPECT_LE(big.boundaries().size() - 1, ShardPlan::kMaxStripedSpans);
  EXPECT_EQ(big.boundaries().size() - 1, ShardPlan::kMaxStripedSpans);  // 2^30 / 2^20 exactly
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
  const std::string striped = ShardPlan::striped(layout.total(), 2, 1024).describe(layout);
  EXPECT_NE(striped.find("striped in spans of 4.00 KiB"), std::string::npos) << striped;
  EXPECT_NE(striped.find("PS 0: 489 spans"), std::string::npos) << striped;
  EXPECT_NE(striped.find("huge.weight(50%)"), std::string::npos) << striped;
}

TEST(ShardPlan, RejectsBadInput) {
  EXPECT_THROW(ShardPlan::balanced(10, 0), ConfigError);
  EXPECT_THROW(ShardPlan::from_boundaries({0, 5, 3}), ConfigError);
  EXPECT_THROW(ShardPlan::from_boundaries({1, 5}), ConfigError);
  EXPECT_THROW(ShardPlan::from_text("shard-plan v1 P=2 total=10 : 0 5"), ConfigError);
  EXPECT_THROW(ShardPlan::from_text("shard-plan v2 P=1 total=10 : 0 10"), ConfigError);
  EXPECT_THROW(ShardPlan::from_text("nonsense"), ConfigError);
  EXPECT_THROW(ShardPlan::from_text("shard-plan v2 P=2 total=10 stripe=0"), ConfigError);
  EXPECT_THROW(ShardPlan::from_text("shard-plan v2 P=2 total=10 stripe=4 5"), ConfigError);
  EXPECT_THROW(ShardPlan::striped(10, 0, 4), ConfigError);
  EXPECT_THROW(ShardPlan::from_boundaries({0, 5, 10}, 3), ConfigError);  // fewer spans than shards
  EXPECT_THROW(parse_plan_kind("stripes"), ConfigError);
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
