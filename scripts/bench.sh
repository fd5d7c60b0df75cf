#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# MultiheadAttention's projections side by side: builds bench/bench_mha (Release, -march=native,
# the CBLAS backend on OpenBLAS; and an OpenMP build of it) and runs `bench/run.py mha`: fused
# against per_head against separate, forward_eval and forward_backward at the main shapes and over
# the head sweep, one thread, medians of 5 interleaved repetitions, with the roofline (the bare
# GEMM of the fused projection, the FMA peak); then the main shapes on 1 and 2 threads, the
# BLAS's threads and OpenMP's (mha_threads). Prints the tables; writes
# bench/results/<date>-mha.json and its plot (bench/plot.py, with matplotlib).
#
#   bash scripts/bench.sh              a few minutes
#   bash scripts/bench.sh --builds     also the Eigen backend and builds without -march, the
#                                      fused projection's main shapes in each (an engine per build)
#   bash scripts/bench.sh -- <bench/run.py flags>   (--rounds ...: for the mha and decode runs)
#
# Then decoding with a KV cache (`bench/run.py decode`: bench/bench_decode, results in
# bench/results/<date>-decode.json) and the long sequences (scripts/bench_long.sh). headwise
# against PyTorch 2.x and ONNX Runtime, on the same weights: scripts/bench_peers.sh. The
# environment is scripts/bench_env.sh's (OpenBLAS choosing its kernels for this CPU, glibc's
# malloc thresholds pinned).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

all_builds=0
declare -a extra=()
while (($# > 0)); do
    case "$1" in
        --builds) all_builds=1 ;;
        --) shift; extra+=("$@"); break ;;
        -h | --help) sed -n '3,20p' "${BASH_SOURCE[0]}" | sed -e 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "headwise: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
    shift
done

bash scripts/deps.sh

root=build/bench
declare -A flags=(
    [cblas-native]="-DHEADWISE_BLAS=ON -DCMAKE_CXX_FLAGS=-march=native"
    [eigen-native]="-DHEADWISE_BLAS=OFF -DCMAKE_CXX_FLAGS=-march=native"
    [cblas-portable]="-DHEADWISE_BLAS=ON -DCMAKE_CXX_FLAGS="
    [eigen-portable]="-DHEADWISE_BLAS=OFF -DCMAKE_CXX_FLAGS="
)
builds=(cblas-native)
((all_builds)) && builds=(cblas-native eigen-native cblas-portable eigen-portable)
declare -a dirs=()
for name in "${builds[@]}"; do
    echo "headwise: configuring and building ${root}/${name} (Release ${flags[${name}]})"
    # shellcheck disable=SC2086  # the flags are words
    cmake -S . -B "${root}/${name}" -DCMAKE_BUILD_TYPE=Release -DHEADWISE_BUILD_TESTS=OFF \
        -DHEADWISE_BUILD_EXAMPLES=OFF -DHEADWISE_BUILD_BENCHMARKS=ON -DBLA_VENDOR=OpenBLAS \
        ${flags[${name}]} >/dev/null
    cmake --build "${root}/${name}" --target bench_mha bench_decode -j2
    dirs+=("${root}/${name}")
done
omp="${root}/cblas-native-omp"
echo "headwise: configuring and building ${omp} (Release, OpenMP)"
cmake -S . -B "${omp}" -DCMAKE_BUILD_TYPE=Release -DHEADWISE_BUILD_TESTS=OFF \
    -DHEADWISE_BUILD_EXAMPLES=OFF -DHEADWISE_BUILD_BENCHMARKS=ON -DBLA_VENDOR=OpenBLAS \
    -DHEADWISE_BLAS=ON -DHEADWISE_USE_OPENMP=ON -DCMAKE_CXX_FLAGS=-march=native >/dev/null
cmake --build "${omp}" --target bench_mha -j2

# shellcheck source=scripts/bench_env.sh
source scripts/bench_env.sh
headwise_bench_env "${root}"
python="$(headwise_peers_python || command -v python3)"
echo "headwise: load before the run: $(cat /proc/loadavg)"
declare -a mha_args=(--build "${dirs[@]}" --threads 1 2 --omp-build "${omp}")
fused="mha/(forward_eval|forward_backward)/fused/float/"
((all_builds)) && mha_args+=(--filter "^(${fused}|roofline/(gemm_qkv|fma_peak)/)")
day="$(date -u +%F)"
for suite in mha decode; do
    declare -a args=(--build "${dirs[0]}")
    [[ "${suite}" == mha ]] && args=("${mha_args[@]}")
    json="bench/results/${day}-${suite}.json"
    "${python}" bench/run.py "${suite}" "${args[@]}" --json "${json}" ${extra[@]+"${extra[@]}"}
    "${python}" bench/plot.py "${json}" || echo "headwise: no plot (matplotlib missing)"
done

# --- The long sequences -------------------------------------------------------------------------
bash scripts/bench_long.sh
