# Third-party dependencies, all from Debian packages (scripts/install_deps.sh installs them).
set(MPI_CXX_SKIP_MPICXX ON)  # the C API only, not the deprecated C++ bindings
find_package(MPI 3.0 REQUIRED COMPONENTS CXX)

set(HDF5_PREFER_PARALLEL ON)
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR "drtrain needs the parallel (MPI) build of HDF5; "
                      "on Debian: apt-get install libhdf5-openmpi-dev")
endif()
include(DrtCheckMpiMix)  # HDF5 built against another MPI than the MPI compilers': stop here
drt_check_mpi_mix()
# drt_io links HDF5 through drt_hdf5: HDF5::HDF5 in the build tree; in the installed package
# (drtrain::hdf5) the library files found here, so that a project using the package links the
# very HDF5 checked above (built against drtrain's MPI) without running FindHDF5 itself, which
# would need the C language enabled and could pick another MPI's HDF5. No public header includes
# hdf5.h, so the installed target carries no include directory.
add_library(drt_hdf5 INTERFACE)
target_link_libraries(drt_hdf5 INTERFACE $<BUILD_INTERFACE:HDF5::HDF5>)
foreach(_drt_lib IN LISTS HDF5_LIBRARIES)
  target_link_libraries(drt_hdf5 INTERFACE $<INSTALL_INTERFACE:${_drt_lib}>)
endforeach()

find_package(Boost 1.71 REQUIRED COMPONENTS program_options)

set(BLA_VENDOR OpenBLAS)
find_package(BLAS REQUIRED)
find_path(DRT_CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas x86_64-linux-gnu/openblas-pthread
          REQUIRED)

# oneDNN (Debian: libdnnl-dev) for CPU convolutions; without it drtrain uses im2col + GEMM.
# Found by hand: Debian's dnnl-config.cmake insists on OpenCL, which drtrain does not use.
find_path(DRT_DNNL_INCLUDE_DIR dnnl.hpp)
find_library(DRT_DNNL_LIBRARY dnnl)
set(_drt_dnnl_found OFF)
if(DRT_DNNL_INCLUDE_DIR AND DRT_DNNL_LIBRARY)
  set(_drt_dnnl_found ON)
endif()
option(DRT_ENABLE_ONEDNN "Use oneDNN for CPU convolutions" ${_drt_dnnl_found})
set(DRT_HAVE_ONEDNN 0)
if(DRT_ENABLE_ONEDNN)
  if(NOT _drt_dnnl_found)
    message(FATAL_ERROR "DRT_ENABLE_ONEDNN=ON but oneDNN was not found; apt-get install libdnnl-dev "
                        "or configure with -DDRT_ENABLE_ONEDNN=OFF")
  endif()
  find_package(OpenMP REQUIRED COMPONENTS CXX)  # oneDNN's CPU runtime; drtrain sets its threads
  add_library(drt_dnnl INTERFACE)
  target_include_directories(drt_dnnl INTERFACE ${DRT_DNNL_INCLUDE_DIR})
  target_link_libraries(drt_dnnl INTERFACE ${DRT_DNNL_LIBRARY} OpenMP::OpenMP_CXX)
  set(DRT_HAVE_ONEDNN 1)
endif()
message(STATUS "drtrain: oneDNN convolutions ${DRT_ENABLE_ONEDNN}")

find_package(ZLIB REQUIRED)
find_package(Threads REQUIRED)
