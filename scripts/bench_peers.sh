#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# headwise against PyTorch 2.x and ONNX Runtime in one interleaved run (bench/peers.py): training
# steps and inference at the default shapes, long sequences (L = 4096, causal and not, time and
# peak memory), decode steps at caches of 128 / 2048 / 8192 tokens, 1 and 2 threads for every
# engine, the same weights for all, outputs compared. Prints the tables; writes the JSON and a plot.
#
#   bash scripts/bench_peers.sh                    the whole set: about 15 minutes on 2 cores
#   bash scripts/bench_peers.sh --quick            (8, 128, 512, 8) and the decode steps, 2 rounds
#   bash scripts/bench_peers.sh -- --long 4096 16384   more bench/peers.py flags (--rounds, ...)
#
# Installs the peers once into the cached virtual environment of scripts/peers.sh (PyPI; never
# in CI), builds bench/bench_peers in build/bench/peers (Release, -march=native, the default
# HEADWISE_BLAS=AUTO: a CBLAS when found) or in $HEADWISE_PEERS_BUILD, and writes
# build/bench/peers.json and build/bench/peers.png. The environment is scripts/bench_env.sh's.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

declare -a extra=()
while (($# > 0)); do
    case "$1" in
        --quick) extra+=(--quick) ;;
        --) shift; extra+=("$@"); break ;;
        -h | --help) sed -n '3,15p' "${BASH_SOURCE[0]}" | sed -e 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "headwise: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
    shift
done

# shellcheck source=scripts/peers.sh
source scripts/peers.sh
headwise_peers

build="${HEADWISE_PEERS_BUILD:-build/bench/peers}"
if [[ ! -f "${build}/CMakeCache.txt" ]]; then
    cmake -S . -B "${build}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS=-march=native \
        -DHEADWISE_BUILD_TESTS=OFF -DHEADWISE_BUILD_EXAMPLES=OFF -DHEADWISE_BUILD_BENCHMARKS=ON
fi
cmake --build "${build}" --target bench_peers -j2

mkdir -p build/bench
# shellcheck source=scripts/bench_env.sh
source scripts/bench_env.sh
headwise_bench_env build/bench
echo "headwise: load before the run: $(cat /proc/loadavg)"
"${HEADWISE_PEERS_PYTHON}" bench/peers.py --headwise "${build}/bench/bench_peers" \
    --json build/bench/peers.json --png build/bench/peers.png ${extra[@]+"${extra[@]}"}
