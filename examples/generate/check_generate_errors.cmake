# SPDX-License-Identifier: MIT
# Runs the generate program with output it cannot write and numbers at and past the limits of
# its options (cmake -P; the closed standard output needs sh):
#   -D GENERATE=<program> -D GOLDEN=<tests/golden/llama/tied>
# Output to /dev/full, to a closed standard output, --help to /dev/full: a message on standard
# error and exit status 1. Numbers out of range (--threads, --max-new-tokens, --top-k, --seed,
# signs): exit status 2 and a message naming the option. --seed 2^64 - 1 and --threads 1024
# are valid; --max-new-tokens past the model's max_position_embeddings: exit status 1 naming it;
# --temperature 1e-310 samples the greedy tokens.

# run(<name> <expected exit status> <text expected on standard error> ARGS...): output discarded.
function(run name rc_expected err_expected)
  execute_process(COMMAND "${GENERATE}" ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(FIND "${err}" "${err_expected}" at)
  if(NOT rc STREQUAL "${rc_expected}" OR at EQUAL -1)
    message(FATAL_ERROR "generate ${name}: exit '${rc}' and standard error\n${err}\nexpected "
                        "exit ${rc_expected} and a message containing '${err_expected}'")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

set(prompt --prompt "1 54" --max-new-tokens 3)
run("greedy" 0 "" "${GOLDEN}" ${prompt})
set(greedy "${out}")
if(NOT greedy MATCHES "^[0-9]+ [0-9]+ [0-9]+\n$")
  message(FATAL_ERROR "generate printed '${greedy}', expected three ids")
endif()

# Output that cannot be written.
execute_process(COMMAND "${GENERATE}" "${GOLDEN}" ${prompt} OUTPUT_FILE /dev/full
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT err MATCHES "generate: cannot write to standard output: No space")
  message(FATAL_ERROR "generate > /dev/full: exit '${rc}', standard error '${err}'")
endif()
execute_process(COMMAND "${GENERATE}" --help OUTPUT_FILE /dev/full
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT err MATCHES "generate: cannot write to standard output")
  message(FATAL_ERROR "generate --help > /dev/full: exit '${rc}', standard error '${err}'")
endif()
execute_process(COMMAND sh -c "exec \"$0\" \"$@\" >&-" "${GENERATE}" "${GOLDEN}" ${prompt}
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT err MATCHES "generate: cannot write to standard output")
  message(FATAL_ERROR "generate >&-: exit '${rc}', standard error '${err}'")
endif()

# Numbers out of range, and the valid extremes.
run("--threads 2^64 + ..." 2 "--threads needs a whole number from 1 to 1024, got \"99999999999999999999\""
    "${GOLDEN}" ${prompt} --threads 99999999999999999999)
run("--threads 2^31" 2 "--threads needs a whole number from 1 to 1024" "${GOLDEN}" ${prompt}
    --threads 2147483648)
run("--threads 0" 2 "--threads needs a whole number from 1 to 1024" "${GOLDEN}" ${prompt}
    --threads 0)
run("--threads 1024" 0 "" "${GOLDEN}" ${prompt} --threads 1024)
run("--max-new-tokens 2^64" 2 "--max-new-tokens needs a whole number from 0 to 9223372036854775807"
    "${GOLDEN}" --prompt "1" --max-new-tokens 18446744073709551616)
run("--max-new-tokens 2^63" 2 "--max-new-tokens needs a whole number" "${GOLDEN}" --prompt "1"
    --max-new-tokens 9223372036854775808)
run("--max-new-tokens -1" 2 "--max-new-tokens needs a whole number" "${GOLDEN}" --prompt "1"
    --max-new-tokens -1)
run("--top-k +3" 2 "--top-k needs a whole number" "${GOLDEN}" ${prompt} --top-k +3)
run("--seed -1" 2 "--seed needs a whole number from 0 to 18446744073709551615, got \"-1\""
    "${GOLDEN}" ${prompt} --seed -1)
run("--seed 2^64" 2 "--seed needs a whole number from 0 to 18446744073709551615"
    "${GOLDEN}" ${prompt} --seed 18446744073709551616)
run("--seed 2^64 - 1" 0 "" "${GOLDEN}" ${prompt} --seed 18446744073709551615 --temperature 1)
if(NOT out MATCHES "^[0-9]+ [0-9]+ [0-9]+\n$")
  message(FATAL_ERROR "generate --seed 18446744073709551615 printed '${out}'")
endif()
run("--temperature 1e400" 2 "--temperature needs a finite number >= 0" "${GOLDEN}" ${prompt}
    --temperature 1e400)
# The model's 256 positions: a prompt of 2 and 255 new tokens fit, 256 do not.
run("--max-new-tokens past max_position_embeddings" 1 "max_position_embeddings = 256"
    "${GOLDEN}" --prompt "1 54" --max-new-tokens 256)
run("--max-new-tokens 2^63 - 1" 1 "max_position_embeddings = 256"
    "${GOLDEN}" --prompt "1 54" --max-new-tokens 9223372036854775807)
# A tiny temperature is greedy in the limit, not the least likely token.
run("--temperature 1e-310" 0 "" "${GOLDEN}" ${prompt} --temperature 1e-310 --seed 7)
if(NOT out STREQUAL greedy)
  message(FATAL_ERROR "generate --temperature 1e-310 printed '${out}', greedy printed '${greedy}'")
endif()
