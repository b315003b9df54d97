# DRT_SMPI=ON: drt_bench_exchange alone, compiled with SimGrid's smpicxx so that its ranks run in
# SMPI's simulated network (docs/SIMULATION.md). No CUDA, HDF5, BLAS, tests or programs: only the
# parts the bench links (core, optim, comm, ps and the CLI option parser), from the shipped sources,
# with DRT_SMPI=1 for the few guarded differences (clock, MPI_T, MPI_WIN_MODEL, finalize grace,
# memory folding: core/smpi_folding.hpp).
# Configure: SMPI_PRETEND_CC=1 cmake -S . -B build-smpi -DCMAKE_CXX_COMPILER=smpicxx
#            -DCMAKE_C_COMPILER=smpicc -DDRT_SMPI=ON
find_program(DRT_SMPIRUN smpirun)
if(NOT CMAKE_CXX_COMPILER MATCHES "smpicxx" OR NOT DRT_SMPIRUN)
  message(FATAL_ERROR "DRT_SMPI=ON needs SimGrid's compilers: apt-get install libsimgrid-dev, then configure "
                      "a fresh build directory with SMPI_PRETEND_CC=1 cmake -DCMAKE_CXX_COMPILER=smpicxx "
                      "-DCMAKE_C_COMPILER=smpicc -DDRT_SMPI=ON")
endif()
find_package(Threads REQUIRED)
find_package(Boost 1.71 REQUIRED COMPONENTS program_options)

add_library(drt_flags INTERFACE)
target_compile_features(drt_flags INTERFACE cxx_std_17)
target_compile_definitions(drt_flags INTERFACE DRT_SMPI=1)
target_compile_options(drt_flags INTERFACE -Wall -Wextra $<$<BOOL:${DRT_WARNINGS_AS_ERRORS}>:-Werror>)
target_include_directories(drt_flags INTERFACE ${PROJECT_SOURCE_DIR}/include)

set(_drt_src ${PROJECT_SOURCE_DIR}/src)
add_library(drt_smpi_parts STATIC
  ${_drt_src}/core/error.cpp ${_drt_src}/core/json_line.cpp ${_drt_src}/core/log.cpp
  ${_drt_src}/core/param_layout.cpp ${_drt_src}/core/smpi_folding.cpp ${_drt_src}/core/stop_signals.cpp
  ${_drt_src}/core/strings.cpp
  ${PROJECT_SOURCE_DIR}/kernels/reference.cpp
  ${_drt_src}/optim/lr_schedule.cpp ${_drt_src}/optim/optimizer.cpp ${_drt_src}/optim/sgd.cpp
  ${_drt_src}/optim/adam.cpp
  ${_drt_src}/comm/agreement.cpp ${_drt_src}/comm/comm.cpp ${_drt_src}/comm/liveness.cpp
  ${_drt_src}/comm/mpi_check.cpp ${_drt_src}/comm/progress.cpp ${_drt_src}/comm/rma_component.cpp
  ${_drt_src}/comm/mpi_session.cpp ${_drt_src}/comm/poll.cpp ${_drt_src}/comm/topology.cpp
  ${_drt_src}/comm/watchdog.cpp ${_drt_src}/comm/window.cpp
  ${_drt_src}/ps/control_channel.cpp ${_drt_src}/ps/exchange_config.cpp ${_drt_src}/ps/fence_protocol.cpp
  ${_drt_src}/ps/passive_protocol.cpp ${_drt_src}/ps/relaxed_server.cpp ${_drt_src}/ps/server.cpp
  ${_drt_src}/ps/shard_plan.cpp ${_drt_src}/plan/exchange_model.cpp ${_drt_src}/ps/shard_window.cpp ${_drt_src}/ps/protocol.cpp
  ${_drt_src}/ps/worker_exchange.cpp
  ${_drt_src}/train/cli_options.cpp)
target_include_directories(drt_smpi_parts PRIVATE ${_drt_src})
# As in the normal build: the reference kernels compute bitwise what the other clones compute.
set_source_files_properties(${PROJECT_SOURCE_DIR}/kernels/reference.cpp PROPERTIES
  COMPILE_OPTIONS "-fno-math-errno;-ffp-contract=off")
target_link_libraries(drt_smpi_parts PUBLIC drt_flags Threads::Threads Boost::program_options)

add_executable(drt_bench_exchange ${PROJECT_SOURCE_DIR}/bench/exchange_bench.cpp)
target_link_libraries(drt_bench_exchange PRIVATE drt_smpi_parts)

# CI: 8 simulated nodes (seconds): the bench's exactness check, and the allreduce on its ring floor.
enable_testing()
find_package(Python3 REQUIRED COMPONENTS Interpreter)
add_test(NAME smpi.exchange8
         COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/smpi/check_exchange.py
                 ${PROJECT_SOURCE_DIR}/bench/smpi_exchange.sh ${PROJECT_BINARY_DIR})
set_tests_properties(smpi.exchange8 PROPERTIES TIMEOUT 300)
