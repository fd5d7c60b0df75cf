# SPDX-License-Identifier: MIT
# Fails when a class template over a scalar, `template <class T>` followed by `class Name` or
# `struct Name`, in include/headwise/{layers,layers/attention,optim,autograd,models}/ is named
# neither by an entry C(class|struct, Name<...>) of a header's HEADWISE_COMPILED_TEMPLATES list
# nor by a "not compiled: Name" line: a new module must be compiled into headwise::compiled (and
# declared extern for its users) or say why not (detail/compiled_templates.hpp).
# Usage: cmake -D SOURCE_DIR=<headwise source dir> -P compiled_templates.cmake
cmake_minimum_required(VERSION 3.16)
if(NOT SOURCE_DIR)
  message(FATAL_ERROR "compiled_templates.cmake: pass -D SOURCE_DIR=<the headwise source dir>")
endif()

set(_headers "")
foreach(_dir layers layers/attention optim autograd models)
  file(GLOB _found "${SOURCE_DIR}/include/headwise/${_dir}/*.hpp")
  list(APPEND _headers ${_found})
endforeach()
list(SORT _headers)

# The names listed anywhere: C(class, Name<T>), C(struct, ns::Name<T>), C(class,
# LRScheduler<SGD<T>>) ..., and "not compiled: Name".
set(_listed "")
foreach(_header IN LISTS _headers)
  file(READ "${_header}" _text)
  string(REGEX MATCHALL "C\\((class|struct), ([A-Za-z_0-9]+::)*[A-Za-z_0-9]+<" _uses "${_text}")
  foreach(_use IN LISTS _uses)
    string(REGEX REPLACE "^C\\((class|struct), ([A-Za-z_0-9]+::)*([A-Za-z_0-9]+)<$" "\\3" _name
                         "${_use}")
    list(APPEND _listed "${_name}")
  endforeach()
  string(REGEX MATCHALL "not compiled: [A-Za-z_0-9]+" _exempt "${_text}")
  foreach(_line IN LISTS _exempt)
    string(REGEX REPLACE "^not compiled: " "" _name "${_line}")
    list(APPEND _listed "${_name}")
  endforeach()
endforeach()

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
  message(FATAL_ERROR "compiled_templates.cmake: found no `template <class T>` class in "
                      "${SOURCE_DIR}/include/headwise: wrong SOURCE_DIR?")
endif()
if(_missing)
  list(JOIN _missing "\n  " _missing_lines)
  message(FATAL_ERROR "No HEADWISE_COMPILED_TEMPLATES list names these class templates, and no "
                      "\"not compiled:\" line exempts them:\n  ${_missing_lines}\nAdd an entry "
                      "C(class, Name<T>) to the list at the end of the header (every member must "
                      "compile for float and double), or a \"// not compiled: Name\" line saying "
                      "why (detail/compiled_templates.hpp).")
endif()
message(STATUS "compiled_templates.cmake: ${_count} class templates, each compiled or exempted")
