// The exchange model (plan/exchange_model): its floors against hand-computed byte counts (and the
// figures drt_bench_exchange printed for the same layouts), and each term binding where it should.
// How close it comes to measured times is plan.calibration's job (tests/plan/check_calibration.py).
#include <gtest/gtest.h>

#include "drtrain/plan/exchange_model.hpp"
#include "drtrain/plan/testbeds.hpp"

namespace drt::plan {
namespace {

constexpr std::size_t kMiB = std::size_t{1024} * 1024;
constexpr std::size_t k16MiBFloats = 16 * kMiB / 4;
constexpr std::size_t kBlock = std::size_t{128} * 1024;

Costs no_software() {
  Costs c;
  c.rma_op_us = 0;
  c.ctrl_message_us = 0;
  c.apply_gbs = 1e9;
  c.fence_rounds = 0;
  return c;
}

Network ideal(double gbit) {
  Network n;
  n.gbit = gbit;
  n.latency_us = 0;
  n.leaf_size = 0;
  n.payload_efficiency = 1.0;
  return n;
}

TEST(ExchangeModel, LinkFloorCountsTheBusiestNode) {
  // Dedicated 2 + 2: each PS node takes 2 workers x 8 MiB in and sends as much out: 16 MiB.
  EXPECT_NEAR(link_floor_s(Placement::dedicated(2, 2), k16MiBFloats, 1.0), 16.0 * kMiB * 8 / 1e9, 1e-9);
  // 4 + 4: 4 workers x 4 MiB into each PS node, and each worker node sends 16 MiB: 16 MiB again
  // (the bench printed 134.2 ms at 1 Gbit/s for both).
  EXPECT_NEAR(link_floor_s(Placement::dedicated(4, 4), k16MiBFloats, 1.0) * 1e3, 134.2, 0.05);
  // Co-located 4 x (PS + W): node 0's worker pushes 3 x 4 MiB away and its PS serves 3 x 4 MiB: 24 MiB
  // out (the bench printed 201.3 ms).
  EXPECT_NEAR(link_floor_s(Placement::colocated(4, 4), k16MiBFloats, 1.0) * 1e3, 201.3, 0.05);
  // Co-located 2 x 2: 8 + 8 MiB out per node.
  EXPECT_NEAR(link_floor_s(Placement::colocated(2, 2), k16MiBFloats, 1.0) * 1e3, 134.2, 0.05);
}

TEST(ExchangeModel, RingFloorIsTwoGTimesWMinusOneOverW) {
  EXPECT_NEAR(ring_floor_s(4, k16MiBFloats, 1.0), 2.0 * 16 * kMiB * 3 / 4 * 8 / 1e9, 1e-12);
  EXPECT_EQ(ring_floor_s(1, k16MiBFloats, 1.0), 0.0);
  const Prediction ring = predict(Scheme::allreduce, Placement::colocated(4, 1), ideal(1.0), no_software(),
                                  Step{k16MiBFloats, 4.0, kBlock});
  EXPECT_NEAR(ring.total, ring_floor_s(4, k16MiBFloats, 1.0), 1e-12);
}

TEST(ExchangeModel, ShardsAreThePsShardPlans) {
  const auto shards = balanced_shards(1000003, 3);
  ASSERT_EQ(shards.size(), 3u);
  EXPECT_EQ(shards[0] + shards[1] + shards[2], 1000003u);
  EXPECT_LE(std::max({shards[0], shards[1], shards[2]}) - std::min({shards[0], shards[1], shards[2]}), 32u);
}

TEST(ExchangeModel, PassiveOnIdealLinksIsTheLinkFloorPlusOneBlockEachWay) {
  const Step step{k16MiBFloats, 4.0, kBlock};
  const Placement where = Placement::dedicated(4, 4);
  const Prediction p = predict(Scheme::passive, where, ideal(10.0), no_software(), step);
  const double floor = link_floor_s(where, step.floats, 10.0), block = 128.0 * 1024 * 8 / 10e9;
  EXPECT_EQ(p.bound, "link");
  EXPECT_NEAR(p.total, floor + 2 * block, floor * 1e-3);
}

TEST(ExchangeModel, FenceMovesPushAndPullOneAfterTheOther) {
  const Step step{k16MiBFloats, 4.0, kBlock};
  // Dedicated 2 + 2: the push loads the PS nodes' links inward only, the pull outward only, one
  // after the other: twice the floor (which counts both directions at once).
  Placement where = Placement::dedicated(2, 2);
  EXPECT_NEAR(predict(Scheme::fence, where, ideal(1.0), no_software(), step).total,
              2.0 * link_floor_s(where, step.floats, 1.0), 1e-9);
  // Co-located 2 x 2: every node sends 8 MiB and receives 8 MiB in each phase: the floor's 16 MiB.
  where = Placement::colocated(2, 2);
  EXPECT_NEAR(predict(Scheme::fence, where, ideal(1.0), no_software(), step).total,
              link_floor_s(where, step.floats, 1.0), 1e-9);
}

TEST(ExchangeModel, Bf16HalvesTheLinkTerm) {
  const Placement where = Placement::dedicated(2, 6);
  const Prediction fp32 = predict(Scheme::passive, where, ideal(1.0), no_software(), Step{k16MiBFloats, 4.0, 131072});
  const Prediction bf16 = predict(Scheme::passive, where, ideal(1.0), no_software(), Step{k16MiBFloats, 2.0, 131072});
  EXPECT_NEAR(bf16.link, fp32.link / 2, 1e-12);
}

TEST(ExchangeModel, EachTermBindsWhereItShould) {
  Costs costs = no_software();
  // Many workers, small blocks, few PS: the PS' control words.
  costs.ctrl_message_us = 1.0;
  Prediction p =
      predict(Scheme::passive, Placement::dedicated(1, 511), ideal(100.0), costs, Step{k16MiBFloats, 4, 4096});
  EXPECT_EQ(p.bound, "PS control words");
  // An oversubscribed fat tree with the PS on one leaf: the leaf's uplinks.
  Network tree = ideal(25.0);
  tree.leaf_size = 16;
  tree.oversub = 4;
  p = predict(Scheme::passive, Placement::dedicated(16, 48), tree, no_software(), Step{k16MiBFloats, 4, 131072});
  EXPECT_EQ(p.bound, "leaf uplinks");
  // A slow apply on fast links.
  costs = no_software();
  costs.apply_gbs = 0.5;
  p = predict(Scheme::passive, Placement::dedicated(1, 1), ideal(100.0), costs, Step{k16MiBFloats, 4, 131072});
  EXPECT_EQ(p.bound, "apply");
  // A tiny gradient on slow hops: latency.
  Network far = ideal(100.0);
  far.latency_us = 50;
  p = predict(Scheme::passive, Placement::dedicated(2, 2), far, no_software(), Step{1024, 4, 131072});
  EXPECT_EQ(p.bound, "latency");
  // Nodes sharing two cores at 3 ns a byte: the CPU.
  costs = no_software();
  costs.shared_cores = 2;
  costs.tcp_cpu_ns_per_byte = 3;
  p = predict(Scheme::passive, Placement::dedicated(4, 4), ideal(10.0), costs, Step{k16MiBFloats, 4, 131072});
  EXPECT_EQ(p.bound, "CPU");
}

TEST(ExchangeModel, MorePsRelieveTheIncast) {
  const Step step{4 * k16MiBFloats, 4.0, 131072};
  double last = 1e30;
  for (int ps : {1, 2, 4, 8, 16}) {
    const double t = predict(Scheme::passive, Placement::dedicated(ps, 32), ideal(25.0), no_software(), step).link;
    EXPECT_LT(t, last) << ps;
    last = t;
  }
}

TEST(Testbeds, KnownNamesAndAClearErrorOtherwise) {
  EXPECT_NEAR(testbed("cluster").payload_efficiency, 1448.0 / 1514.0, 1e-12);
  EXPECT_EQ(testbed("smpi").payload_efficiency, 1.0);
  EXPECT_GT(testbed("emulated").costs.shared_cores, 0.0);
  EXPECT_THROW(testbed("cloud"), std::exception);
  EXPECT_FALSE(extrapolation_notes(1024, Network{}, "smpi").empty());
  EXPECT_TRUE(extrapolation_notes(16, Network{}, "smpi").empty());
}

}  // namespace
}  // namespace drt::plan
