# cmake --install BUILD [--prefix P]: the static libraries, the public headers (with the generated
# config.hpp), the programs drtrain, drtrain-ckpt, drtrain-data and drtrain-plan, and a CMake package, so that
# another project can write
#   find_package(drtrain REQUIRED)
#   target_link_libraries(app PRIVATE drtrain::train)
# (examples/custom_model/). Layout under P (GNUInstallDirs):
#   include/drtrain/...                 public headers, include/drtrain/config.hpp
#   lib/libdrt_*.a                      one library per part (docs/ARCHITECTURE.md)
#   bin/drtrain, bin/drtrain-ckpt, bin/drtrain-data, bin/drtrain-plan
#   lib/cmake/drtrain/                  drtrainConfig.cmake, drtrainConfigVersion.cmake, drtrainTargets*.cmake
#
# Imported targets, namespace drtrain:: (each drt_<part> is drtrain::<part>; the build tree has the
# same names as aliases): core, optim, data, data_hdf5, backend, nn, comm, ps, io, train; what they
# link: headers (drt_flags: include directory, C++17), kernels_ref, hdf5, h5util (the HDF5 helpers
# that io and data_hdf5 share), and by configuration kernels (CUDA kernels), cuda_libs (cuBLAS,
# cuDNN, NCCL), dnnl (oneDNN); the programs drtrain::drtrain, drtrain::drtrain-ckpt and
# drtrain::drtrain-data. The config finds what those reference (cmake/drtrainConfig.cmake.in).
include(CMakePackageConfigHelpers)

set(DRT_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/drtrain" CACHE STRING
    "Where cmake --install puts drtrain's CMake package, relative to the prefix")
mark_as_advanced(DRT_INSTALL_CMAKEDIR)

set(_drt_exported drt_flags drt_core drt_kernels_ref drt_optim drt_data drt_backend drt_nn drt_comm drt_plan drt_ps
                  drt_hdf5 drt_h5util drt_data_hdf5 drt_io drt_train)
foreach(t drt_kernels drt_cuda_libs drt_dnnl)
  if(TARGET ${t})
    list(APPEND _drt_exported ${t})
  endif()
endforeach()
foreach(t IN LISTS _drt_exported)
  if(t STREQUAL "drt_flags")
    set(name headers)
  else()
    string(REGEX REPLACE "^drt_" "" name ${t})
  endif()
  set_target_properties(${t} PROPERTIES EXPORT_NAME ${name})
  add_library(drtrain::${name} ALIAS ${t})
endforeach()

install(TARGETS ${_drt_exported} drtrain drtrain-ckpt drtrain-data drtrain-plan EXPORT drtrainTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT drtrainTargets NAMESPACE drtrain:: DESTINATION ${DRT_INSTALL_CMAKEDIR})

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/drtrain DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.hpp")
install(FILES ${PROJECT_BINARY_DIR}/include/drtrain/config.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/drtrain)

# What the config records of this build (cmake/drtrainConfig.cmake.in).
set(DRT_CUDA_TOOLKIT_ROOT "")
if(DRT_HAVE_CUDA)
  get_filename_component(DRT_CUDA_TOOLKIT_ROOT "${CUDAToolkit_BIN_DIR}" DIRECTORY)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/drtrainConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/drtrainConfig.cmake INSTALL_DESTINATION ${DRT_INSTALL_CMAKEDIR})
# 0.x: a new minor version may break the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/drtrainConfigVersion.cmake VERSION ${PROJECT_VERSION}
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/drtrainConfig.cmake ${PROJECT_BINARY_DIR}/drtrainConfigVersion.cmake
        DESTINATION ${DRT_INSTALL_CMAKEDIR})
