// main() for GoogleTest programs run under mpiexec. An exception that escapes a test on one rank
// would leave the others blocked in a collective, so exceptions are not caught by GoogleTest:
// the terminate handler prints them and aborts the whole job at once. Rank 0 prints GoogleTest's
// progress, the other ranks only their own failures; verdicts are reduced across ranks
// (support/mpi_test.hpp).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <exception>

#include "drtrain/comm/mpi_session.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/stop_signals.hpp"
#include "support/mpi_test.hpp"

namespace {

[[noreturn]] void abort_job() {
  try {
    if (auto e = std::current_exception()) std::rethrow_exception(e);
    std::fprintf(stderr, "%s: std::terminate without an exception\n", drt::rank_tag().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: uncaught exception: %s\n", drt::rank_tag().c_str(), e.what());
  } catch (...) {
    std::fprintf(stderr, "%s: uncaught non-standard exception\n", drt::rank_tag().c_str());
  }
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::abort();
}

// Ranks other than 0 print only their failures, tagged with the rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[%s] %s:%d: failure\n%s\n", drt::rank_tag().c_str(),
                 result.file_name() ? result.file_name() : "?", result.line_number(), result.summary());
  }
};

}  // namespace

int main(int argc, char** argv) {
  drt::prepare_stop_signals();  // as drtrain does: before MPI starts its threads
  drt::comm::MpiSession session(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  drt::testing::set_program_arguments(argc, argv);
  ::testing::GTEST_FLAG(catch_exceptions) = false;
  std::set_terminate(abort_job);
  if (session.world_rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter);
  }
  int failed = RUN_ALL_TESTS();
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return failed;
}
