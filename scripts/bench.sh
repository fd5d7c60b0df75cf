#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds bench/bench_mha in five configurations and runs them, with torch.nn.MultiheadAttention on
# the same shapes (bench/compare_torch.py, skipped without torch) at 1 thread right after the
# primary run and at 2 threads after the 2-thread runs, and prints the tables and the issue's
# targets (bench/report.py). One run gives every figure:
#
#   build (build/bench/<name>)  GEMM backend  flags                 runs
#   cblas-native                CBLAS         Release -march=native the default set, 1 thread; the
#                                                                   main shapes on 1 and 2 BLAS
#                                                                   threads
#   eigen-native                Eigen         Release -march=native main shapes, 1 thread
#   cblas-portable              CBLAS         Release (no -march)   main shapes, 1 thread
#   eigen-portable              Eigen         Release (no -march)   main shapes, 1 thread
#   cblas-native-omp            CBLAS+OpenMP  Release -march=native main shapes on 1 and 2 OpenMP
#                                                                   threads, BLAS 1 thread per call
#
#   bash scripts/bench.sh            the default set: a few minutes
#   bash scripts/bench.sh --full     the primary run adds double, forward_train, backward alone
#                                    and (1, 4096, 512, 8) forward; longer minimum times
#   bash scripts/bench.sh [--full] -- <Google Benchmark flags>   for the primary run only
#   HEADWISE_BENCH_NO_TORCH=1 bash scripts/bench.sh              without the torch comparison
#   HEADWISE_BENCH_KEEP_OPENBLAS_ENV=1 bash scripts/bench.sh     keep OPENBLAS_CORETYPE/_L2_SIZE
#
# Then decoding with a KV cache (bench/bench_decode.cpp in the cblas-native build, and
# bench/torch_decode.py): one token's step against recomputing the prefix and against torch's
# single-query step, and grouped-query caches. Then the long-sequence set (scripts/bench_long.sh,
# the same --full): the blocked and materialised attention kernels against torch, L up to 4096
# (8192 with --full), time and peak memory, in its own build (build/bench/long).
#
# OpenBLAS: by default every benchmark process (ours and torch's, which also runs on OpenBLAS)
# lets OpenBLAS pick its kernels and cache sizes for this CPU, as on a user's machine: an
# OPENBLAS_CORETYPE or OPENBLAS_L2_SIZE inherited from the environment is dropped, and said so.
# The kernel OpenBLAS ran is in the tables' header (blas_core). Thread counts are pinned:
# OPENBLAS_NUM_THREADS=1 and OMP_NUM_THREADS=1 for 1-thread runs.
#
# Writes build/bench/<name>/bench*.json (Google Benchmark, with build, threads and backend in
# its context), build/bench/torch-<threads>.json and build/bench/bench.png (python3-matplotlib).
# Speed claims are ratios of medians within one run, so every case reports aggregates only.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

full=0
declare -a extra=()
while (($# > 0)); do
    case "$1" in
        --full) full=1 ;;
        --) shift; extra+=("$@"); break ;;
        -h | --help) sed -n '3,37p' "${BASH_SOURCE[0]}" | sed -e 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "headwise: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
    shift
done
export HEADWISE_BENCH_FULL="${full}"

bash scripts/deps.sh

root=build/bench
mkdir -p "${root}"
started=${SECONDS}

