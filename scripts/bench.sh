#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the release preset (-O3 -march=native, benchmarks on, tests and examples off), runs the
# benchmark driver build/release/bench/bench_mha, then torch.nn.MultiheadAttention on the same
# shapes (bench/compare_torch.py, skipped without torch), and prints the table (bench/report.py).
#
#   bash scripts/bench.sh            the default set (float, 4 shapes, head sweep): a few minutes
#   bash scripts/bench.sh --full     everything: double too, forward_train, backward alone and
#                                    (1, 4096, 512, 8) forward; longer minimum times
#   bash scripts/bench.sh [--full] -- <Google Benchmark flags>   e.g. --benchmark_filter=fused
#   HEADWISE_BENCH_NO_TORCH=1 bash scripts/bench.sh              without the torch comparison
#
# Then the long-sequence set (scripts/bench_long.sh, the same --full): blocked and materialised
# attention against torch, L up to 4096 (8192 with --full), time and peak memory.
#
# Writes build/release/bench.json (Google Benchmark, with build_type and threads in its context),
# build/release/bench_torch.json and build/release/bench.png (needs python3-matplotlib).
# Speed claims are ratios of medians within one run, so every case reports aggregates only.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

full=0
declare -a extra=()
while (($# > 0)); do
    case "$1" in
        --full) full=1 ;;
        --) shift; extra+=("$@"); break ;;
        -h | --help) sed -n '3,18p' "${BASH_SOURCE[0]}" | sed -e 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "headwise: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
    shift
done
export HEADWISE_BENCH_FULL="${full}"

bash scripts/deps.sh

build=build/release
echo "headwise: configuring and building the release preset (benchmarks only) ..."
cmake --preset release -DHEADWISE_BUILD_TESTS=OFF -DHEADWISE_BUILD_EXAMPLES=OFF
cmake --build --preset release --target bench_mha

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
export OMP_NUM_THREADS="${threads}"
build_type="$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "${build}/CMakeCache.txt")"
# The default set stays within a few minutes on 2 cores: short minimum times, 5 repetitions
# (the largest shapes run one call per repetition, so the median needs a few of them).
repetitions=5
min_time=0.1
if ((full)); then
    min_time=0.2
fi

# glibc's malloc hands freed blocks above a threshold back to the system, and raises that
# threshold as a process runs (to 32 MiB at most), so what an allocation costs depends on what ran
# before it in the same process. Both programs below get glibc's settled values from the start,
# the state of a long-running program, so that every case pays the same for its allocations.
malloc_settled="glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=67108864"
export GLIBC_TUNABLES="${malloc_settled}${GLIBC_TUNABLES:+:${GLIBC_TUNABLES}}"

started=${SECONDS}
echo "headwise: running ${driver} (full=${full}, threads=${threads}, repetitions=${repetitions}," \
    "min_time=${min_time} s)"
# Repetitions are interleaved at random, so a slow spell of a shared machine spreads over all
# cases instead of skewing the ratio of two neighbours. Debian's libbenchmark reports itself as a
# debug build; record what headwise was built as.
"${driver}" \
    --benchmark_repetitions="${repetitions}" \
    --benchmark_min_time="${min_time}" \
    --benchmark_enable_random_interleaving=true \
    --benchmark_report_aggregates_only=true \
    --benchmark_out="${json}" \
    --benchmark_out_format=json \
    --benchmark_context="build_type=${build_type:-unknown},threads=${threads},full=${full}" \
    ${extra[@]+"${extra[@]}"}
echo "headwise: results in ${json} ($((SECONDS - started)) s)"

python=/usr/bin/python3
[[ -x "${python}" ]] || python="$(command -v python3 || true)"
if [[ -z "${python}" ]]; then
    echo "headwise: python3 not found: no table, no torch comparison (the JSON is complete)"
    exit 0
fi

# --- torch.nn.MultiheadAttention on the same shapes, in the same run ----------------------------
torch_json="${build}/bench_torch.json"
rm -f "${torch_json}"
if [[ "${HEADWISE_BENCH_NO_TORCH:-0}" == "1" ]]; then
    echo "headwise: HEADWISE_BENCH_NO_TORCH=1: no torch comparison"
else
    declare -a torch_args=(--headwise "${json}" --threads "${threads}" --json "${torch_json}")
    ((full)) && torch_args+=(--full)
    # Thread counts matched to ours; compare_torch.py sets the same variables before importing
    # torch, these make it explicit for whatever torch loads (OpenMP, OpenBLAS).
    declare -a torch_env=(OMP_NUM_THREADS="${threads}" OPENBLAS_NUM_THREADS="${threads}")
    ((threads == 2)) && torch_env+=(OMP_WAIT_POLICY=PASSIVE)
    env "${torch_env[@]}" "${python}" bench/compare_torch.py "${torch_args[@]}" ||
        echo "headwise: the torch comparison failed; the table below is ours alone"
fi

# --- The table and the plot ---------------------------------------------------------------------
"${python}" bench/report.py "${json}" --torch "${torch_json}" --png "${build}/bench.png"
echo "headwise: benchmarks done in $((SECONDS - started)) s after the build" \
    "(script total ${SECONDS} s)"

# --- Long sequences: the blocked and materialised kernels against torch (own script and files) --
bash scripts/bench_long.sh $( ((full)) && echo --full)
