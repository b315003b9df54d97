// The one-sided component choice made before MPI_Init (comm/rma_component.hpp): a pure function
// of Open MPI's major version and its configured "osc" list. No MPI is initialised here.
#include <gtest/gtest.h>

#include "drtrain/comm/rma_component.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::comm {
namespace {

TEST(RmaComponent, DebiansListGetsPt2ptAdded) {
  EXPECT_EQ(osc_override(4, "^ucx,pt2pt"), "sm,rdma,pt2pt");
  EXPECT_EQ(osc_override(4, "^ pt2pt , ucx"), "sm,rdma,pt2pt");  // blanks and order do not matter
}

TEST(RmaComponent, IncludeListsWithoutANetworkComponentGetPt2pt) {
  EXPECT_EQ(osc_override(4, "sm,rdma"), "sm,rdma,pt2pt");
  EXPECT_EQ(osc_override(4, "sm"), "sm,pt2pt");
}

TEST(RmaComponent, WorkingConfigurationsAreLeftAlone) {
  EXPECT_EQ(osc_override(4, ""), "");  // every component allowed
  EXPECT_EQ(osc_override(4, "^ucx"), "");
  EXPECT_EQ(osc_override(4, "^pt2pt"), "");
  EXPECT_EQ(osc_override(4, "ucx"), "");
  EXPECT_EQ(osc_override(4, "sm,pt2pt"), "");
}

TEST(RmaComponent, OnlyOpenMpi4) {
  EXPECT_EQ(osc_override(5, "^ucx,pt2pt"), "");  // no pt2pt in Open MPI 5; its rdma runs over TCP
  EXPECT_EQ(osc_override(0, "^ucx,pt2pt"), "");
}

TEST(Strings, SplitListDropsBlanksAndEmptyItems) {
  EXPECT_EQ(split_list("a, b,,c ", ','), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(split_list("", ',').empty());
  EXPECT_EQ(split_list("16", ','), (std::vector<std::string>{"16"}));
}

}  // namespace
}  // namespace drt::comm
