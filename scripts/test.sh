#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds and tests headwise the way CI does:
#   1. dev  : Debug, warnings as errors; unit tests, each header alone, ODR, consumers, examples,
#             and a start-up check of each benchmark program.
#   2. asan : the same under AddressSanitizer + UndefinedBehaviorSanitizer (Debug at -O1), less
#             the consumer projects (they build nothing of ours with sanitizers) and benchmarks.
#   3. cblas: the dev suite again with every GEMM through a CBLAS (HEADWISE_BLAS=ON, OpenBLAS
#             here), consumers included: they link the BLAS through find_package and pkg-config.
# Build trees: build/dev, build/asan, build/cblas. Logs: build/<preset>.log.
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
    summary+=("$(printf '  %-5s %4d tests passed in %4d s' \
        "${preset}" "${passed}" $((end - start)))")
}

run_workflow dev
run_workflow asan
run_workflow cblas

echo
echo "headwise: summary"
printf '%s\n' "${summary[@]}"
echo "headwise: ${total_passed} passed, ${total_failed} failed"
