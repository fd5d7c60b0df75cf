# SPDX-License-Identifier: MIT
# Runs heads on all-MiniLM-L6-v2 ($HEADWISE_MINILM_DIR) in a small setting (cmake -P):
#   -D HEADS=<program> -D PAIRS=<examples/heads/pairs.tsv> -D WORK=<a scratch directory>
# 2 pairs, 1 random draw: exit status 0, the importance by the gradient within 1e-4 of central
# differences (--check), a table of 6 layers of 12 non-negative importances, a
# CSV of 72 rows, and for 10/25/50% (7, 18, 36 heads) one line by importance and one random,
# each with a cosine in (0, 1] and a --prune-heads list. Without the model it prints "skipped:
# ..." (the test's SKIP_REGULAR_EXPRESSION).
set(model "$ENV{HEADWISE_MINILM_DIR}")
if(model STREQUAL "" OR NOT EXISTS "${model}/model.safetensors")
  message("skipped: all-MiniLM-L6-v2 model files not found (set HEADWISE_MINILM_DIR)")
  return()
endif()
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
execute_process(COMMAND "${HEADS}" "${model}" "${PAIRS}" --pairs 2 --draws 1 --csv "${WORK}/i.csv"
                        --check
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "heads exited with '${rc}': ${err}")
endif()
# The importance by the gates' gradient (BertModel::backward) against central differences: within
# 1e-4 of the largest (2.6e-6 measured on these 2 pairs, 2.2e-8 on 4; printed by %.3g, which
# writes a number below 1e-4 as d.dde-0X and one above it without an exponent).
if(NOT out MATCHES "largest difference [0-9.]+e-(0[5-9]|[1-9][0-9]) of the largest importance")
  message(FATAL_ERROR "heads --check: the gradient and central differences differ:\n${out}")
endif()
# CMake's regular expressions have no {n}: the 12 columns written out.
string(REPEAT " +[0-9]+\\.[0-9]+" 12 columns)
foreach(layer RANGE 0 5)
  if(NOT out MATCHES "\n    ${layer}${columns}\n")
    message(FATAL_ERROR "heads printed no row of 12 importances for layer ${layer}:\n${out}")
  endif()
endforeach()
file(STRINGS "${WORK}/i.csv" rows)
list(LENGTH rows n)
if(NOT n EQUAL 73)
  message(FATAL_ERROR "heads --csv wrote ${n} lines, expected a header and 72 rows")
endif()
foreach(case "10% +7" "25% +18" "50% +36")
  foreach(order "importance " "random 1   ")
    if(NOT out MATCHES "${case}  ${order}  (0|1)\\.[0-9]+  -?[0-9]\\.[0-9]+  \"[0-9:,;]+\"")
      message(FATAL_ERROR "heads printed no line '${case}  ${order}':\n${out}")
    endif()
  endforeach()
endforeach()
