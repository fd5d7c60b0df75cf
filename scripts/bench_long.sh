#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The long-sequence benchmarks: headwise's blocked and materialised attention kernels inside the
# layer (`bench/run.py long`, bench/bench_long.cpp), time and extra peak memory, L from 256 to 4096
# (default) or 8192 (--full) at B = 1, E = 512, H = 8, inference and training, causal and not;
# then, when the peers' environment of scripts/peers.sh exists, the layer against torch's
# (nn.MultiheadAttention and the SDPA layer) at L = 1024 and 4096 (`bench/run.py attention`'s
# long cases, 1 thread).
#
#   bash scripts/bench_long.sh [--full] [-- <bench/run.py long flags>]
#   HEADWISE_BENCH_NO_TORCH=1 bash scripts/bench_long.sh     without torch
#
# scripts/bench.sh runs it after its own set. Builds bench_long and bench_peers in
# build/bench/long (Release, -march=native, the CBLAS backend on OpenBLAS, one thread) and writes
# bench/results/<date>-long.json (and <date>-attention-long.json) with their plots. The environment is
# scripts/bench_env.sh's, as in bench.sh.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

declare -a extra=()
while (($# > 0)); do
    case "$1" in
        --full) extra+=(--full) ;;
        --) shift; extra+=("$@"); break ;;
        -h | --help) sed -n '3,16p' "${BASH_SOURCE[0]}" | sed -e 's/^# \{0,1\}//'; exit 0 ;;
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
cmake --build "${build}" --target bench_long bench_peers -j2

# shellcheck source=scripts/bench_env.sh
source scripts/bench_env.sh
headwise_bench_env "${build}"
peers="$(headwise_peers_python || true)"
python="${peers:-$(command -v python3)}"
day="$(date -u +%F)"
echo "headwise: load before the run: $(cat /proc/loadavg)"
"${python}" bench/run.py long --build "${build}" --rounds 3 --json "bench/results/${day}-long.json" \
    ${extra[@]+"${extra[@]}"}
if [[ "${HEADWISE_BENCH_NO_TORCH:-0}" == "1" || -z "${peers}" ]]; then
    echo "headwise: no torch comparison (HEADWISE_BENCH_NO_TORCH=1, or no peers environment:" \
        "bash scripts/peers.sh)"
    exit 0
fi
"${python}" bench/run.py attention --build "${build}" --engines headwise torch-mha torch-sdpa \
    --shapes --no-decode --long 1024 4096 --threads 1 \
    --json "bench/results/${day}-attention-long.json"
"${python}" bench/plot.py "bench/results/${day}-long.json" "bench/results/${day}-attention-long.json"
