# SPDX-License-Identifier: MIT
# The environment every benchmark process runs in (headwise's programs and torch's alike),
# sourced by scripts/bench.sh and scripts/bench_long.sh:
#
#   source scripts/bench_env.sh && headwise_bench_env <scratch directory>
#
# 1. glibc's malloc thresholds pinned at the values glibc settles on in a long-running process.
#    glibc hands freed blocks above a threshold back to the system and raises that threshold as a
#    process runs (to 32 MiB at most), so what an allocation costs would otherwise depend on what
#    ran before it in the same process.
# 2. OpenBLAS chooses its kernels and cache blocking for this CPU, as on a user's machine: an
#    OPENBLAS_CORETYPE or OPENBLAS_L2_SIZE inherited from the environment is dropped, and said so
#    (HEADWISE_BENCH_KEEP_OPENBLAS_ENV=1 keeps them). Under OPENBLAS_CORETYPE=Haswell and
#    OPENBLAS_L2_SIZE=512, as some environments set, OpenBLAS runs AVX2 kernels with tiny cache
#    blocks on an AVX-512 machine: half the GEMM rate of its own choice, for torch as for us.
# Sets HEADWISE_BENCH_OPENBLAS_CORE to the kernel set OpenBLAS runs here ("" without OpenBLAS).

headwise_bench_env() {
    local scratch="$1" var probe
    local malloc_settled="glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=67108864"
    export GLIBC_TUNABLES="${malloc_settled}${GLIBC_TUNABLES:+:${GLIBC_TUNABLES}}"
    unset OMP_WAIT_POLICY

    if [[ "${HEADWISE_BENCH_KEEP_OPENBLAS_ENV:-0}" != "1" ]]; then
        for var in OPENBLAS_CORETYPE OPENBLAS_L2_SIZE; do
            if [[ -n "${!var:-}" ]]; then
                echo "headwise: ${var}=${!var} from the environment is not applied to the" \
                    "benchmarks (OpenBLAS chooses for this CPU; HEADWISE_BENCH_KEEP_OPENBLAS_ENV=1" \
                    "keeps it)"
                unset "${var}"
            fi
        done
    fi

    # The kernel set, asked of OpenBLAS itself.
    HEADWISE_BENCH_OPENBLAS_CORE=""
    mkdir -p "${scratch}"
    probe="${scratch}/openblas_core"
    if printf '%s\n' '#include <cstdio>' 'extern "C" char* openblas_get_corename(void);' \
        'int main() { std::puts(openblas_get_corename()); }' |
        "${CXX:-c++}" -x c++ - -o "${probe}" -lopenblas 2>/dev/null; then
        HEADWISE_BENCH_OPENBLAS_CORE="$("${probe}" 2>/dev/null || true)"
        echo "headwise: OpenBLAS kernels: ${HEADWISE_BENCH_OPENBLAS_CORE}"
    fi
}

# headwise_peers_python: prints the Python of the peers' environment (scripts/peers.sh:
# HEADWISE_PEERS_PYTHON, else the cached environment's), which has matplotlib and the peers;
# fails if there is none.
headwise_peers_python() {
    local cached="${HEADWISE_PEERS_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/headwise/peers}/bin/python"
    local python="${HEADWISE_PEERS_PYTHON:-${cached}}"
    [[ -x "${python}" ]] && echo "${python}"
}
