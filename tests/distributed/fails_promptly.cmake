# SPDX-License-Identifier: MIT
# cmake -DCOMMAND=<launcher;args;...> -DMAX_SECONDS=<n> -DEXPECT=<text> -P fails_promptly.cmake
# Runs COMMAND (an MPI job in which one rank throws) and passes when it exits with a non-zero
# status within MAX_SECONDS and its output holds EXPECT; a job that hangs is killed at
# MAX_SECONDS by execute_process's timeout and fails the test.
cmake_minimum_required(VERSION 3.16)
foreach(_var COMMAND MAX_SECONDS EXPECT)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "fails_promptly.cmake: -D${_var}=... is required")
  endif()
endforeach()
string(TIMESTAMP _start "%s" UTC)
execute_process(COMMAND ${COMMAND}
                RESULT_VARIABLE _status
                OUTPUT_VARIABLE _out
                ERROR_VARIABLE _err
                TIMEOUT ${MAX_SECONDS})
string(TIMESTAMP _end "%s" UTC)
math(EXPR _seconds "${_end} - ${_start}")
message(STATUS "exit status '${_status}' after ${_seconds} s\n--- stdout\n${_out}\n--- stderr\n${_err}")
if(_status MATCHES "timeout" OR _seconds GREATER_EQUAL ${MAX_SECONDS})
  message(FATAL_ERROR "the job did not end within ${MAX_SECONDS} s (a rank that threw left the "
                      "others waiting)")
endif()
if(_status STREQUAL "0")
  message(FATAL_ERROR "the job exited with status 0; a rank that throws must fail it")
endif()
string(FIND "${_out}${_err}" "${EXPECT}" _at)
if(_at EQUAL -1)
  message(FATAL_ERROR "the output does not say '${EXPECT}'")
endif()
