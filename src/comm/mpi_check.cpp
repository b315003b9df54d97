#include "drtrain/comm/mpi_check.hpp"

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::comm {
namespace {

// What a user can do about an error of this class.
const char* advice_for(int error_class) {
  switch (error_class) {
    case MPI_ERR_NO_MEM:
      return "the rank ran out of memory: add PS ranks (--num-ps) so each shard is smaller, "
             "use a smaller model, or give the job more memory per rank";
    case MPI_ERR_WIN:
    case MPI_ERR_BASE:
    case MPI_ERR_SIZE:
    case MPI_ERR_DISP:
    case MPI_ERR_LOCKTYPE:
    case MPI_ERR_ASSERT:
    case MPI_ERR_RMA_CONFLICT:
    case MPI_ERR_RMA_SYNC:
    case MPI_ERR_RMA_RANGE:
    case MPI_ERR_RMA_ATTACH:
    case MPI_ERR_RMA_SHARED:
      return "one-sided communication failed: the MPI library has no working RMA component for "
             "this layout. Open MPI across nodes: pass OMPI_MCA_osc=pt2pt (Ethernet, Open MPI 4), "
             "OMPI_MCA_osc=ucx (InfiniBand/RoCE with UCX) or OMPI_MCA_osc=rdma (Open MPI 5) to every "
             "rank (mpirun -x OMPI_MCA_osc); `ompi_info | grep osc` lists what is installed. See "
             "README, 'Running across nodes'";
    case MPI_ERR_TRUNCATE:
    case MPI_ERR_COUNT:
    case MPI_ERR_TYPE:
      return "ranks disagree on a message size: start every rank with the same command line, "
             "configuration file and data";
    default:
      return "if another rank died or was killed, its own message above names the cause; "
             "otherwise rerun with DRT_LOG_LEVEL=debug and report the command line";
  }
}

}  // namespace

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return str("MPI error code ", code);
  return std::string(text, static_cast<std::size_t>(length));
}

void check_mpi(int rc, const char* call, const char* file, int line) {
  if (rc == MPI_SUCCESS) return;
  int error_class = rc;
  MPI_Error_class(rc, &error_class);
  throw Error(str(rank_tag(), ": ", call, " failed at ", file, ":", line, ": ", mpi_error_string(rc),
                  ". What to do: ", advice_for(error_class), "."));
}

}  // namespace drt::comm
