# cmake -DREGEX=<re> -DEXPECT_COUNT=<n> -P DrtExpectFailure.cmake -- <command> [args...]
# Passes when the command exits non-zero and its output (stdout + stderr) has exactly
# EXPECT_COUNT lines matching REGEX (';' in the output reads as ','). Used for "bad input fails
# cleanly" tests.
set(cmd "")
set(collect FALSE)
math(EXPR last "${CMAKE_ARGC} - 1")
foreach(i RANGE ${last})
  if(collect)
    list(APPEND cmd "${CMAKE_ARGV${i}}")
  elseif("${CMAKE_ARGV${i}}" STREQUAL "--")
    set(collect TRUE)
  endif()
endforeach()
execute_process(COMMAND ${cmd} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")
if(rc EQUAL 0)
  message(FATAL_ERROR "expected a failure, but the command exited 0")
endif()
string(REPLACE ";" "," text "${out}")  # a ';' would split the list of matches
string(REGEX MATCHALL "[^\n]*${REGEX}[^\n]*" hits "${text}")
list(LENGTH hits count)
if(NOT count EQUAL EXPECT_COUNT)
  message(FATAL_ERROR "expected ${EXPECT_COUNT} line(s) matching '${REGEX}', found ${count}")
endif()
message("ok: exit status '${rc}', ${count} matching line(s)")
