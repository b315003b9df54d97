# DRT_ENABLE_CUDA: on by default when a CUDA compiler is found; a CPU-only build always works.
# Sets DRT_HAVE_CUDA for the generated config header.
include(CheckLanguage)
if(NOT DEFINED CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc CACHE FILEPATH "CUDA compiler")
endif()
check_language(CUDA)
set(_drt_cuda_default OFF)
if(CMAKE_CUDA_COMPILER)
  set(_drt_cuda_default ON)
endif()
option(DRT_ENABLE_CUDA "Build the CUDA backend (cuBLAS, cuDNN, NCCL)" ${_drt_cuda_default})
set(DRT_HAVE_CUDA 0)
if(DRT_ENABLE_CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    message(FATAL_ERROR "DRT_ENABLE_CUDA=ON but no CUDA compiler was found; "
                        "install the CUDA toolkit or configure with -DDRT_ENABLE_CUDA=OFF")
  endif()
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    # 90 = H100/H200; 90-virtual adds PTX that newer GPUs JIT-compile.
    set(CMAKE_CUDA_ARCHITECTURES "80-real;90-real;90-virtual")
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  set(DRT_HAVE_CUDA 1)
endif()
message(STATUS "drtrain: CUDA backend ${DRT_ENABLE_CUDA}")

# cuDNN and NCCL ship with the toolkit here (/usr/local/cuda); elsewhere point CUDNN_ROOT /
# NCCL_ROOT (or CMAKE_PREFIX_PATH) at them.
if(DRT_ENABLE_CUDA)
  find_path(DRT_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDNN_ROOT} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
  find_library(DRT_CUDNN_LIBRARY cudnn HINTS ${CUDNN_ROOT} ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
  find_path(DRT_NCCL_INCLUDE_DIR nccl.h HINTS ${NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
  find_library(DRT_NCCL_LIBRARY nccl HINTS ${NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
  foreach(v DRT_CUDNN_INCLUDE_DIR DRT_CUDNN_LIBRARY DRT_NCCL_INCLUDE_DIR DRT_NCCL_LIBRARY)
    if(NOT ${v})
      message(FATAL_ERROR "DRT_ENABLE_CUDA=ON but ${v} was not found: install cuDNN 9 and NCCL 2 "
                          "(or set CUDNN_ROOT / NCCL_ROOT), or configure with -DDRT_ENABLE_CUDA=OFF")
    endif()
  endforeach()
  add_library(drt_cuda_libs INTERFACE)
  target_include_directories(drt_cuda_libs INTERFACE ${DRT_CUDNN_INCLUDE_DIR} ${DRT_NCCL_INCLUDE_DIR})
  # cuBLAS is not linked: src/backend/cuda/cublas_loader.cpp dlopens it on first use (linked, it
  # brings libcublasLt's ~150 MiB of static initialisation into every rank, GPU or not). Its
  # headers come with the toolkit's include directory (CUDA::cudart's).
  target_link_libraries(drt_cuda_libs INTERFACE CUDA::cudart ${DRT_CUDNN_LIBRARY} ${DRT_NCCL_LIBRARY} ${CMAKE_DL_LIBS})
  message(STATUS "drtrain: cuDNN ${DRT_CUDNN_LIBRARY}, NCCL ${DRT_NCCL_LIBRARY}, architectures ${CMAKE_CUDA_ARCHITECTURES}")
endif()
