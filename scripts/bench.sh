#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the release preset (-O3 -march=native, benchmarks on, tests and examples off) and runs
# the benchmark driver, build/release/bench/bench_mha, writing build/release/bench.json.
#
#   bash scripts/bench.sh            the quick set: 3 repetitions per case
#   bash scripts/bench.sh --full     the full set: 10 repetitions, and HEADWISE_BENCH_FULL=1 in the
#                                    environment so the benchmark registers its larger shapes
#   bash scripts/bench.sh [--full] -- <Google Benchmark flags>   e.g. --benchmark_filter=fused
#
# Speed claims are ratios of medians within one run, so every case reports aggregates only.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

full=0
declare -a extra=()
while (($# > 0)); do
    case "$1" in
        --full) full=1 ;;
        --) shift; extra+=("$@"); break ;;
        -h | --help) sed -n '3,11p' "${BASH_SOURCE[0]}" | sed -e 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "headwise: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
    shift
done
export HEADWISE_BENCH_FULL="${full}"

bash scripts/deps.sh

build=build/release
echo "headwise: configuring and building the release preset (benchmarks only) ..."
cmake --preset release -DHEADWISE_BUILD_TESTS=OFF -DHEADWISE_BUILD_EXAMPLES=OFF
cmake --build --preset release

driver="${build}/bench/bench_mha"
json="${build}/bench.json"
if [[ ! -x "${driver}" ]]; then
    echo "headwise: ${driver} was not built (no bench/bench_mha.cpp yet); nothing to run"
    exit 0
fi

# Threads the kernels may use: one unless headwise was built with OpenMP.
threads=1
if grep -q '^HEADWISE_USE_OPENMP:BOOL=ON' "${build}/CMakeCache.txt"; then
    threads="${OMP_NUM_THREADS:-$(nproc)}"
fi
repetitions=3
if ((full)); then
    repetitions=10
fi

echo "headwise: running ${driver} (full=${full}, threads=${threads}, repetitions=${repetitions})"
# Debian's libbenchmark reports itself as a debug build; record what headwise was built as.
"${driver}" \
    --benchmark_repetitions="${repetitions}" \
    --benchmark_report_aggregates_only=true \
    --benchmark_out="${json}" \
    --benchmark_out_format=json \
    --benchmark_context="build_type=Release,threads=${threads},full=${full}" \
    ${extra[@]+"${extra[@]}"}
echo "headwise: results in ${json}"

# --- Report table -------------------------------------------------------------------------------
# The table (ratios of per_head and separate to fused, per scalar and shape) is printed by
# bench/report.py from the JSON above.
if [[ -f bench/report.py ]]; then
    /usr/bin/python3 bench/report.py "${json}"
fi
