# SPDX-License-Identifier: MIT
# Runs the embed program with input it cannot read, output it cannot write and numbers past the
# limits of its options (cmake -P; the closed descriptors and the directory as standard input
# need sh):
#   -D EMBED=<program> -D TINY=<tests/golden/minilm/tiny_bert> -D WORK=<a scratch directory>
# The model: the tiny random BERT of tests/golden/minilm (hidden size 8) with a vocabulary of its
# 40 ids written here. Output to /dev/full or a closed standard output, and standard input a
# directory or closed: a message on standard error, exit status 1. --threads and --batch out of
# range: exit status 2 and a message naming the option; --threads 1024 is valid.
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
file(COPY "${TINY}/config.json" "${TINY}/model.safetensors" DESTINATION "${WORK}")
set(vocab "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\n")
foreach(i RANGE 7 39)
  string(APPEND vocab "w${i}\n")
endforeach()
file(WRITE "${WORK}/vocab.txt" "${vocab}")

# expect_lines(<name> <output> <lines>): <lines> lines of 8 numbers each.
function(expect_lines name out lines)
  string(REGEX MATCHALL "[^\n]+" got "${out}")
  list(LENGTH got n)
  string(REGEX MATCHALL "[^ \n]+" numbers "${out}")
  list(LENGTH numbers count)
  math(EXPR want "8 * ${lines}")
  if(NOT n EQUAL lines OR NOT count EQUAL want OR NOT out MATCHES "\n$")
    message(FATAL_ERROR "embed ${name} printed '${out}', expected ${lines} lines of 8 numbers")
  endif()
endfunction()

# check(<name> <exit status> <exit status got> <text expected on standard error> <stderr got>)
function(check name rc_expected rc err_expected err)
  string(FIND "${err}" "${err_expected}" at)
  if(NOT rc STREQUAL "${rc_expected}" OR at EQUAL -1)
    message(FATAL_ERROR "embed ${name}: exit '${rc}' and standard error\n${err}\nexpected "
                        "exit ${rc_expected} and a message containing '${err_expected}'")
  endif()
endfunction()

execute_process(COMMAND "${EMBED}" "${WORK}" hello world
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
check("hello world" 0 "${rc}" "" "${err}")
expect_lines("hello world" "${out}" 2)

# Output that cannot be written.
foreach(args "hello" "--tokens;hello")
  execute_process(COMMAND "${EMBED}" "${WORK}" ${args} OUTPUT_FILE /dev/full
                  RESULT_VARIABLE rc ERROR_VARIABLE err)
  check("${args} > /dev/full" 1 "${rc}" "embed: cannot write to standard output: No space" "${err}")
  execute_process(COMMAND sh -c "exec \"$0\" \"$@\" >&-" "${EMBED}" "${WORK}" ${args}
                  RESULT_VARIABLE rc ERROR_VARIABLE err)
  check("${args} >&-" 1 "${rc}" "embed: cannot write to standard output" "${err}")
endforeach()
execute_process(COMMAND "${EMBED}" --help OUTPUT_FILE /dev/full
                RESULT_VARIABLE rc ERROR_VARIABLE err)
check("--help > /dev/full" 1 "${rc}" "embed: cannot write to standard output" "${err}")

# Standard input that cannot be read.
execute_process(COMMAND sh -c "exec \"$0\" \"$1\" < \"$1\"" "${EMBED}" "${WORK}"  # the model directory
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
check("< a directory" 1 "${rc}" "embed: cannot read standard input: Is a directory" "${err}")
execute_process(COMMAND sh -c "exec \"$0\" \"$@\" <&-" "${EMBED}" "${WORK}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
check("<&-" 1 "${rc}" "embed: cannot read standard input" "${err}")
if(NOT out STREQUAL "")
  message(FATAL_ERROR "embed <&- printed '${out}'")
endif()

# Numbers out of range, and the valid extremes.
foreach(case "--threads;99999999999999999999;1 to 1024, got 99999999999999999999"
             "--threads;2147483648;1 to 1024" "--threads;0;1 to 1024" "--threads;-4;1 to 1024"
             "--batch;99999999999999999999;1 to 9223372036854775807" "--batch;+2;1 to")
  list(GET case 0 option)
  list(GET case 1 value)
  list(GET case 2 expected)
  execute_process(COMMAND "${EMBED}" "${WORK}" ${option} ${value} hello
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  check("${option} ${value}" 2 "${rc}" "embed: ${option} needs a whole number from ${expected}" "${err}")
endforeach()
execute_process(COMMAND "${EMBED}" "${WORK}" --threads 1024 --batch 9223372036854775807 hello
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
check("--threads 1024 --batch 2^63 - 1" 0 "${rc}" "" "${err}")
expect_lines("--threads 1024" "${out}" 1)
