# cmake -DREGEX=<re> -DEXPECT_COUNT=<n> [-DLINE_REGEX=<re>] -P DrtExpectLines.cmake -- <command> [args...]
# Passes when the command exits 0, its output (stdout + stderr) has exactly EXPECT_COUNT lines
# matching REGEX (';' in the output reads as ','), and each of them also matches LINE_REGEX.
# Used for "a run says this once, in these words" tests (e.g. one line about CUDA on a CPU node).
include(${CMAKE_CURRENT_LIST_DIR}/DrtScriptCommand.cmake)
execute_process(COMMAND ${DRT_COMMAND} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the command exited '${rc}', expected 0 (its output is above)")
endif()
string(REPLACE ";" "," text "${out}")  # a ';' would split the list of matches
string(REGEX MATCHALL "[^\n]*${REGEX}[^\n]*" hits "${text}")
list(LENGTH hits count)
if(NOT count EQUAL EXPECT_COUNT)
  message(FATAL_ERROR "expected ${EXPECT_COUNT} line(s) matching '${REGEX}', found ${count}")
endif()
if(DEFINED LINE_REGEX)
  foreach(hit IN LISTS hits)
    if(NOT hit MATCHES "${LINE_REGEX}")
      message(FATAL_ERROR "the line '${hit}' does not match '${LINE_REGEX}'")
    endif()
  endforeach()
endif()
message("ok: exit status 0, ${count} line(s) matching '${REGEX}'")
