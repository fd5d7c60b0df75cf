# SPDX-License-Identifier: MIT
# headwise_find_cblas_header(<var> [OPTIONAL]): the directory of the cblas.h that goes with the
# BLAS found.
#
# Call after find_package(BLAS). FindBLAS finds the library only; its C interface, cblas.h, lives
# in the prefix's include directory or a subdirectory named after the BLAS (openblas, blis, ...).
# Sets <var> in the caller's scope and checks that a program calling cblas_sgemm and cblas_dgemm
# through that header links against BLAS_LIBRARIES; fails the configuration with the reason if not,
# or, with OPTIONAL (HEADWISE_BLAS=AUTO), sets <var> to the empty string instead.
# Used by headwise's own CMakeLists.txt and by the installed headwiseConfig.cmake alike.
include_guard(GLOBAL)

function(headwise_find_cblas_header var)
  set(_optional OFF)
  if("${ARGN}" STREQUAL "OPTIONAL")
    set(_optional ON)
  elseif(NOT "${ARGN}" STREQUAL "")
    message(FATAL_ERROR "headwise_find_cblas_header: unexpected arguments '${ARGN}'")
  endif()
  set(_hints "")
  foreach(_lib IN LISTS BLAS_LIBRARIES)
    if(IS_ABSOLUTE "${_lib}")
      get_filename_component(_dir "${_lib}" DIRECTORY)
      # <prefix>/lib/libx.so, <prefix>/lib/<arch>/libx.so, <prefix>/lib/<arch>/<blas>/libx.so
      list(APPEND _hints "${_dir}/../include" "${_dir}/../../include" "${_dir}/../../../include")
    endif()
  endforeach()
  find_path(HEADWISE_CBLAS_HEADER_DIR cblas.h
            HINTS ${_hints}
            PATH_SUFFIXES openblas blis flexiblas cblas
            DOC "Directory holding the cblas.h of the BLAS headwise links (HEADWISE_BLAS)")
  mark_as_advanced(HEADWISE_CBLAS_HEADER_DIR)
  if(NOT HEADWISE_CBLAS_HEADER_DIR AND _optional)
    set(${var} "" PARENT_SCOPE)
    return()
  elseif(NOT HEADWISE_CBLAS_HEADER_DIR)
    message(FATAL_ERROR
      "headwise: HEADWISE_BLAS is ON and a BLAS was found (${BLAS_LIBRARIES}), but not its C "
      "interface header cblas.h. Install the BLAS's development package (Debian/Ubuntu: "
      "libopenblas-dev) or set HEADWISE_CBLAS_HEADER_DIR to the directory holding cblas.h.")
  endif()

  # A BLAS without the C interface (some reference builds) would only fail at link time of the
  # user's program; say so now.
  include(CheckCXXSourceCompiles)
  include(CMakePushCheckState)
  cmake_push_check_state(RESET)
  set(CMAKE_REQUIRED_INCLUDES "${HEADWISE_CBLAS_HEADER_DIR}")
  set(CMAKE_REQUIRED_LIBRARIES ${BLAS_LIBRARIES} ${BLAS_LINKER_FLAGS})
  set(CMAKE_REQUIRED_QUIET ON)
  check_cxx_source_compiles([[
#include <cblas.h>
int main() {
  float a = 1, b = 1, c = 0;
  double x = 1, y = 1, z = 0;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1);
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, 1, 1, 1, 1.0, &x, 1, &y, 1, 0.0, &z, 1);
  return c == 1.0f && z == 1.0 ? 0 : 1;
}
]] HEADWISE_CBLAS_LINKS)
  cmake_pop_check_state()
  if(NOT HEADWISE_CBLAS_LINKS AND _optional)
    unset(HEADWISE_CBLAS_LINKS CACHE)
    set(${var} "" PARENT_SCOPE)
    return()
  elseif(NOT HEADWISE_CBLAS_LINKS)
    unset(HEADWISE_CBLAS_LINKS CACHE)
    message(FATAL_ERROR
      "headwise: HEADWISE_BLAS is ON, but a program calling cblas_sgemm and cblas_dgemm "
      "through ${HEADWISE_CBLAS_HEADER_DIR}/cblas.h does not link against ${BLAS_LIBRARIES}: "
      "that BLAS has no C interface. Choose another with -DBLA_VENDOR=OpenBLAS (or FLAME for "
      "BLIS, ...).")
  endif()
  set(${var} "${HEADWISE_CBLAS_HEADER_DIR}" PARENT_SCOPE)
endfunction()
