# SPDX-License-Identifier: MIT
# Installs the headwise build tree HEADWISE_BINARY_DIR into a fresh HEADWISE_PREFIX, so the
# find_package and pkg-config consumer tests see exactly what `cmake --install` ships.
# Run as: cmake -D HEADWISE_BINARY_DIR=... -D HEADWISE_PREFIX=... [-D HEADWISE_CONFIG=...] -P
foreach(var IN ITEMS HEADWISE_BINARY_DIR HEADWISE_PREFIX)
  if(NOT ${var})
    message(FATAL_ERROR "install.cmake: ${var} is not set")
  endif()
endforeach()

file(REMOVE_RECURSE "${HEADWISE_PREFIX}")
set(_config_args "")
if(HEADWISE_CONFIG)
  set(_config_args --config "${HEADWISE_CONFIG}")
endif()
execute_process(
  COMMAND "${CMAKE_COMMAND}" --install "${HEADWISE_BINARY_DIR}" --prefix "${HEADWISE_PREFIX}"
          ${_config_args}
  RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "install.cmake: cmake --install failed (${result})")
endif()
