// MpiSession: initialises MPI for the process (asking for MPI_THREAD_SERIALIZED: a worker's
// exchange thread, --overlap, calls MPI while the training loop does not, never both at once)
// and finalises it only if it initialised it: after a barrier of all ranks, MPI_Finalize with a
// grace time, or, with MPICH 4.0/4.1 ch4:ucx whose MPI_Finalize deadlocks between nodes, the
// process manager's PMI finalize and an exit (see the destructor). Sets MPI_ERRORS_RETURN on
// MPI_COMM_WORLD and MPI_COMM_SELF so DRT_MPI_CHECK sees errors, and records the world rank for
// log tags.
// run_mpi_main is the body of every drtrain executable: it maps errors to exits (see below).
#pragma once

#include <functional>
#include <string>

namespace drt::comm {

class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  // The status the process exits with where it leaves without MPI_Finalize (see the destructor).
  void set_exit_status(int status) { exit_status_ = status; }

  // How long MPI_Finalize may take before the process leaves without it.
  static constexpr int kFinalizeGraceSeconds = 10;

 private:
  bool initialised_here_ = false;
  bool skip_finalize_ = false;  // finalize_deadlocks(this library)
  int world_rank_ = 0;
  int world_size_ = 1;
  int exit_status_ = 0;
};

// Whether MPI_Finalize of the library that reports `library_version` (MPI_Get_library_version)
// deadlocks between nodes: MPICH 4.0 and 4.1 with the ch4:ucx device (see the destructor). A pure
// function, for tests.
bool finalize_deadlocks(const std::string& library_version);

// Runs `body` inside an MpiSession and turns what escapes it into an exit:
//  - ConfigError (thrown by every rank alike): rank 0 prints "<program>: error: ...", every rank
//    finalises MPI and returns 2; no abort, no hang.
//  - any other exception (one rank may be alone): the rank prints it with its rank tag and calls
//    MPI_Abort, because its peers may be blocked waiting for it.
int run_mpi_main(int argc, char** argv, const char* program, const std::function<int(MpiSession&, int, char**)>& body);

}  // namespace drt::comm
