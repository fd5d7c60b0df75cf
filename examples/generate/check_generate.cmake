# SPDX-License-Identifier: MIT
# Runs the generate program as a user would (cmake -P, so that it needs no shell):
#   -D GENERATE=<program> -D MODEL_DIR=<missing dir>   exit status 1 and a message naming
#                                                      <dir>/config.json, no output
#   -D GENERATE=<program> -D GOLDEN=<tests/golden/llama/<model>>
#       the model's three prompts (make_llama_golden.py's) greedily, 24 new tokens: each
#       output line is greedy.txt's; then sampling twice with one seed gives one line.
if(DEFINED MODEL_DIR)
  execute_process(COMMAND "${GENERATE}" "${MODEL_DIR}" --prompt "1 2 3"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 1)
    message(FATAL_ERROR "generate with a missing model exited with '${rc}', expected 1")
  endif()
  string(FIND "${err}" "${MODEL_DIR}/config.json" at)
  if(at EQUAL -1 OR NOT out STREQUAL "")
    message(FATAL_ERROR "generate with a missing model: expected a message naming "
                        "${MODEL_DIR}/config.json and no output; got '${err}' and '${out}'")
  endif()
  return()
endif()

set(prompts "1 17 42 99 5 63 120" "1 8 77 31" "1 54")
file(STRINGS "${GOLDEN}/greedy.txt" expected)
foreach(prompt expect IN ZIP_LISTS prompts expected)
  execute_process(COMMAND "${GENERATE}" "${GOLDEN}" --prompt "${prompt}" --max-new-tokens 24
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "generate exited with '${rc}': ${err}")
  endif()
  if(NOT out STREQUAL "${expect}\n")
    message(FATAL_ERROR "generate --prompt \"${prompt}\": got\n'${out}'\nexpected\n'${expect}'")
  endif()
endforeach()

set(sample --prompt "1 54" --max-new-tokens 16 --temperature 0.8 --top-k 50 --top-p 0.95
           --seed 3)
execute_process(COMMAND "${GENERATE}" "${GOLDEN}" ${sample} RESULT_VARIABLE rc1 OUTPUT_VARIABLE a)
execute_process(COMMAND "${GENERATE}" "${GOLDEN}" ${sample} RESULT_VARIABLE rc2 OUTPUT_VARIABLE b)
if(NOT rc1 EQUAL 0 OR NOT rc2 EQUAL 0 OR NOT a STREQUAL b OR NOT a MATCHES "^[0-9]+( [0-9]+)*\n$")
  message(FATAL_ERROR "generate sampling with one seed: exit '${rc1}', '${rc2}', got '${a}' and '${b}'")
endif()
