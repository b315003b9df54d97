# cmake -DFIELD=<name> -DMIN=<value> -P DrtCheckSummary.cmake -- <command> [args...]
# Runs a drtrain command and passes when it exits 0 and its JSON summary line
# ({"summary":true,...}) has FIELD >= MIN. Used by the end-to-end training tests.
include(${CMAKE_CURRENT_LIST_DIR}/DrtScriptCommand.cmake)
execute_process(COMMAND ${DRT_COMMAND} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the command failed with status '${rc}'")
endif()
string(REGEX MATCH "{\"summary\":true[^\n]*" summary "${out}")
if(NOT summary)
  message(FATAL_ERROR "no summary line in the output")
endif()
string(JSON value GET "${summary}" ${FIELD})
if(value LESS MIN)
  message(FATAL_ERROR "${FIELD} = ${value}, expected at least ${MIN}")
endif()
message("ok: ${FIELD} = ${value} >= ${MIN}")
