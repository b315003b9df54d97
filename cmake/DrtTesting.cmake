# Test registration. Every test goes through drt_add_test so that its kind decides how it runs:
#   unit: the executable, directly.
#   mpi:  ${MPIEXEC_EXECUTABLE} -n NP ${DRT_MPIEXEC_FLAGS} <exe> ARGS, with a timeout. Flags such
#         as --oversubscribe or --allow-run-as-root come from the caller (scripts/test.sh sets
#         DRT_MPIEXEC_FLAGS), never from here.
#   gpu:  the executable; exit code 77 means "no usable GPU" and ctest reports it as Skipped.
# EXPECT_FAIL_REGEX turns the test around: the command must exit non-zero, print a line matching
# the regex exactly EXPECT_COUNT times (default 1), and finish within the timeout.
# EXPECT_REGEX: the command must exit 0 and print exactly EXPECT_COUNT (default 1) lines matching
# it, each of them also matching EXPECT_LINE_REGEX when given (cmake/DrtExpectLines.cmake).
# SUMMARY_AT_LEAST <field> <min>: the command (drtrain) must exit 0 and its JSON summary line must
# have field >= min (cmake/DrtCheckSummary.cmake).
#
#   drt_test_executable(<target> SOURCES ... [LIBS ...] [MPI_MAIN])
#   drt_add_test(NAME <name> KIND unit|mpi|gpu COMMAND <target> [args...] [ARGS ...] [NP n] [TIMEOUT s]
#                [EXPECT_FAIL_REGEX <regex>] [EXPECT_COUNT n|n+] [SUMMARY_AT_LEAST <field> <min>]
#                [EXPECT_REGEX <regex> [EXPECT_LINE_REGEX <regex>]]
#                [ENV VAR=value ...] [LABELS ...])

set(DRT_MPIEXEC_FLAGS "" CACHE STRING "Extra mpiexec flags for MPI tests (a CMake list)")

find_package(GTest REQUIRED)

function(drt_test_executable target)
  cmake_parse_arguments(E "MPI_MAIN" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${target} ${E_SOURCES})
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  if(E_MPI_MAIN)
    target_link_libraries(${target} PRIVATE drt_test_mpi_main GTest::gtest ${E_LIBS})
  else()
    target_link_libraries(${target} PRIVATE GTest::gtest GTest::gtest_main ${E_LIBS})
  endif()
  set_target_properties(${target} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
endfunction()

function(drt_add_test)
  cmake_parse_arguments(T "" "NAME;KIND;NP;TIMEOUT;EXPECT_FAIL_REGEX;EXPECT_COUNT;EXPECT_REGEX;EXPECT_LINE_REGEX"
                        "COMMAND;ARGS;LABELS;SUMMARY_AT_LEAST;ENV" ${ARGN})
  # COMMAND <target or program> [its first arguments...]: the rest go before ARGS.
  list(POP_FRONT T_COMMAND T_PROGRAM)
  set(T_ARGS ${T_COMMAND} ${T_ARGS})
  set(T_COMMAND ${T_PROGRAM})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  if(TARGET ${T_COMMAND})
    set(exe $<TARGET_FILE:${T_COMMAND}>)
  else()
    set(exe ${T_COMMAND})
  endif()
  if(T_KIND STREQUAL "mpi")
    if(NOT T_NP)
      message(FATAL_ERROR "drt_add_test(${T_NAME}): an MPI test needs NP")
    endif()
    set(cmd ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${T_NP} ${DRT_MPIEXEC_FLAGS}
            ${MPIEXEC_PREFLAGS} ${exe} ${MPIEXEC_POSTFLAGS} ${T_ARGS})
  elseif(T_KIND STREQUAL "unit" OR T_KIND STREQUAL "gpu")
    set(cmd ${exe} ${T_ARGS})
  else()
    message(FATAL_ERROR "drt_add_test(${T_NAME}): KIND must be unit, mpi or gpu")
  endif()
  if(DEFINED T_EXPECT_FAIL_REGEX)
    if(NOT T_EXPECT_COUNT)
      set(T_EXPECT_COUNT 1)
    endif()
    set(cmd ${CMAKE_COMMAND} "-DREGEX=${T_EXPECT_FAIL_REGEX}" -DEXPECT_COUNT=${T_EXPECT_COUNT}
            -P ${PROJECT_SOURCE_DIR}/cmake/DrtExpectFailure.cmake -- ${cmd})
  endif()
  if(DEFINED T_EXPECT_REGEX)
    if(NOT T_EXPECT_COUNT)
      set(T_EXPECT_COUNT 1)
    endif()
    set(line_arg "")
    if(DEFINED T_EXPECT_LINE_REGEX)
      set(line_arg "-DLINE_REGEX=${T_EXPECT_LINE_REGEX}")
    endif()
    set(cmd ${CMAKE_COMMAND} "-DREGEX=${T_EXPECT_REGEX}" -DEXPECT_COUNT=${T_EXPECT_COUNT} ${line_arg}
            -P ${PROJECT_SOURCE_DIR}/cmake/DrtExpectLines.cmake -- ${cmd})
  endif()
  if(T_SUMMARY_AT_LEAST)
    list(GET T_SUMMARY_AT_LEAST 0 field)
    list(GET T_SUMMARY_AT_LEAST 1 min)
    set(cmd ${CMAKE_COMMAND} -DFIELD=${field} -DMIN=${min}
            -P ${PROJECT_SOURCE_DIR}/cmake/DrtCheckSummary.cmake -- ${cmd})
  endif()
  add_test(NAME ${T_NAME} COMMAND ${cmd})
  set_tests_properties(${T_NAME} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "${T_KIND};${T_LABELS}")
  if(T_ENV)
    set_tests_properties(${T_NAME} PROPERTIES ENVIRONMENT "${T_ENV}")
  endif()
  if(T_KIND STREQUAL "mpi")
    set_tests_properties(${T_NAME} PROPERTIES PROCESSORS ${T_NP})
  elseif(T_KIND STREQUAL "gpu")
    set_tests_properties(${T_NAME} PROPERTIES SKIP_RETURN_CODE 77)
  endif()
endfunction()
