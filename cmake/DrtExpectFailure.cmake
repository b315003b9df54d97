# cmake -DREGEX=<re> -DEXPECT_COUNT=<n> -P DrtExpectFailure.cmake -- <command> [args...]
# Passes when the command exits non-zero and its output (stdout + stderr) has exactly
# EXPECT_COUNT lines matching REGEX (';' in the output reads as ','; "N+" means at least N).
# Used for "bad input fails cleanly" tests.
include(${CMAKE_CURRENT_LIST_DIR}/DrtScriptCommand.cmake)
execute_process(COMMAND ${DRT_COMMAND} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")
if(rc EQUAL 0)
  message(FATAL_ERROR "expected a failure, but the command exited 0")
endif()
string(REPLACE ";" "," text "${out}")  # a ';' would split the list of matches
string(REGEX MATCHALL "[^\n]*${REGEX}[^\n]*" hits "${text}")
list(LENGTH hits count)
if(EXPECT_COUNT MATCHES "^([0-9]+)\\+$")  # "N+": at least N
  if(count LESS CMAKE_MATCH_1)
    message(FATAL_ERROR "expected at least ${CMAKE_MATCH_1} line(s) matching '${REGEX}', found ${count}")
  endif()
elseif(NOT count EQUAL EXPECT_COUNT)
  message(FATAL_ERROR "expected ${EXPECT_COUNT} line(s) matching '${REGEX}', found ${count}")
endif()
message("ok: exit status '${rc}', ${count} matching line(s)")
