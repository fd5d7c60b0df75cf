# SPDX-License-Identifier: MIT
# headwise_target_warnings(<target>): our warning flags, for headwise's own tests, benchmarks and
# examples only. Never applied to the INTERFACE target, whose flags every consumer would inherit.
#
# Eigen, Catch2 and Google Benchmark come in through imported targets, so their include
# directories are SYSTEM and their warnings stay hidden; headwise's own include directory is not,
# so the library headers are held to these flags wherever our targets include them.
include_guard(GLOBAL)

function(headwise_target_warnings target)
  if(MSVC)
    set(_flags /W4 /permissive-)
    if(HEADWISE_WARNINGS_AS_ERRORS)
      list(APPEND _flags /WX)
    endif()
  else()
    set(_flags -Wall -Wextra -Wpedantic -Wshadow -Wconversion)
    if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
      # The same set on both compilers: clang's -Wconversion includes -Wsign-conversion, which
      # g++'s does not for C++ (the headers index std::vector by Index, a signed type, throughout).
      list(APPEND _flags -Wno-sign-conversion)
    endif()
    if(HEADWISE_WARNINGS_AS_ERRORS)
      list(APPEND _flags -Werror)
    endif()
  endif()
  target_compile_options(${target} PRIVATE ${_flags})
endfunction()
