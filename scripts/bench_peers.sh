#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# headwise against its peers in one interleaved run of bench/run.py, the same inputs for all:
#   attention (default)  MultiheadAttention against PyTorch 2.x (nn.MultiheadAttention and a layer
#                        on SDPA) and ONNX Runtime: training steps and inference at the default
#                        shapes, long sequences (L = 4096, causal and not, time and peak memory),
#                        decode steps at caches of 128 / 2048 / 8192 tokens, outputs compared
#   --minilm             all-MiniLM-L6-v2 against sentence-transformers, ONNX Runtime, CTranslate2
#   --smollm2            SmolLM2-135M Q4_1 against llama.cpp and transformers (tg128, pp512)
# 1 and 2 threads for every engine. Prints the tables; writes bench/results/<date>-<suite>.json
# and its plot (bench/plot.py).
#
#   bash scripts/bench_peers.sh                    the attention set: about 15 minutes on 2 cores
#   bash scripts/bench_peers.sh --quick            (8, 128, 512, 8) and the decode steps, 2 rounds
#   bash scripts/bench_peers.sh --consumer         adds headwise-plain: the worker built as a new
#                                                  user builds it, timed beside the release build
#   bash scripts/bench_peers.sh --minilm | --smollm2
#   bash scripts/bench_peers.sh -- --long 4096 16384   more bench/run.py flags (--rounds, ...)
#
# Installs the peers once into the cached virtual environment of scripts/peers.sh (PyPI; never
# in CI; llama.cpp from scripts/llama_cpp.sh for --smollm2) and builds the workers (bench_peers,
# bench_minilm, bench_llama) twice: in build/bench/peers (the release preset's flags: Release,
# -march=native, the default HEADWISE_BLAS=AUTO, a CBLAS when found; the engine headwise) and in
# build/bench/peers-omp (the same with HEADWISE_USE_OPENMP=ON: headwise-omp, headwise's 2-thread
# configuration, OpenMP threads with the BLAS at 1 thread per call). With --consumer, also
# bench/consumer against headwise installed from a default configuration (plain
# -DCMAKE_BUILD_TYPE=Release, default options, no -march) in build/bench/peers-plain.
# $HEADWISE_PEERS_BUILD, $HEADWISE_PEERS_OMP_BUILD and $HEADWISE_PEERS_PLAIN_BUILD move them;
# $HEADWISE_BENCH_JOBS sets the build's parallel jobs (default 2). The environment is
# scripts/bench_env.sh's.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

declare -a extra=()
consumer=0
quick=0
suite=attention
while (($# > 0)); do
    case "$1" in
        --quick) quick=1 ;;
        --consumer) consumer=1 ;;
        --minilm) suite=minilm ;;
        --smollm2) suite=llama ;;
        --) shift; extra+=("$@"); break ;;
        -h | --help) sed -n '3,32p' "${BASH_SOURCE[0]}" | sed -e 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "headwise: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
    shift
done

# shellcheck source=scripts/peers.sh
source scripts/peers.sh
headwise_peers

jobs="${HEADWISE_BENCH_JOBS:-2}"
build="${HEADWISE_PEERS_BUILD:-build/bench/peers}"
omp_build="${HEADWISE_PEERS_OMP_BUILD:-build/bench/peers-omp}"
for dir in "${build}" "${omp_build}"; do
    if [[ ! -f "${dir}/CMakeCache.txt" ]]; then
        declare -a openmp=()
        [[ "${dir}" == "${omp_build}" ]] && openmp=(-DHEADWISE_USE_OPENMP=ON)
        cmake -S . -B "${dir}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS=-march=native \
            -DHEADWISE_BUILD_TESTS=OFF -DHEADWISE_BUILD_EXAMPLES=OFF \
            -DHEADWISE_BUILD_BENCHMARKS=ON ${openmp[@]+"${openmp[@]}"}
    fi
    cmake --build "${dir}" --target bench_peers bench_minilm bench_llama -j"${jobs}"
done
declare -a suite_args=(--build "${build}" --threads 1 2)
case "${suite}" in
    attention)
        engines=(headwise headwise-omp torch-mha torch-sdpa ort)
        ((consumer)) && engines+=(headwise-plain)
        suite_args+=(--omp-build "${omp_build}" --engines "${engines[@]}") ;;
    minilm) suite_args+=(--model "$(headwise_minilm_dir)" --rounds 7) ;;
    llama)
        suite_args+=(--model "$(headwise_smollm2_gguf)" --rounds 3 --omp-build "${omp_build}"
            --engines headwise headwise-omp llama.cpp transformers) ;;
esac
if ((quick)); then
    suite_args+=(--rounds 2)
    [[ "${suite}" == attention ]] && suite_args+=(--shapes "8,128,512,8" --long)
fi

if ((consumer)); then
    # As a new user: headwise configured with its defaults and installed, then a project of
    # one's own on find_package(headwise), plain Release, no flags.
    plain="${HEADWISE_PEERS_PLAIN_BUILD:-build/bench/peers-plain}"
    if [[ ! -f "${plain}/headwise/CMakeCache.txt" ]]; then
        cmake -S . -B "${plain}/headwise" -DCMAKE_BUILD_TYPE=Release \
            -DHEADWISE_BUILD_TESTS=OFF -DHEADWISE_BUILD_EXAMPLES=OFF -DHEADWISE_BUILD_BENCHMARKS=OFF
    fi
    cmake --install "${plain}/headwise" --prefix "${plain}/install"
    if [[ ! -f "${plain}/consumer/CMakeCache.txt" ]]; then
        cmake -S bench/consumer -B "${plain}/consumer" -DCMAKE_BUILD_TYPE=Release \
            -DCMAKE_PREFIX_PATH="$(realpath -m "${plain}/install")"
    fi
    cmake --build "${plain}/consumer" -j"${jobs}"
    suite_args+=(--plain-program "${plain}/consumer/bench_peers")
fi

mkdir -p build/bench
# shellcheck source=scripts/bench_env.sh
source scripts/bench_env.sh
headwise_bench_env build/bench
echo "headwise: load before the run: $(cat /proc/loadavg)"
json="bench/results/$(date -u +%F)-${suite}.json"
"${HEADWISE_PEERS_PYTHON}" bench/run.py "${suite}" "${suite_args[@]}" --json "${json}" \
    ${extra[@]+"${extra[@]}"}
"${HEADWISE_PEERS_PYTHON}" bench/plot.py "${json}"
