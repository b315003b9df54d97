// Which MPI libraries MpiSession leaves without MPI_Finalize (comm/mpi_session.hpp): a pure
// function of the MPI_Get_library_version text. No MPI is initialised here.
#include <gtest/gtest.h>

#include "drtrain/comm/mpi_session.hpp"

namespace drt::comm {
namespace {

std::string mpich(const std::string& version, const std::string& device) {
  return "MPICH Version:\t" + version + "\nMPICH Release date:\tThu Apr  7 12:34:45 CDT 2022\nMPICH ABI:\t14:2:2\n" +
         "MPICH Device:\t" + device + "\nMPICH configure:\t--with-device=" + device + "\n";
}

TEST(MpiSession, Mpich40And41WithUcxSkipFinalize) {
  EXPECT_TRUE(finalize_deadlocks(mpich("4.0.2", "ch4:ucx")));  // Debian 12
  EXPECT_TRUE(finalize_deadlocks(mpich("4.0", "ch4:ucx")));
  EXPECT_TRUE(finalize_deadlocks(mpich("4.1.2", "ch4:ucx")));
}

TEST(MpiSession, FixedOrOtherDevicesAndLibrariesFinalize) {
  EXPECT_FALSE(finalize_deadlocks(mpich("4.2.0", "ch4:ucx")));  // the barrier was removed in 4.2
  EXPECT_FALSE(finalize_deadlocks(mpich("4.10.1", "ch4:ucx")));
  EXPECT_FALSE(finalize_deadlocks(mpich("3.4.3", "ch4:ucx")));
  EXPECT_FALSE(finalize_deadlocks(mpich("4.0.2", "ch4:ofi")));
  EXPECT_FALSE(finalize_deadlocks(mpich("4.1.2", "ch3:nemesis")));
  EXPECT_FALSE(finalize_deadlocks("Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4"));
  EXPECT_FALSE(finalize_deadlocks(""));
}

}  // namespace
}  // namespace drt::comm
