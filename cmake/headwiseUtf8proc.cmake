# SPDX-License-Identifier: MIT
# headwise_find_utf8proc(<found_var>): makes the imported target utf8proc::utf8proc, from
# utf8proc's own CMake package when one is installed, else from its header and library found on
# the usual paths (Debian's libutf8proc-dev ships no CMake package), and sets <found_var> to ON
# when the target exists. Used by headwise's CMakeLists.txt and again by the installed
# headwiseConfig.cmake, so that a consumer links the utf8proc headwise was built with.
function(headwise_find_utf8proc found_var)
  if(NOT TARGET utf8proc::utf8proc)
    find_package(utf8proc CONFIG QUIET)
  endif()
  if(NOT TARGET utf8proc::utf8proc)
    find_path(HEADWISE_UTF8PROC_INCLUDE_DIR NAMES utf8proc.h)
    find_library(HEADWISE_UTF8PROC_LIBRARY NAMES utf8proc)
    mark_as_advanced(HEADWISE_UTF8PROC_INCLUDE_DIR HEADWISE_UTF8PROC_LIBRARY)
    if(HEADWISE_UTF8PROC_INCLUDE_DIR AND HEADWISE_UTF8PROC_LIBRARY)
      add_library(utf8proc::utf8proc UNKNOWN IMPORTED)
      set_target_properties(utf8proc::utf8proc PROPERTIES
        IMPORTED_LOCATION "${HEADWISE_UTF8PROC_LIBRARY}"
        INTERFACE_INCLUDE_DIRECTORIES "${HEADWISE_UTF8PROC_INCLUDE_DIR}")
    endif()
  endif()
  if(TARGET utf8proc::utf8proc)
    set(${found_var} ON PARENT_SCOPE)
  else()
    set(${found_var} OFF PARENT_SCOPE)
  endif()
endfunction()
