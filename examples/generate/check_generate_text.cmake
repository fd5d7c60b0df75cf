# SPDX-License-Identifier: MIT
# Runs the generate program's text modes as a user would (cmake -P):
#   -D GENERATE=<program> -D MODEL=<tests/golden/llama_text> -D NO_TOKENIZER=<a model directory
#   without tokenizer.json> -D WORK=<a scratch directory>
# MODEL/hf is a Hugging Face directory (sharded weights, tokenizer.json, tokenizer_config.json
# with SmolLM2's chat template), MODEL/model.gguf the same model and tokenizer in one file.
#  - --tokens: the ids Hugging Face tokenizers gives (tests/golden/bpe/corpus.json), from the
#    arguments and from standard input, the same from both; BOS first when tokenizer_config.json
#    makes a LlamaTokenizerFast add it, not for a GPT2Tokenizer;
#  - --text, --chat with --ids and --ignore-eos: N ids; the directory and the GGUF file with
#    --weights float32 give the same ids and the same text;
#  - the errors: two prompts, --tokens with a prompt, a stray text, --chat without a template,
#    --tokens without tokenizer.json, a bad --weights.

# run(<name> <expected exit status> <text expected on standard error> ARGS...): sets `out`.
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

function(expect name got want)
  if(NOT got STREQUAL want)
    message(FATAL_ERROR "generate ${name}: got\n'${got}'\nexpected\n'${want}'")
  endif()
endfunction()

set(hf "${MODEL}/hf")
set(gguf "${MODEL}/model.gguf")

# --tokens: tokenizers' ids of "hello", of special and added tokens.
foreach(m "${hf}" "${gguf}")
  run("--tokens (${m})" 0 "" "${m}" --tokens "hello" "a<|im_end|>b<think>")
  expect("--tokens (${m})" "${out}" "261 78 294\n67 2 68 1759\n")
  file(WRITE "${WORK}/lines.txt" "hello\r\na<|im_end|>b<think>\n")
  execute_process(COMMAND "${GENERATE}" "${m}" --tokens INPUT_FILE "${WORK}/lines.txt"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  expect("--tokens < lines.txt (${m}) exit ${rc}: ${err}" "${out}" "261 78 294\n67 2 68 1759\n")
endforeach()

# The BOS rule: tokenizer_config.json's add_bos_token counts for LlamaTokenizerFast only.
file(REMOVE_RECURSE "${WORK}/bos" "${WORK}/gpt2" "${WORK}/no_template")
foreach(dir bos gpt2 no_template)
  file(MAKE_DIRECTORY "${WORK}/${dir}")
  file(COPY "${hf}/tokenizer.json" DESTINATION "${WORK}/${dir}")
endforeach()
file(WRITE "${WORK}/bos/tokenizer_config.json"
     "{\"tokenizer_class\": \"LlamaTokenizerFast\", \"add_bos_token\": true,
       \"bos_token\": \"<|endoftext|>\", \"eos_token\": \"<|im_end|>\"}")
run("--tokens (add_bos_token)" 0 "" "${WORK}/bos" --tokens "hello")
expect("--tokens (LlamaTokenizerFast, add_bos_token true)" "${out}" "0 261 78 294\n")
file(WRITE "${WORK}/gpt2/tokenizer_config.json"
     "{\"tokenizer_class\": \"GPT2Tokenizer\", \"add_bos_token\": true,
       \"bos_token\": \"<|endoftext|>\"}")
run("--tokens (GPT2Tokenizer)" 0 "" "${WORK}/gpt2" --tokens "hello")
expect("--tokens (GPT2Tokenizer, add_bos_token true)" "${out}" "261 78 294\n")

# Generation: the directory (float16 shards read as float) and the GGUF file dequantized give the
# same ids; --ignore-eos gives exactly N of them.
foreach(mode --text --chat)
  run("${mode} --ids (hf)" 0 "" "${hf}" ${mode} "The model" --ids --ignore-eos
      --max-new-tokens 12)
  set(ids_hf "${out}")
  if(NOT ids_hf MATCHES "^[0-9]+( [0-9]+)*\n$")
    message(FATAL_ERROR "generate ${mode} --ids printed '${ids_hf}', expected one line of ids")
  endif()
  string(REGEX MATCHALL "[0-9]+" n "${ids_hf}")
  list(LENGTH n count)
  expect("${mode} --ignore-eos --max-new-tokens 12: ids" "${count}" "12")
  run("${mode} --ids (gguf)" 0 "" "${gguf}" ${mode} "The model" --ids --ignore-eos
      --max-new-tokens 12 --weights float32)
  expect("${mode} --ids: GGUF float32 against the directory" "${out}" "${ids_hf}")
  run("${mode} (hf)" 0 "" "${hf}" ${mode} "The model" --ignore-eos --max-new-tokens 12)
  set(text_hf "${out}")
  if(NOT text_hf MATCHES "\n$")
    message(FATAL_ERROR "generate ${mode} printed '${text_hf}', expected text ending in a newline")
  endif()
  run("${mode} (gguf)" 0 "" "${gguf}" ${mode} "The model" --ignore-eos --max-new-tokens 12
      --weights float32)
  expect("${mode}: GGUF float32 against the directory" "${out}" "${text_hf}")
  run("${mode} (gguf, stored)" 0 "" "${gguf}" ${mode} "The model" --max-new-tokens 4)
endforeach()
run("--max-new-tokens 0" 0 "" "${hf}" --text "hi" --max-new-tokens 0)
expect("--text --max-new-tokens 0" "${out}" "\n")

# Errors.
run("--text with --prompt" 2 "generate: --text and --prompt cannot be given together: expected one of --text, --chat, --prompt"
    "${hf}" --text "hi" --prompt "1 2")
run("--chat with --text" 2 "generate: --text and --chat cannot be given together"
    "${hf}" --chat "hi" --text "hi")
run("--tokens with --chat" 2 "generate: --tokens prints token ids and exits; it takes no --chat"
    "${hf}" --tokens --chat "hi")
run("a text without --tokens" 2 "generate: unexpected argument \"hello\" (texts after MODEL are read with --tokens only)"
    "${hf}" hello --text "hi")
run("no prompt" 2 "generate: a prompt is missing: expected --text, --chat or --prompt (or --tokens)"
    "${hf}")
run("--weights int8" 2 "generate: --weights needs stored or float32, got \"int8\""
    "${gguf}" --text "hi" --weights int8)
file(WRITE "${WORK}/no_template/tokenizer_config.json" "{\"eos_token\": \"<|im_end|>\"}")
run("--chat without a template" 1
    "generate: --chat needs a model with a chat template; ${WORK}/no_template has none (looked in ${WORK}/no_template/tokenizer_config.json (no chat_template))"
    "${WORK}/no_template" --chat "hi")
run("--tokens without tokenizer.json" 1
    "generate: headwise::text::PretrainedTokenizer::from_pretrained: ${NO_TOKENIZER}/tokenizer.json: no such file"
    "${NO_TOKENIZER}" --tokens "hi")
run("--text without tokenizer.json" 1 "${NO_TOKENIZER}/tokenizer.json: no such file"
    "${NO_TOKENIZER}" --text "hi")
run("a missing GGUF file" 1 "${WORK}/none.gguf" "${WORK}/none.gguf" --text "hi")
