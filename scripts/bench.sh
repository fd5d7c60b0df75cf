#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# MultiheadAttention's projections side by side: builds bench/bench_mha (Release, -march=native,
# the CBLAS backend on OpenBLAS) and runs `bench/run.py mha`: fused against per_head against
# separate, forward_eval and forward_backward at the main shapes and over the head sweep, one
# thread, medians of 5 interleaved repetitions. Prints the table; writes
# bench/results/<date>-mha.json and its plot (bench/plot.py, with matplotlib).
#
#   bash scripts/bench.sh              a few minutes
#   bash scripts/bench.sh --builds     also the Eigen backend and builds without -march, the
#                                      fused projection's main shapes in each (an engine per build)
#   bash scripts/bench.sh -- <bench/run.py mha flags>   (--rounds, --filter, --json ...)
#
# Then decoding with a KV cache (bench/bench_decode, Google Benchmark's table) and the long
# sequences (scripts/bench_long.sh). headwise against PyTorch 2.x and ONNX Runtime, on the same
# weights: scripts/bench_peers.sh. The environment is scripts/bench_env.sh's (OpenBLAS choosing
# its kernels for this CPU, glibc's malloc thresholds pinned).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

all_builds=0
declare -a extra=()
while (($# > 0)); do
    case "$1" in
        --builds) all_builds=1 ;;
        --) shift; extra+=("$@"); break ;;
        -h | --help) sed -n '3,18p' "${BASH_SOURCE[0]}" | sed -e 's/^# \{0,1\}//'; exit 0 ;;
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

# shellcheck source=scripts/bench_env.sh
source scripts/bench_env.sh
headwise_bench_env "${root}"
python="$(command -v python3)"
[[ -n "${HEADWISE_PEERS_PYTHON:-}" ]] && python="${HEADWISE_PEERS_PYTHON}"
echo "headwise: load before the run: $(cat /proc/loadavg)"
declare -a mha_args=(--build "${dirs[@]}")
((all_builds)) && mha_args+=(--filter "^mha/(forward_eval|forward_backward)/fused/float/")
json="bench/results/$(date -u +%F)-mha.json"
"${python}" bench/run.py mha "${mha_args[@]}" --json "${json}" ${extra[@]+"${extra[@]}"}
"${python}" bench/plot.py "${json}" || echo "headwise: no plot (matplotlib missing)"

# --- Decoding with a KV cache, then the long sequences -------------------------------------------
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "${root}/cblas-native/bench/bench_decode" \
    --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
    --benchmark_enable_random_interleaving=true
bash scripts/bench_long.sh
