# Third-party dependencies, all from Debian packages (scripts/install_deps.sh installs them).
set(MPI_CXX_SKIP_MPICXX ON)  # the C API only, not the deprecated C++ bindings
find_package(MPI 3.0 REQUIRED COMPONENTS CXX)

set(HDF5_PREFER_PARALLEL ON)
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR "drtrain needs the parallel (MPI) build of HDF5; "
                      "on Debian: apt-get install libhdf5-openmpi-dev")
endif()

find_package(Boost 1.71 REQUIRED COMPONENTS program_options)

set(BLA_VENDOR OpenBLAS)
find_package(BLAS REQUIRED)
find_path(DRT_CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas x86_64-linux-gnu/openblas-pthread
          REQUIRED)

find_package(ZLIB REQUIRED)
find_package(Threads REQUIRED)
