// MpiSession: initialises MPI for the process (asking for MPI_THREAD_SERIALIZED: a worker's
// exchange thread, --overlap, calls MPI while the training loop does not, never both at once)
// and finalises it only if it initialised it. Sets MPI_ERRORS_RETURN on MPI_COMM_WORLD and
// MPI_COMM_SELF so DRT_MPI_CHECK sees errors, and records the world rank for log tags.
// run_mpi_main is the body of every drtrain executable: it maps errors to exits (see below).
#pragma once

#include <functional>

namespace drt::comm {

class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  // The status the process exits with if MPI_Finalize hangs (see the destructor).
  void set_exit_status(int status) { exit_status_ = status; }

  // How long MPI_Finalize may take before the process leaves without it.
  static constexpr int kFinalizeGraceSeconds = 10;

 private:
  bool initialised_here_ = false;
  int world_rank_ = 0;
  int world_size_ = 1;
  int exit_status_ = 0;
};

// Runs `body` inside an MpiSession and turns what escapes it into an exit:
//  - ConfigError (thrown by every rank alike): rank 0 prints "<program>: error: ...", every rank
//    finalises MPI and returns 2; no abort, no hang.
//  - any other exception (one rank may be alone): the rank prints it with its rank tag and calls
//    MPI_Abort, because its peers may be blocked waiting for it.
int run_mpi_main(int argc, char** argv, const char* program,
                 const std::function<int(MpiSession&, int, char**)>& body);

}  // namespace drt::comm
