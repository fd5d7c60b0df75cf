# SPDX-License-Identifier: MIT
# Fails when a class template over a scalar, `template <class T>` followed by `class Name` or
# `struct Name`, in include/headwise/{layers,layers/attention,optim,autograd,models}/ is named
# neither by a line of include/headwise/detail/instantiation_list.hpp nor by one of its
# "not listed:" lines: a new module must be compiled into headwise::compiled (and declared extern
# for its users) or say why not.
# Usage: cmake -D SOURCE_DIR=<headwise source dir> -P instantiation_list.cmake
cmake_minimum_required(VERSION 3.16)
if(NOT SOURCE_DIR)
  message(FATAL_ERROR "instantiation_list.cmake: pass -D SOURCE_DIR=<the headwise source dir>")
endif()
set(_list_file "${SOURCE_DIR}/include/headwise/detail/instantiation_list.hpp")
file(READ "${_list_file}" _list)

# X(class, Name<T>), X(struct, ns::Name<T>), X(class, LRScheduler<SGD<T>>) ... and
# "not listed: Name".
set(_listed "")
string(REGEX MATCHALL "X\\((class|struct), ([A-Za-z_0-9]+::)*[A-Za-z_0-9]+<" _uses "${_list}")
foreach(_use IN LISTS _uses)
  string(REGEX REPLACE "^X\\((class|struct), ([A-Za-z_0-9]+::)*([A-Za-z_0-9]+)<$" "\\3" _name
                       "${_use}")
  list(APPEND _listed "${_name}")
endforeach()
string(REGEX MATCHALL "not listed: [A-Za-z_0-9]+" _exempt "${_list}")
foreach(_line IN LISTS _exempt)
  string(REGEX REPLACE "^not listed: " "" _name "${_line}")
  list(APPEND _listed "${_name}")
endforeach()

set(_headers "")
foreach(_dir layers layers/attention optim autograd models)
  file(GLOB _found "${SOURCE_DIR}/include/headwise/${_dir}/*.hpp")
  list(APPEND _headers ${_found})
endforeach()
list(SORT _headers)

set(_missing "")
set(_count 0)
foreach(_header IN LISTS _headers)
  file(READ "${_header}" _text)
  # A primary template (a partial specialisation has `Name<` and is no template of its own).
  string(REGEX MATCHALL "template <class T>\n(class|struct) [A-Za-z_0-9]+[ :{\n]" _defs
         "${_text}")
  foreach(_def IN LISTS _defs)
    string(REGEX REPLACE "^template <class T>\n(class|struct) ([A-Za-z_0-9]+).$" "\\2" _name
                         "${_def}")
    math(EXPR _count "${_count} + 1")
    if(NOT _name IN_LIST _listed)
      file(RELATIVE_PATH _rel "${SOURCE_DIR}" "${_header}")
      list(APPEND _missing "${_name} (${_rel})")
    endif()
  endforeach()
endforeach()
list(REMOVE_DUPLICATES _missing)

if(_count EQUAL 0)
  message(FATAL_ERROR "instantiation_list.cmake: found no `template <class T>` class in "
                      "${SOURCE_DIR}/include/headwise: wrong SOURCE_DIR?")
endif()
if(_missing)
  list(JOIN _missing "\n  " _missing_lines)
  message(FATAL_ERROR "include/headwise/detail/instantiation_list.hpp names neither in "
                      "HEADWISE_INSTANTIATION_CLASSES nor in a \"not listed:\" line these class "
                      "templates:\n  ${_missing_lines}\nAdd a line X(Name<T>) (every member must "
                      "compile for float and double), or a \"not listed: Name\" line saying why.")
endif()
message(STATUS "instantiation_list.cmake: ${_count} class templates, each listed or exempted")