# --- builds -------------------------------------------------------------------------------------
declare -A flags=(
    [cblas-native]="-DHEADWISE_BLAS=ON -DCMAKE_CXX_FLAGS=-march=native"
    [eigen-native]="-DHEADWISE_BLAS=OFF -DCMAKE_CXX_FLAGS=-march=native"
    [cblas-portable]="-DHEADWISE_BLAS=ON -DCMAKE_CXX_FLAGS="
    [eigen-portable]="-DHEADWISE_BLAS=OFF -DCMAKE_CXX_FLAGS="
    [cblas-native-omp]="-DHEADWISE_BLAS=ON -DHEADWISE_USE_OPENMP=ON -DCMAKE_CXX_FLAGS=-march=native"
)
builds=(cblas-native eigen-native cblas-portable eigen-portable cblas-native-omp)
for name in "${builds[@]}"; do
    echo "headwise: configuring and building ${root}/${name} (Release ${flags[${name}]})"
    # shellcheck disable=SC2086  # the flags are words
    cmake -S . -B "${root}/${name}" -DCMAKE_BUILD_TYPE=Release -DHEADWISE_BUILD_TESTS=OFF \
        -DHEADWISE_BUILD_EXAMPLES=OFF -DHEADWISE_BUILD_BENCHMARKS=ON -DBLA_VENDOR=OpenBLAS \
        ${flags[${name}]} >/dev/null
    cmake --build "${root}/${name}" --target bench_mha -j2
done
cmake --build "${root}/cblas-native" --target bench_decode -j2
echo "headwise: builds done ($((SECONDS - started)) s)"

# --- environment of every benchmark process -----------------------------------------------------
# glibc's malloc thresholds pinned, OpenBLAS choosing its kernels for this CPU: scripts/bench_env.sh.
# shellcheck source=scripts/bench_env.sh
source scripts/bench_env.sh
headwise_bench_env "${root}"

repetitions=5
min_time=0.1
((full)) && min_time=0.2
# The main shapes (bench_mha.cpp's kMainShapes), fused, and the bare GEMM and peak they are put
# against: what the secondary builds run.
main_shapes="(B:8/L:128/E:512/H:8|B:1/L:512/E:768/H:12|B:32/L:64/E:256/H:4|B:4/L:1024/E:512/H:8)"
main_gemms="(B:8/L:128/E:512|B:1/L:512/E:768|B:32/L:64/E:256|B:4/L:1024/E:512)"
# (Names of cases timed by wall time end in /real_time.)
main_filter="^mha/(forward_eval|forward_backward)/fused/float/${main_shapes}(/real_time)?\$"
main_filter+="|^roofline/gemm_qkv/float/${main_gemms}(/real_time)?\$|^roofline/fma_peak/float"

# run <build> <program> <output json> <threads> <OpenMP threads> <BLAS threads> [flags]
# runs one benchmark program of one build (bench_mha, bench_decode) with Google Benchmark's flags.
# OpenMP threads sleep when idle (OMP_WAIT_POLICY=PASSIVE), as compare_torch.py has torch's do:
# spinning threads would take a shared machine's cores from the other processes.
run() {
    local name="$1" program="$2" json="$3" threads="$4" omp="$5" blas="$6"
    shift 6
    local policy=ACTIVE
    ((omp > 1)) && policy=PASSIVE
    local driver="${root}/${name}/bench/${program}"
    echo "headwise: ${name}/${program}: ${threads} thread(s) (OMP_NUM_THREADS=${omp}," \
        "OPENBLAS_NUM_THREADS=${blas}) -> ${json}"
    # Repetitions are interleaved at random, so a slow spell of a shared machine spreads over all
    # cases instead of skewing the ratio of two neighbours. Debian's libbenchmark reports itself as
    # a debug build; the context records what headwise was built as.
    OMP_NUM_THREADS="${omp}" OPENBLAS_NUM_THREADS="${blas}" OMP_WAIT_POLICY="${policy}" "${driver}" \
        --benchmark_repetitions="${repetitions}" \
        --benchmark_min_time="${min_time}" \
        --benchmark_enable_random_interleaving=true \
        --benchmark_report_aggregates_only=true \
        --benchmark_out="${json}" \
        --benchmark_out_format=json \
        --benchmark_context="build_type=Release,build=${name},threads=${threads},full=${full}" \
        "$@" >/dev/null
}

python=/usr/bin/python3
[[ -x "${python}" ]] || python="$(command -v python3 || true)"

