#include "drtrain/comm/mpi_session.hpp"

#include <mpi.h>
#include <sys/prctl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <exception>
#include <optional>

#include "drtrain/comm/mpi_check.hpp"
#include "drtrain/comm/rma_component.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::comm {

MpiSession::MpiSession(int* argc, char*** argv) {
  int already = 0;
  DRT_MPI_CHECK(MPI_Initialized(&already));
  if (!already) {
    choose_rma_component();  // before MPI_Init: Open MPI reads OMPI_MCA_osc there
    int provided = MPI_THREAD_SINGLE;
    DRT_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided));
    initialised_here_ = true;
  }
  DRT_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  DRT_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
  DRT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));
  DRT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));
  set_process_rank(world_rank_);
  // Waiting ranks nap in short sleeps (comm/poll.hpp); the default 50 us timer slack would
  // stretch each nap, so ask for precise wake-ups.
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!initialised_here_ || finalized) return;
  // MPICH up to 4.1 with UCX over a network that needs the peer's progress (TCP) can hang in
  // MPI_Finalize: a rank that has closed its endpoints waits in a PMI barrier and no longer
  // progresses the endpoints its peers are still closing (pmodels/mpich#6596, fixed in 4.2;
  // Debian 12 ships 4.0.2). Everything the job produced is complete by now, so a rank that is
  // still inside MPI_Finalize after kFinalizeGraceSeconds leaves with its exit status.
  std::thread([status = exit_status_] {
    std::this_thread::sleep_for(std::chrono::seconds(kFinalizeGraceSeconds));
    std::fprintf(stderr, "%s: MPI_Finalize did not return within %d s (a known MPICH 4.0/UCX issue, "
                 "pmodels/mpich#6596); leaving with status %d\n", rank_tag().c_str(), kFinalizeGraceSeconds, status);
    std::fflush(stderr);
    std::_Exit(status);
  }).detach();
  MPI_Finalize();
}

int run_mpi_main(int argc, char** argv, const char* program,
                 const std::function<int(MpiSession&, int, char**)>& body) {
  // The session lives outside the try: after a failure it must still be there to MPI_Abort, not
  // finalise (MPI_Finalize waits for peers that may be dead, stopped or blocked on this rank).
  std::optional<MpiSession> session;
  try {
    session.emplace(&argc, &argv);
    const int status = body(*session, argc, argv);
    session->set_exit_status(status);
    return status;
  } catch (const ConfigError& e) {
    if (!session || session->world_rank() == 0) std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    if (session) session->set_exit_status(2);
    return 2;  // every rank alike: finalise normally
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: fatal error on %s: %s\n", program, rank_tag().c_str(), e.what());
  } catch (...) {
    std::fprintf(stderr, "%s: fatal error on %s: unknown exception\n", program, rank_tag().c_str());
  }
  std::fflush(stderr);
  int initialised = 0, finalized = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalized);
  if (initialised && !finalized) {
    // The launcher tears the job down at the abort; give it a moment to forward the message
    // first (MPICH's Hydra lost it now and then in tests: hang.stopped_worker).
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return 1;
}

}  // namespace drt::comm
