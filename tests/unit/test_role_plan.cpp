// Role planning (which ranks are PS) for single- and multi-node layouts, and its errors.
#include <gtest/gtest.h>

#include "drtrain/comm/topology.hpp"
#include "drtrain/core/error.hpp"

namespace drt::comm {
namespace {

using Ranks = std::vector<int>;

std::string message_of(const std::vector<int>& nodes, int ps, Placement placement) {
  try {
    plan_roles(nodes, ps, placement);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(RolePlan, FirstPlacementTakesLowestRanks) {
  const RolePlan plan = plan_roles({0, 0, 0, 0, 0}, 2, Placement::kFirst);
  EXPECT_EQ(plan.ps_ranks, (Ranks{0, 1}));
  EXPECT_EQ(plan.worker_ranks, (Ranks{2, 3, 4}));
  EXPECT_EQ(plan.role_of_rank[1], Role::kPs);
  EXPECT_EQ(plan.role_of_rank[2], Role::kWorker);
}

TEST(RolePlan, PerNodePutsOnePsOnEachNode) {
  // Three nodes, ranks placed round-robin (as with mpirun --map-by node).
  const RolePlan plan = plan_roles({0, 1, 2, 0, 1, 2, 0, 1, 2}, 3, Placement::kPerNode);
  EXPECT_EQ(plan.ps_ranks, (Ranks{0, 1, 2}));
  EXPECT_EQ(plan.worker_ranks, (Ranks{3, 4, 5, 6, 7, 8}));
  // Blocked mapping: two nodes of four ranks, PS on the first rank of each.
  const RolePlan blocked = plan_roles({0, 0, 0, 0, 1, 1, 1, 1}, 2, Placement::kPerNode);
  EXPECT_EQ(blocked.ps_ranks, (Ranks{0, 4}));
  // Fewer PS than nodes: the first nodes get one.
  EXPECT_EQ(plan_roles({0, 0, 1, 1, 2, 2}, 2, Placement::kPerNode).ps_ranks, (Ranks{0, 2}));
}

TEST(RolePlan, BadLayoutsNameTheProblemAndTheFix) {
  EXPECT_NE(message_of({0, 0, 0}, 3, Placement::kFirst).find("--num-ps 3 leaves no worker"), std::string::npos);
  EXPECT_NE(message_of({0, 0, 0}, 3, Placement::kFirst).find("pass --num-ps 2 or fewer"), std::string::npos);
  EXPECT_NE(message_of({0, 0, 0}, 0, Placement::kFirst).find("at least 1"), std::string::npos);
  EXPECT_NE(message_of({0, 0, 0, 0}, 2, Placement::kPerNode).find("spans 1 node"), std::string::npos);
  EXPECT_NE(message_of({0}, 1, Placement::kPerNode).find("the job has 1 rank"), std::string::npos);
  EXPECT_NE(message_of({0}, 1, Placement::kFirst).find("--expect-ranks"), std::string::npos);
}

TEST(RolePlan, ParsesPlacementNames) {
  EXPECT_EQ(parse_placement("first"), Placement::kFirst);
  EXPECT_EQ(parse_placement("per-node"), Placement::kPerNode);
  try {
    parse_placement("diagonal");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("choices: first, per-node"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace drt::comm
