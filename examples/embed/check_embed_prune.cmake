# SPDX-License-Identifier: MIT
# Runs embed --prune-heads as a user would (cmake -P):
#   -D EMBED=<program> -D TINY=<tests/golden/minilm/tiny_bert> -D WORK=<a scratch directory>
#       the tiny random BERT (2 layers of 2 heads, hidden size 8): values that are no
#       "LAYER:HEAD,HEAD;LAYER:HEAD" list, and heads or layers the model does not have, give exit
#       status 2 and a message naming --prune-heads and the value; a valid list gives 8 numbers a
#       text, the same whatever the order of its groups and heads, and not the unpruned ones.
#   -D EMBED=<program> -D MINILM=1
#       the same valid-list checks on all-MiniLM-L6-v2 ($HEADWISE_MINILM_DIR; prints "skipped:
#       ..." without it, the test's SKIP_REGULAR_EXPRESSION).

# check(<name> <exit status> <exit status got> <text expected on standard error> <stderr got>)
function(check name rc_expected rc err_expected err)
  string(FIND "${err}" "${err_expected}" at)
  if(NOT rc STREQUAL "${rc_expected}" OR at EQUAL -1)
    message(FATAL_ERROR "embed ${name}: exit '${rc}' and standard error\n${err}\nexpected "
                        "exit ${rc_expected} and a message containing '${err_expected}'")
  endif()
endfunction()

# expect_lines(<name> <output> <lines> <numbers a line>)
function(expect_lines name out lines width)
  string(REGEX MATCHALL "[^\n]+" got "${out}")
  list(LENGTH got n)
  string(REGEX MATCHALL "[^ \n]+" numbers "${out}")
  list(LENGTH numbers count)
  math(EXPR want "${width} * ${lines}")
  if(NOT n EQUAL lines OR NOT count EQUAL want)
    message(FATAL_ERROR "embed ${name} printed '${out}', expected ${lines} lines of ${width} numbers")
  endif()
endfunction()

# valid(<model> <width> <list> <the same list written otherwise>)
function(valid model width list reordered)
  execute_process(COMMAND "${EMBED}" "${model}" "hello world" "world"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE full ERROR_VARIABLE err)
  check("unpruned" 0 "${rc}" "" "${err}")
  execute_process(COMMAND "${EMBED}" "${model}" --prune-heads "${list}" "hello world" "world"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE pruned ERROR_VARIABLE err)
  check("--prune-heads ${list}" 0 "${rc}" "" "${err}")
  expect_lines("--prune-heads ${list}" "${pruned}" 2 ${width})
  execute_process(COMMAND "${EMBED}" "${model}" "hello world" --prune-heads "${reordered}" "world"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE again ERROR_VARIABLE err)
  check("--prune-heads ${reordered}" 0 "${rc}" "" "${err}")
  if(NOT again STREQUAL pruned)
    message(FATAL_ERROR "embed --prune-heads '${reordered}' printed other numbers than "
                        "'${list}':\n${again}\n${pruned}")
  endif()
  if(pruned STREQUAL full)
    message(FATAL_ERROR "embed --prune-heads '${list}' printed the unpruned embeddings")
  endif()
endfunction()

if(DEFINED MINILM)
  set(model "$ENV{HEADWISE_MINILM_DIR}")
  if(model STREQUAL "" OR NOT EXISTS "${model}/model.safetensors")
    message("skipped: all-MiniLM-L6-v2 model files not found (set HEADWISE_MINILM_DIR)")
    return()
  endif()
  valid("${model}" 384 "0:1,2;5:11" "5:11;0:2,1")
  # MiniLM has 6 layers of 12 heads.
  execute_process(COMMAND "${EMBED}" "${model}" --prune-heads "3:12" hello
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  check("--prune-heads 3:12" 2 "${rc}"
        "embed: --prune-heads \"3:12\": headwise::models::BertModel::prune_heads: heads[3]: heads in [0, 12), got head 12"
        "${err}")
  return()
endif()

file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
file(COPY "${TINY}/config.json" "${TINY}/model.safetensors" DESTINATION "${WORK}")
set(vocab "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\n")
foreach(i RANGE 7 39)
  string(APPEND vocab "w${i}\n")
endforeach()
file(WRITE "${WORK}/vocab.txt" "${vocab}")

# Not a list: the syntax, named with the value.
foreach(value "" "0" "0:" ":1" "0:1," "0:,1" "0:1;" ";0:1" "0:1;0:0" "0:1 " " 0:1" "a:1" "0:-1"
              "0:+1" "0:1:2" "0:1;;1:0" "0:1234567890")
  execute_process(COMMAND "${EMBED}" "${WORK}" --prune-heads "${value}" hello
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  check("--prune-heads '${value}'" 2 "${rc}"
        "embed: --prune-heads needs \"LAYER:HEAD,HEAD;LAYER:HEAD\" (whole numbers, each layer once), got \"${value}\""
        "${err}")
  if(NOT out STREQUAL "")
    message(FATAL_ERROR "embed --prune-heads '${value}' printed '${out}'")
  endif()
endforeach()
execute_process(COMMAND "${EMBED}" "${WORK}" --prune-heads
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
check("--prune-heads (no value)" 2 "${rc}" "embed: --prune-heads needs \"LAYER:HEAD,HEAD;LAYER:HEAD\" (whole numbers, each layer once), got nothing" "${err}")
# A long value is quoted to 40 characters.
execute_process(COMMAND "${EMBED}" "${WORK}" --prune-heads "0:1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1;x" hello
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
check("--prune-heads (long)" 2 "${rc}" "got \"0:1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,...\"" "${err}")

# Heads and layers the model does not have: the model's message, after the option and value.
set(fn "headwise::models::BertModel::prune_heads")
foreach(case "2:0|heads: layers in [0, 2), got layer 2"
             "0:2|heads[0]: heads in [0, 2), got head 2"
             "0:1,1|heads[0]: each head listed once, got head 1 twice"
             "1:0;0:0,1|heads[0]: at least one of the layer's 2 heads left, got every head")
  string(REPLACE "|" ";" parts "${case}")
  list(GET parts 0 value)
  list(LENGTH parts n)
  math(EXPR last "${n} - 1")
  list(GET parts ${last} expected)
  if(n EQUAL 3)  # the value held a ';'
    list(GET parts 0 a)
    list(GET parts 1 b)
    set(value "${a};${b}")
  endif()
  execute_process(COMMAND "${EMBED}" "${WORK}" --prune-heads "${value}" hello
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  check("--prune-heads '${value}'" 2 "${rc}" "embed: --prune-heads \"${value}\": ${fn}: ${expected}"
        "${err}")
endforeach()

valid("${WORK}" 8 "0:1;1:0" "1:0;0:1")
