# SPDX-License-Identifier: MIT
# Runs the embed program as a user would (cmake -P, so that it needs no shell):
#   -D EMBED=<program> -D MODEL_DIR=<missing dir>   a missing model: exit status 1 and a message
#                                                    naming <dir>/config.json
#   -D EMBED=<program> -D GOLDEN=<tests/golden/minilm>
#       with $HEADWISE_MINILM_DIR: two texts from the arguments and from standard input give the
#       same two lines of 384 numbers, and to 1e-6 the same at batch 1; --tokens gives the corpus' token ids. Without the model it
#       prints "skipped: ..." (the test's SKIP_REGULAR_EXPRESSION).
if(DEFINED MODEL_DIR)
  execute_process(COMMAND "${EMBED}" "${MODEL_DIR}" "hello"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 1)
    message(FATAL_ERROR "embed with a missing model exited with '${rc}', expected 1")
  endif()
  string(FIND "${err}" "${MODEL_DIR}/config.json" at)
  if(at EQUAL -1 OR NOT out STREQUAL "")
    message(FATAL_ERROR "embed with a missing model: expected a message naming "
                        "${MODEL_DIR}/config.json and no output; got '${err}' and '${out}'")
  endif()
  return()
endif()

set(model "$ENV{HEADWISE_MINILM_DIR}")
if(model STREQUAL "" OR NOT EXISTS "${model}/model.safetensors")
  message("skipped: all-MiniLM-L6-v2 model files not found (set HEADWISE_MINILM_DIR)")
  return()
endif()
file(READ "${GOLDEN}/corpus.json" corpus)
string(JSON text0 GET "${corpus}" texts 0)
string(JSON text1 GET "${corpus}" texts 1)

execute_process(COMMAND "${EMBED}" "${model}" "${text0}" "${text1}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE from_args ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "embed exited with '${rc}': ${err}")
endif()
string(REGEX MATCHALL "[^\n]+" lines "${from_args}")
list(LENGTH lines n)
if(NOT n EQUAL 2)
  message(FATAL_ERROR "embed printed ${n} lines for 2 texts:\n${from_args}")
endif()
foreach(line IN LISTS lines)
  string(REGEX MATCHALL "[^ ]+" numbers "${line}")
  list(LENGTH numbers count)
  if(NOT count EQUAL 384 OR NOT line MATCHES "^(-?[0-9.]+(e[-+][0-9]+)? )*-?[0-9.]+(e[-+][0-9]+)?$")
    message(FATAL_ERROR "embed printed ${count} values, expected 384 numbers: ${line}")
  endif()
endforeach()

# Standard input at the same batch size gives the same bytes.
set(input "${CMAKE_CURRENT_BINARY_DIR}/embed_input.txt")
file(WRITE "${input}" "${text0}\n${text1}\n")
execute_process(COMMAND "${EMBED}" "${model}" INPUT_FILE "${input}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE from_stdin)
if(NOT rc EQUAL 0 OR NOT from_stdin STREQUAL from_args)
  message(FATAL_ERROR "embed reading standard input printed something else than with the texts "
                      "as arguments")
endif()

# to_nano(<number> <out>): a printed number in units of 1e-9, rounded toward zero (CMake's
# arithmetic is integer only).
function(to_nano number out)
  if(NOT number MATCHES "^(-?)([0-9]*)\\.?([0-9]*)(e([-+][0-9]+))?$")
    message(FATAL_ERROR "embed printed '${number}', not a number")
  endif()
  set(sign "${CMAKE_MATCH_1}")
  set(digits "${CMAKE_MATCH_2}${CMAKE_MATCH_3}")
  string(LENGTH "${CMAKE_MATCH_2}" point)
  set(exponent 0)
  string(LENGTH "${CMAKE_MATCH_5}" has_exponent)
  if(has_exponent GREATER 0)
    math(EXPR exponent "${CMAKE_MATCH_5}")
  endif()
  math(EXPR point "${point} + ${exponent} + 9")  # digits before the point of number * 1e9
  if(point LESS_EQUAL 0)
    set(${out} 0 PARENT_SCOPE)
    return()
  endif()
  string(LENGTH "${digits}" length)
  while(length LESS point)
    string(APPEND digits "0")
    math(EXPR length "${length} + 1")
  endwhile()
  string(SUBSTRING "${digits}" 0 ${point} digits)
  string(REGEX MATCH "^0*([1-9][0-9]*|0)$" digits "${digits}")  # no leading zeros: not octal
  set(${out} "${sign}${CMAKE_MATCH_1}" PARENT_SCOPE)
endfunction()

# Batch 1 rounds differently from batch 32 where the GEMMs run through a CBLAS, whose kernels
# depend on the row count: the numbers agree to 1e-6, not to the last bit.
execute_process(COMMAND "${EMBED}" "${model}" --batch 1 INPUT_FILE "${input}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE batch_one)
string(REGEX MATCHALL "[^ \n]+" expected_numbers "${from_args}")
string(REGEX MATCHALL "[^ \n]+" batch_one_numbers "${batch_one}")
list(LENGTH expected_numbers n_expected)
list(LENGTH batch_one_numbers n_batch_one)
if(NOT rc EQUAL 0 OR NOT n_batch_one EQUAL n_expected)
  message(FATAL_ERROR "embed --batch 1 exited with '${rc}' and printed ${n_batch_one} numbers, "
                      "expected ${n_expected}")
endif()
math(EXPR last "${n_expected} - 1")
foreach(i RANGE ${last})
  list(GET expected_numbers ${i} a)
  list(GET batch_one_numbers ${i} b)
  to_nano("${a}" a_nano)
  to_nano("${b}" b_nano)
  math(EXPR difference "${a_nano} - ${b_nano}")
  if(difference GREATER 1000 OR difference LESS -1000)
    message(FATAL_ERROR "embed --batch 1 printed ${b} where batch 32 printed ${a} (number ${i})")
  endif()
endforeach()

execute_process(COMMAND "${EMBED}" "${model}" --tokens "${text0}" RESULT_VARIABLE rc
                OUTPUT_VARIABLE ids OUTPUT_STRIP_TRAILING_WHITESPACE)
string(JSON expected GET "${corpus}" ids 0)
string(REGEX REPLACE "[][ \n]" "" expected "${expected}")
string(REPLACE "," " " expected "${expected}")
if(NOT rc EQUAL 0 OR NOT ids STREQUAL expected)
  message(FATAL_ERROR "embed --tokens printed '${ids}', expected '${expected}'")
endif()
message(STATUS "embed: output format, standard input and --tokens as documented")
