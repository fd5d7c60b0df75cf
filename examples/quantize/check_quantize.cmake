# SPDX-License-Identifier: MIT
# Runs the quantize program (cmake -P):
#   -D QUANTIZE=<quantize> -D CHECK=<check_quantize> -D WORK=<a scratch directory>
#   -D OTHER_GGUF=<a GGUF file of another architecture> -D GOLDEN=<tests/golden>
# Bad command lines: exit status 2 and a message naming the problem; inputs that cannot be read
# or are no Llama model: exit status 1 naming the file. Then a small Hugging Face directory
# (check_quantize make; also in two shards) is quantized to every type, and check_quantize compares each output with
# what it must hold (metadata, tokenizer, names, types, blocks); the q8_0 file, quantized again
# as a GGUF input to q4_k_m and q6_k, is checked the same way.

# run(<name> <expected exit status> <text expected on standard error> ARGS...)
function(run name rc_expected err_expected)
  execute_process(COMMAND "${QUANTIZE}" ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(FIND "${err}" "${err_expected}" at)
  if(NOT rc STREQUAL "${rc_expected}" OR at EQUAL -1)
    message(FATAL_ERROR "quantize ${name}: exit '${rc}' and standard error\n${err}\nexpected "
                        "exit ${rc_expected} and a message containing '${err_expected}'")
  endif()
endfunction()

function(check)
  execute_process(COMMAND "${CHECK}" ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "check_quantize ${ARGN}: exit '${rc}'\n${out}${err}")
  endif()
  message(STATUS "${out}")
endfunction()

file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
set(out "${WORK}/out.gguf")

run("no arguments" 2 "quantize: needs IN and OUT, got 0 file names\nusage: quantize IN OUT.gguf")
run("no --type" 2 "quantize: --type is required" in.gguf "${out}")
run("--type without a value" 2 "quantize: --type needs a value" in.gguf "${out}" --type)
run("an unknown type" 2
    "quantize: --type needs one of q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q6_k, q4_k_m, got \"q3_k\""
    in.gguf "${out}" --type q3_k)
run("an unknown option" 2 "quantize: unknown option \"--pure\"" in.gguf "${out}" --type q8_0 --pure)
run("three files" 2 "quantize: needs IN and OUT, got 3 file names" a b c --type q8_0)
run("a missing input" 1 "quantize: headwise::io::load_gguf: ${WORK}/none.gguf:"
    "${WORK}/none.gguf" "${out}" --type q8_0)
run("another architecture" 1
    "quantize: ${OTHER_GGUF}: general.architecture must be \"llama\", got"
    "${OTHER_GGUF}" "${out}" --type q8_0)
run("a directory without config.json" 1 "config.json" "${WORK}" "${out}" --type q8_0)
if(EXISTS "${out}")
  message(FATAL_ERROR "quantize wrote ${out} although it failed")
endif()

set(model "${WORK}/tiny-llama")
check(make "${model}")
foreach(type q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q6_k q4_k_m)
  run("${type}" 0 "" "${model}" "${WORK}/${type}.gguf" --type ${type})
  check(hf "${model}" "${WORK}/${type}.gguf" ${type})
endforeach()
# The same model in two shards (model.safetensors.index.json).
check(make "${WORK}/sharded" sharded)
run("sharded" 0 "" "${WORK}/sharded" "${WORK}/sharded.gguf" --type q4_k_m)
check(hf "${WORK}/sharded" "${WORK}/sharded.gguf" q4_k_m)
foreach(type q4_k_m q6_k)
  run("GGUF to ${type}" 0 "" "${WORK}/q8_0.gguf" "${WORK}/gguf_${type}.gguf" --type ${type})
  check(gguf "${WORK}/q8_0.gguf" "${WORK}/gguf_${type}.gguf" ${type})
endforeach()
# Rope scalings beyond linear: tests/golden/llama_variants' llama3 and yarn checkpoints give the
# keys and rope_freqs.weight that llama.cpp's converter writes (tests/golden/llama_gguf, by
# make_llama_gguf_golden.py); dynamic, which has no GGUF form, is refused.
run("rope type dynamic" 1 "config.json: rope type dynamic has no GGUF form llama.cpp reads"
    "${GOLDEN}/llama_variants/dynamic" "${WORK}/dynamic.gguf" --type q8_0)
foreach(name llama3 yarn)
  run("rope type ${name}" 0 "" "${GOLDEN}/llama_variants/${name}" "${WORK}/${name}.gguf"
      --type q8_0)
  check(rope "${WORK}/${name}.gguf" "${GOLDEN}/llama_gguf/${name}.gguf")
endforeach()
