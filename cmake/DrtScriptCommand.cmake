# Sourced by the -P test scripts: DRT_COMMAND = the arguments after "--" on the cmake command
# line, i.e. the command the script runs.
set(DRT_COMMAND "")
set(_drt_collect FALSE)
math(EXPR _drt_last "${CMAKE_ARGC} - 1")
foreach(_drt_i RANGE ${_drt_last})
  if(_drt_collect)
    list(APPEND DRT_COMMAND "${CMAKE_ARGV${_drt_i}}")
  elseif("${CMAKE_ARGV${_drt_i}}" STREQUAL "--")
    set(_drt_collect TRUE)
  endif()
endforeach()
