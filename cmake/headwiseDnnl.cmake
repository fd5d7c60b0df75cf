# SPDX-License-Identifier: MIT
# headwise_find_dnnl(<found_var>): makes the imported target headwise_dnnl::dnnl from oneDNN's
# C header (oneapi/dnnl/dnnl.h) and library (libdnnl) found on the usual paths, and sets
# <found_var> to ON when it exists. oneDNN's own CMake package is not used: Debian's requires
# OpenCL even for the CPU engine. Used by headwise's CMakeLists.txt and again by the installed
# headwiseConfig.cmake, so that a consumer links the oneDNN headwise was built with.
function(headwise_find_dnnl found_var)
  if(NOT TARGET headwise_dnnl::dnnl)
    find_path(HEADWISE_DNNL_INCLUDE_DIR NAMES oneapi/dnnl/dnnl.h)
    find_library(HEADWISE_DNNL_LIBRARY NAMES dnnl)
    mark_as_advanced(HEADWISE_DNNL_INCLUDE_DIR HEADWISE_DNNL_LIBRARY)
    # ops/gemm_bf16.hpp speaks oneDNN 2's C API (dnnl_matmul_desc_init, ...), which oneDNN 3
    # removed: a oneDNN 3 counts as not found, and bf16 takes the portable path.
    set(_dnnl_major "")
    if(HEADWISE_DNNL_INCLUDE_DIR AND EXISTS "${HEADWISE_DNNL_INCLUDE_DIR}/oneapi/dnnl/dnnl_version.h")
      file(STRINGS "${HEADWISE_DNNL_INCLUDE_DIR}/oneapi/dnnl/dnnl_version.h" _dnnl_major
           REGEX "^#define DNNL_VERSION_MAJOR [0-9]+")
      string(REGEX REPLACE ".*DNNL_VERSION_MAJOR ([0-9]+).*" "\\1" _dnnl_major "${_dnnl_major}")
    endif()
    if(_dnnl_major AND NOT _dnnl_major EQUAL 2)
      message(STATUS "headwise: oneDNN ${_dnnl_major}.x found in ${HEADWISE_DNNL_INCLUDE_DIR}; "
                     "headwise's bf16 products need oneDNN 2: not used")
    elseif(HEADWISE_DNNL_INCLUDE_DIR AND HEADWISE_DNNL_LIBRARY)
      add_library(headwise_dnnl::dnnl UNKNOWN IMPORTED)
      set_target_properties(headwise_dnnl::dnnl PROPERTIES
        IMPORTED_LOCATION "${HEADWISE_DNNL_LIBRARY}"
        INTERFACE_INCLUDE_DIRECTORIES "${HEADWISE_DNNL_INCLUDE_DIR}")
    endif()
  endif()
  if(TARGET headwise_dnnl::dnnl)
    set(${found_var} ON PARENT_SCOPE)
  else()
    set(${found_var} OFF PARENT_SCOPE)
  endif()
endfunction()
