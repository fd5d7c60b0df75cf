# SPDX-License-Identifier: MIT
# Runs the embed program as a user would (cmake -P, so that it needs no shell):
#   -D EMBED=<program> -D MODEL_DIR=<missing dir>   a missing model: exit status 1 and a message
#                                                    naming <dir>/config.json
#   -D EMBED=<program> -D GOLDEN=<tests/golden/minilm>
#       with $HEADWISE_MINILM_DIR: two texts from the arguments and from standard input give the
#       same two lines of 384 numbers; --tokens gives the corpus' token ids. Without the model it
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

set(input "${CMAKE_CURRENT_BINARY_DIR}/embed_input.txt")
file(WRITE "${input}" "${text0}\n${text1}\n")
execute_process(COMMAND "${EMBED}" "${model}" --batch 1 INPUT_FILE "${input}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE from_stdin)
if(NOT rc EQUAL 0 OR NOT from_stdin STREQUAL from_args)
  message(FATAL_ERROR "embed reading standard input (batch 1) printed something else than with "
                      "the texts as arguments (batch 32)")
endif()

execute_process(COMMAND "${EMBED}" "${model}" --tokens "${text0}" RESULT_VARIABLE rc
                OUTPUT_VARIABLE ids OUTPUT_STRIP_TRAILING_WHITESPACE)
string(JSON expected GET "${corpus}" ids 0)
string(REGEX REPLACE "[][ \n]" "" expected "${expected}")
string(REPLACE "," " " expected "${expected}")
if(NOT rc EQUAL 0 OR NOT ids STREQUAL expected)
  message(FATAL_ERROR "embed --tokens printed '${ids}', expected '${expected}'")
endif()
message(STATUS "embed: output format, standard input and --tokens as documented")
