# SPDX-License-Identifier: MIT
# Runs llama_heads on SmolLM2-135M-Instruct.Q4_1.gguf in a small setting (cmake -P):
#   -D LLAMA_HEADS=<program> -D TEXT=<tests/golden/perplexity/docs_text.txt>
#   -D WORK=<a scratch directory>
# The file is $HEADWISE_SMOLLM2_GGUF, else ~/.cache/headwise/models/ (as the SmolLM2 model tests
# find it). The heads of layers 0 and 1 scored on one window of 8 tokens, evaluated on 2 windows
# of 16, one random draw, one speed round: exit status 0, a finite loss, the gradient within 2%
# of the largest importance of central differences on 2 heads, a table of 2 layers of 9
# non-negative importances, a CSV of 18 rows, pruning no head giving the unpruned perplexity bit
# for bit, for 10/25/50% (3, 5 and 9 of the 18 heads: the nearest counts grouped-query attention
# allows) one line by importance and one random, each with a finite perplexity and a
# --prune-heads list, the Q4_1 lines and 8 speed lines. Without the file it prints "skipped: ..."
# (the test's SKIP_REGULAR_EXPRESSION).
set(model "$ENV{HEADWISE_SMOLLM2_GGUF}")
if(model STREQUAL "")
  set(model "$ENV{HOME}/.cache/headwise/models/SmolLM2-135M-Instruct.Q4_1.gguf")
endif()
if(NOT EXISTS "${model}")
  message("skipped: SmolLM2-135M-Instruct.Q4_1.gguf not found (set HEADWISE_SMOLLM2_GGUF)")
  return()
endif()
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
execute_process(COMMAND "${LLAMA_HEADS}" "${model}" "${TEXT}" --layers 2 --windows 1
                        --window-tokens 8 --check-heads 2 --context 16 --eval-windows 2 --draws 1
                        --speed-rounds 1 --prefill-tokens 8 --decode-tokens 2 --csv "${WORK}/i.csv"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "llama_heads exited with '${rc}': ${err}")
endif()
set(number "[0-9]+\\.[0-9]+")
if(NOT out MATCHES "\nloss ${number} at xi = 1; 18 heads scored by backward")
  message(FATAL_ERROR "llama_heads printed no finite loss and head count:\n${out}")
endif()
# The gates' gradient from backward against central differences (step 1e-2, in float) on 2 heads.
if(NOT out MATCHES "largest difference [-+.e0-9]+, (${number}) of the largest importance")
  message(FATAL_ERROR "llama_heads printed no comparison with central differences:\n${out}")
endif()
if(NOT CMAKE_MATCH_1 LESS 0.02)
  message(FATAL_ERROR "backward and central differences differ by ${CMAKE_MATCH_1} of the "
                      "largest importance (at most 0.02 expected):\n${out}")
endif()
# CMake's regular expressions have no {n}: the 9 columns written out.
string(REPEAT " +${number}" 9 columns)
foreach(layer RANGE 0 1)
  if(NOT out MATCHES "\n    ${layer}${columns}\n")
    message(FATAL_ERROR "llama_heads printed no row of 9 importances for layer ${layer}:\n${out}")
  endif()
endforeach()
file(STRINGS "${WORK}/i.csv" rows)
list(LENGTH rows n)
if(NOT n EQUAL 19)
  message(FATAL_ERROR "llama_heads --csv wrote ${n} lines, expected a header and 18 rows")
endif()
if(NOT out MATCHES "\npruning no head: perplexity ${number}, the unpruned model's bit for bit\n")
  message(FATAL_ERROR "pruning no head did not give the unpruned perplexity exactly:\n${out}")
endif()
foreach(case "10% +3" "25% +5" "50% +9")
  foreach(order "importance " "random 1   ")
    if(NOT out MATCHES "${case} +[0-9]+  ${order}  +${number}  ${number}  \"[0-9:,;]+\"")
      message(FATAL_ERROR "llama_heads printed no line '${case}  ${order}':\n${out}")
    endif()
  endforeach()
endforeach()
foreach(case "10% +3" "25% +5" "50% +9")
  if(NOT out MATCHES "\n +${case} +${number}  ${number}\n")
    message(FATAL_ERROR "llama_heads printed no Q4_1 line '${case}':\n${out}")
  endif()
endforeach()
string(REPEAT " +${number}" 4 speeds)
foreach(weights "float32" "Q4_1   ")
  foreach(case "0% +0" "10% +3" "25% +5" "50% +9")
    if(NOT out MATCHES "\n${weights} +${case}${speeds}\n")
      message(FATAL_ERROR "llama_heads printed no speed line '${weights} ${case}':\n${out}")
    endif()
  endforeach()
endforeach()
