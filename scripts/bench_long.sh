#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The long-sequence benchmarks: headwise's blocked and materialised attention kernels and torch
# 1.13, time and peak memory, L from 256 to 4096 (default) or 8192 (--full) at B = 1, E = 512,
# H = 8, inference and training, causal and not; a table, the targets and a log-log plot.
#
#   bash scripts/bench_long.sh [--full] [-- <Google Benchmark flags>]
#   HEADWISE_BENCH_NO_TORCH=1 bash scripts/bench_long.sh     without torch
#
# scripts/bench.sh runs it after its own set (the same --full). Builds bench/bench_long in
# build/bench/long (Release, -march=native, the CBLAS backend on OpenBLAS as in bench.sh's primary
# run, one thread) and writes build/bench/long/bench_long.json, bench_long_torch.json and
# bench_long.png there. The environment is scripts/bench_env.sh's, as in bench.sh.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

full=0
declare -a extra=()
while (($# > 0)); do
    case "$1" in
        --full) full=1 ;;
        --) shift; extra+=("$@"); break ;;
        -h | --help) sed -n '3,12p' "${BASH_SOURCE[0]}" | sed -e 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "headwise: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
    shift
done

build=build/bench/long
bash scripts/deps.sh
echo "headwise: configuring and building ${build} (Release -march=native, CBLAS on OpenBLAS)"
cmake -S . -B "${build}" -DCMAKE_BUILD_TYPE=Release -DHEADWISE_BUILD_TESTS=OFF \
    -DHEADWISE_BUILD_EXAMPLES=OFF -DHEADWISE_BUILD_BENCHMARKS=ON -DHEADWISE_BLAS=ON \
    -DBLA_VENDOR=OpenBLAS -DCMAKE_CXX_FLAGS=-march=native >/dev/null
cmake --build "${build}" --target bench_long -j2

# One thread on both sides: the targets are single-thread figures.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# shellcheck source=scripts/bench_env.sh
source scripts/bench_env.sh
headwise_bench_env "${build}"
build_type=Release
json="${build}/bench_long.json"
started=${SECONDS}
echo "headwise: running ${build}/bench/bench_long (full=${full}, 3 repetitions)"
# Memory is measured per case from the resident set, which a process keeps: the cases run in
# their registered order (no interleaving), each after malloc_trim (see bench/bench_long.cpp).
"${build}/bench/bench_long" \
    --benchmark_repetitions=3 \
    --benchmark_min_time=0.2 \
    --benchmark_report_aggregates_only=true \
    --benchmark_out="${json}" \
    --benchmark_out_format=json \
    --benchmark_context="build_type=${build_type:-unknown},blas_core=${HEADWISE_BENCH_OPENBLAS_CORE:-?},threads=1,full=${full}" \
    $( ((full)) && echo --full) \
    ${extra[@]+"${extra[@]}"}

python=/usr/bin/python3
[[ -x "${python}" ]] || python="$(command -v python3 || true)"
if [[ -z "${python}" ]]; then
    echo "headwise: python3 not found: no table (the JSON is complete)"
    exit 0
fi
torch_json="${build}/bench_long_torch.json"
rm -f "${torch_json}"
if [[ "${HEADWISE_BENCH_NO_TORCH:-0}" == "1" ]]; then
    echo "headwise: HEADWISE_BENCH_NO_TORCH=1: no torch comparison"
else
    "${python}" bench/long_torch.py --json "${torch_json}" $( ((full)) && echo --full) ||
        echo "headwise: the torch measurement failed; the table below is ours alone"
fi
"${python}" bench/long_report.py "${json}" --torch "${torch_json}" --png "${build}/bench_long.png"
echo "headwise: long-sequence benchmarks done in $((SECONDS - started)) s"