# --- torch.nn.MultiheadAttention on the same shapes, in the same run ----------------------------
# torch_run <threads>: compare_torch.py at that thread count. The 1-thread run follows the primary
# run directly, so that the headwise/torch ratios span as little of the machine's drift as can be.
declare -a torch_jsons=()
torch_run() {
    local threads="$1" torch_json="${root}/torch-$1.json"
    [[ -n "${python}" && "${HEADWISE_BENCH_NO_TORCH:-0}" != "1" ]] || return 0
    rm -f "${torch_json}"
    local -a torch_args=(--threads "${threads}" --json "${torch_json}")
    ((threads == 1)) && torch_args+=(--headwise "${primary}")
    ((full)) && torch_args+=(--full)
    # compare_torch.py sets the thread variables before importing torch; these make them explicit
    # for whatever torch loads (OpenMP, OpenBLAS).
    local -a torch_env=(OMP_NUM_THREADS="${threads}" OPENBLAS_NUM_THREADS="${threads}")
    ((threads == 2)) && torch_env+=(OMP_WAIT_POLICY=PASSIVE)
    if env "${torch_env[@]}" "${python}" bench/compare_torch.py "${torch_args[@]}"; then
        [[ -f "${torch_json}" ]] && torch_jsons+=("${torch_json}")
    else
        echo "headwise: the torch comparison (${threads} thread(s)) failed"
    fi
}
if [[ -z "${python}" ]]; then
    echo "headwise: python3 not found: no torch comparison, no table (the JSON files are complete)"
elif [[ "${HEADWISE_BENCH_NO_TORCH:-0}" == "1" ]]; then
    echo "headwise: HEADWISE_BENCH_NO_TORCH=1: no torch comparison"
fi

run_started=${SECONDS}
primary="${root}/cblas-native/bench.json"
run cblas-native bench_mha "${primary}" 1 1 1 ${extra[@]+"${extra[@]}"}
torch_run 1
declare -a secondary=()
for name in eigen-native cblas-portable eigen-portable; do
    run "${name}" bench_mha "${root}/${name}/bench.json" 1 1 1 --benchmark_filter="${main_filter}"
    secondary+=("${root}/${name}/bench.json")
done
# Two threads, the two ways with one threading runtime each: OpenMP over (batch, head) slices and
# GEMM blocks with the BLAS on one thread per call, or the BLAS's own threads for every GEMM and
# nothing around them. Each program runs its main shapes on 1 and on 2 threads (mha_threads/...,
# wall time, interleaved), so that the speed-up is measured side by side.
threads_filter="^mha_threads/"
run cblas-native-omp bench_mha "${root}/cblas-native-omp/bench-2.json" 2 2 1 \
    --benchmark_filter="${threads_filter}"
secondary+=("${root}/cblas-native-omp/bench-2.json")
run cblas-native bench_mha "${root}/cblas-native/bench-2.json" 2 1 2 \
    --benchmark_filter="${threads_filter}"
secondary+=("${root}/cblas-native/bench-2.json")
torch_run 2
echo "headwise: benchmarks done in $((SECONDS - run_started)) s"
[[ -n "${python}" ]] || exit 0

# --- The tables, the targets and the plot -------------------------------------------------------
declare -a report_args=("${primary}" --png "${root}/bench.png" --runs "${primary}" "${secondary[@]}")
((${#torch_jsons[@]} > 0)) && report_args+=(--torch "${torch_jsons[@]}")
"${python}" bench/report.py "${report_args[@]}"
echo "headwise: bench.sh done in ${SECONDS} s (builds included)"

# --- Decoding with a KV cache --------------------------------------------------------------------
decode_json="${root}/cblas-native/bench_decode.json"
run cblas-native bench_decode "${decode_json}" 1 1 1
declare -a decode_args=(--headwise "${decode_json}")
if [[ "${HEADWISE_BENCH_NO_TORCH:-0}" == "1" ]]; then
    decode_args+=(--no-torch)
else
    decode_args+=(--json "${root}/cblas-native/bench_decode_torch.json")
fi
"${python}" bench/torch_decode.py "${decode_args[@]}"

# --- Long sequences: the blocked and materialised kernels against torch (own script and files) --
bash scripts/bench_long.sh $( ((full)) && echo --full)
