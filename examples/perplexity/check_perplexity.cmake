# SPDX-License-Identifier: MIT
# Runs the perplexity program as a user would (cmake -P):
#   -D PERPLEXITY=<program> -D MODEL=<tests/golden/llama_text> -D TEXT=<a text file of a few
#   thousand tokens> -D WORK=<a scratch directory>
# The output: one line of running values "[1]x,[2]y,...", then "perplexity: X" last; the
# directory (MODEL/hf) and the GGUF file (MODEL/model.gguf, --weights float32) give the same
# numbers; the GGUF file's stored weights run; the errors (a missing TEXTFILE, --context out of
# range, a file too short for the window, a missing model).

function(run name rc_expected err_expected)
  execute_process(COMMAND "${PERPLEXITY}" ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(FIND "${err}" "${err_expected}" at)
  if(NOT rc STREQUAL "${rc_expected}" OR at EQUAL -1)
    message(FATAL_ERROR "perplexity ${name}: exit '${rc}' and standard error\n${err}\nexpected "
                        "exit ${rc_expected} and a message containing '${err_expected}'")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

set(format "^(\\[1\\][0-9]+\\.[0-9][0-9][0-9][0-9],(\\[[0-9]+\\][0-9]+\\.[0-9][0-9][0-9][0-9],)*)\nperplexity: [0-9]+\\.[0-9][0-9][0-9][0-9]\n$")
run("directory" 0 "" "${MODEL}/hf" "${TEXT}" --context 64)
set(hf "${out}")
if(NOT hf MATCHES "${format}")
  message(FATAL_ERROR "perplexity printed\n'${hf}'\nexpected [1]x,[2]y,... and 'perplexity: X'")
endif()
run("GGUF float32" 0 "" "${MODEL}/model.gguf" "${TEXT}" --context 64 --weights float32)
if(NOT out STREQUAL hf)
  message(FATAL_ERROR "perplexity of the GGUF file (float32)\n'${out}'\nof the directory\n'${hf}'")
endif()
run("GGUF stored" 0 "" "${MODEL}/model.gguf" "${TEXT}" --context 32 --threads 1)
if(NOT out MATCHES "${format}")
  message(FATAL_ERROR "perplexity (stored) printed\n'${out}'")
endif()

# Errors.
run("no TEXTFILE" 2 "perplexity: TEXTFILE is missing" "${MODEL}/hf")
run("--context 2" 2 "perplexity: --context needs a whole number from 3 to 1048576, got \"2\""
    "${MODEL}/hf" "${TEXT}" --context 2)
run("--weights q4" 2 "perplexity: --weights needs stored or float32, got \"q4\""
    "${MODEL}/hf" "${TEXT}" --weights q4)
file(MAKE_DIRECTORY "${WORK}")
file(WRITE "${WORK}/short.txt" "hello hello hello\n")
run("a short file" 1 "perplexity: ${WORK}/short.txt: tokenizes to 9 tokens; --context 64 needs at least 128"
    "${MODEL}/hf" "${WORK}/short.txt" --context 64)
run("a missing file" 1 "perplexity: ${WORK}/none.txt: cannot open the file"
    "${MODEL}/hf" "${WORK}/none.txt")
run("a missing model" 1 "${WORK}/none/tokenizer.json" "${WORK}/none" "${TEXT}")
