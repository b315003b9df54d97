#include "drtrain/comm/mpi_session.hpp"

#include <mpi.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <thread>

#include "drtrain/comm/mpi_check.hpp"
#include "drtrain/comm/rma_component.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::comm {

bool finalize_deadlocks(const std::string& library_version) {
  const std::string key = "MPICH Version:";
  const std::size_t at = library_version.find(key);
  if (at == std::string::npos || library_version.find("ch4:ucx") == std::string::npos) return false;
  const char* number = library_version.c_str() + at + key.size();
  while (*number == ' ' || *number == '\t') ++number;
  char* end = nullptr;
  const long major = std::strtol(number, &end, 10);
  const long minor = (end && *end == '.') ? std::strtol(end + 1, nullptr, 10) : -1;
  return major == 4 && (minor == 0 || minor == 1);
}

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
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = "";
  int length = 0;
  if (MPI_Get_library_version(version, &length) == MPI_SUCCESS) skip_finalize_ = finalize_deadlocks(version);
  // Waiting ranks nap in short sleeps (comm/poll.hpp); the default 50 us timer slack would
  // stretch each nap, so ask for precise wake-ups.
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
}

namespace {

// What MPICH's PMI_Finalize tells the process manager, in the PMI-1 wire protocol that MPICH's
// built-in PMI client speaks over the socket named by PMI_FD (Hydra's proxy; Slurm's pmi2 plugin
// answers it too): "cmd=finalize", answered by "cmd=finalize_ack". A rank that leaves without it
// counts as crashed: Hydra kills the job. true when the process manager acknowledged.
bool pmi_finalize() {
  const char* fd_text = std::getenv("PMI_FD");
  if (!fd_text) return false;
  const int fd = std::atoi(fd_text);
  const std::string request = "cmd=finalize\n";
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) return false;
  std::string reply;
  char c = 0;
  while (read(fd, &c, 1) == 1 && c != '\n') reply += c;
  return reply.rfind("cmd=finalize_ack", 0) == 0;
}

}  // namespace

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!initialised_here_ || finalized) return;
  // Every rank is done here (and alive: a failed rank aborts the job, see run_mpi_main), but some
  // may have got here long before the rest (the PS while the chief evaluates): meet first, so the
  // grace below counts from the moment the last rank arrived.
  MPI_Barrier(MPI_COMM_WORLD);
  std::fflush(nullptr);
  // MPI_Finalize may still hang in a library bug; everything the job produced is complete by now,
  // so a rank still here after kFinalizeGraceSeconds leaves with its exit status.
#if !DRT_SMPI  // under SMPI every rank is a thread of one simulator: _Exit would end them all
  std::thread([status = exit_status_] {
    std::this_thread::sleep_for(std::chrono::seconds(kFinalizeGraceSeconds));
    std::fprintf(stderr, "%s: MPI_Finalize did not return within %d s; leaving with status %d\n", rank_tag().c_str(),
                 kFinalizeGraceSeconds, status);
    std::fflush(stderr);
    std::_Exit(status);
  }).detach();
#endif
  if (skip_finalize_ && std::getenv("PMI_FD")) {
    // MPICH 4.0 and 4.1 with ch4:ucx deadlock in MPI_Finalize between nodes: each rank closes its
    // UCX endpoints, and a close that still needs the peer (over TCP it does, at times) waits for
    // ever once that peer has finished its own and sits in the PMI barrier that follows, where it
    // progresses nothing (pmodels/mpich#6596, fixed in 4.2 by dropping that barrier; Debian 12
    // ships 4.0.2). Measured on the emulated cluster: a program that calls MPI_Allreduce once and
    // reaches MPI_Finalize 300 ms apart hangs every time; with an MPI_Barrier just before it, 6
    // times in 10. So these ranks skip the endpoint teardown: after the barrier above (every rank
    // is done with every peer; windows and files are closed) they send the process manager what
    // MPI_Finalize would send last and exit with the job's status (10 runs in 10 clean, all
    // output kept; leaving without telling it made Hydra kill the job as crashed).
    if (pmi_finalize()) std::_Exit(exit_status_);
    std::fprintf(stderr, "%s: the process manager did not acknowledge PMI finalize; leaving with status %d\n",
                 rank_tag().c_str(), exit_status_);
    std::fflush(stderr);
    std::_Exit(exit_status_);
  }
  MPI_Finalize();
}

int run_mpi_main(int argc, char** argv, const char* program, const std::function<int(MpiSession&, int, char**)>& body) {
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
