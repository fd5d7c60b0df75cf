# SPDX-License-Identifier: MIT
# headwise_target_sanitizers(<target>): compile and link one of headwise's own targets with the
# sanitizers named in HEADWISE_SANITIZERS (e.g. "address,undefined"). Every sanitizer error is
# fatal (-fno-sanitize-recover=all), so a test that trips one fails instead of printing and passing.
include_guard(GLOBAL)

if(HEADWISE_SANITIZERS)
  if(MSVC)
    message(FATAL_ERROR "HEADWISE_SANITIZERS is supported with GCC and Clang only")
  endif()
  # Accept "address;undefined" as well as "address,undefined".
  string(REPLACE ";" "," HEADWISE_SANITIZERS_FLAG "${HEADWISE_SANITIZERS}")
  message(STATUS "headwise: own targets built with -fsanitize=${HEADWISE_SANITIZERS_FLAG}")
endif()

function(headwise_target_sanitizers target)
  if(NOT HEADWISE_SANITIZERS)
    return()
  endif()
  set(_flags -fsanitize=${HEADWISE_SANITIZERS_FLAG} -fno-sanitize-recover=all
             -fno-omit-frame-pointer)
  target_compile_options(${target} PRIVATE ${_flags})
  target_link_options(${target} PRIVATE ${_flags})
endfunction()
