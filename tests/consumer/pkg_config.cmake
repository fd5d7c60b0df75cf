# SPDX-License-Identifier: MIT
# Compiles and runs SOURCE with nothing but the flags pkg-config gives for the installed
# headwise.pc (found in PC_DIR), the way a Makefile-based consumer would. EXPECTED_GEMM_BACKEND
# (eigen or cblas), when set, is the backend the program must find itself built with.
# Run as: cmake -D PKG_CONFIG=... -D PC_DIR=... -D CXX=... -D SOURCE=... -D OUTPUT=...
#               [-D EXPECTED_GEMM_BACKEND=...] -P
foreach(var IN ITEMS PKG_CONFIG PC_DIR CXX SOURCE OUTPUT)
  if(NOT ${var})
    message(FATAL_ERROR "pkg_config.cmake: ${var} is not set")
  endif()
endforeach()

if(DEFINED ENV{PKG_CONFIG_PATH} AND NOT "$ENV{PKG_CONFIG_PATH}" STREQUAL "")
  set(ENV{PKG_CONFIG_PATH} "${PC_DIR}:$ENV{PKG_CONFIG_PATH}")
else()
  set(ENV{PKG_CONFIG_PATH} "${PC_DIR}")
endif()

execute_process(COMMAND "${PKG_CONFIG}" --cflags --libs headwise
                OUTPUT_VARIABLE flags OUTPUT_STRIP_TRAILING_WHITESPACE
                RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "pkg_config.cmake: pkg-config --cflags --libs headwise failed (${result})")
endif()
message(STATUS "pkg-config --cflags --libs headwise: ${flags}")
separate_arguments(flags UNIX_COMMAND "${flags}")

get_filename_component(output_dir "${OUTPUT}" DIRECTORY)
file(MAKE_DIRECTORY "${output_dir}")
set(expect "")
if(EXPECTED_GEMM_BACKEND)
  set(expect "-DHEADWISE_EXPECTED_GEMM_BACKEND=${EXPECTED_GEMM_BACKEND}")
endif()
# The libraries after the source, as a linker resolving left to right needs them.
execute_process(COMMAND "${CXX}" -std=c++17 ${expect} "${SOURCE}" ${flags} -o "${OUTPUT}"
                RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "pkg_config.cmake: compiling ${SOURCE} failed (${result})")
endif()
execute_process(COMMAND "${OUTPUT}" RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "pkg_config.cmake: ${OUTPUT} exited with ${result}")
endif()
