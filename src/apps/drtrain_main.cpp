// drtrain: the training program. mpirun -n N drtrain [options]; see --help.
#include "drtrain/backend/blas_kernels.hpp"
#include "drtrain/comm/mpi_session.hpp"
#include "drtrain/core/stop_signals.hpp"
#include "drtrain/train/preflight.hpp"
#include "drtrain/train/trainer.hpp"

int main(int argc, char** argv) {
  drt::backend::ensure_blas_kernels(argv);  // before MPI_Init: may re-execute the program
  drt::prepare_stop_signals();              // before any other thread: see stop_signals.hpp
  return drt::comm::run_mpi_main(argc, argv, "drtrain", [](drt::comm::MpiSession& session, int n, char** args) {
    const auto config = drt::train::parse_train_config(n, args, session.world_rank() == 0);
    if (!config) return 0;
    return config->check ? drt::train::run_check(*config, session.world_rank(), session.world_size())
                         : drt::train::run_training(*config);
  });
}
