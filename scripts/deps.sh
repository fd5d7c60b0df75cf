#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Makes sure what headwise builds and tests with is installed, from Debian/Ubuntu packages:
# cmake (>= 3.25, for the presets), make, g++, pkg-config, Eigen 3.4, Catch2, Google Benchmark,
# OpenBLAS (the CBLAS of the cblas preset and of the benchmarks' BLAS backend), nlohmann/json
# (safetensors headers), utf8proc (the BERT tokenizer), oneDNN (the bf16 GEMM of Precision::bf16:
# libdnnl-dev), Open MPI (headwise::distributed: libopenmpi-dev,
# openmpi-bin), and for the asan and fuzz presets clang++ with its sanitizer and libFuzzer runtime
# (clang-14, libclang-rt-14-dev) and its OpenMP runtime (libomp-dev).
#
#   bash scripts/deps.sh                      check, and install what is missing
#   source scripts/deps.sh && headwise_deps   the same, from another script
#
# Installs only what is missing, so running it again costs nothing. As root it runs apt-get
# itself, otherwise through sudo if that works without a password; failing both it prints the
# apt-get command to run and exits 1.

headwise_deps() {
    local -a missing=()

    echo "headwise: checking dependencies ..."
    _headwise_have_command cmake || missing+=(cmake)
    _headwise_have_command make || missing+=(make)
    if [[ -n "${CXX:-}" ]]; then
        # A compiler chosen by the caller: check it is there, but do not guess its package.
        if ! _headwise_have_command "${CXX%% *}"; then
            echo "headwise: CXX=${CXX} is not an executable command" >&2
            return 1
        fi
    else
        _headwise_have_command g++ || missing+=(g++)
    fi
    _headwise_have_command pkg-config || missing+=(pkg-config)
    _headwise_have_package libeigen3-dev eigen3/Eigen/Core Eigen3Config.cmake ||
        missing+=(libeigen3-dev)
    _headwise_have_package catch2 "" Catch2Config.cmake || missing+=(catch2)
    _headwise_have_package libbenchmark-dev benchmark/benchmark.h benchmarkConfig.cmake ||
        missing+=(libbenchmark-dev)
    _headwise_have_openblas || missing+=(libopenblas-dev)
    _headwise_have_package nlohmann-json3-dev nlohmann/json.hpp nlohmann_jsonConfig.cmake ||
        missing+=(nlohmann-json3-dev)
    # utf8proc: Unicode properties for the BERT tokenizer (text/wordpiece.hpp); no CMake package.
    _headwise_have_package libutf8proc-dev utf8proc.h "" || missing+=(libutf8proc-dev)
    # oneDNN: the bf16 matmul behind Precision::bf16 (HEADWISE_BF16); its C header is what
    # headwise includes.
    _headwise_have_package libdnnl-dev oneapi/dnnl/dnnl.h "" || missing+=(libdnnl-dev)
    # MPI for data parallelism (headwise::distributed, its tests and train_sort_ddp): Open MPI's
    # headers and libraries, and its launcher (mpirun, mpiexec).
    _headwise_have_package libopenmpi-dev mpi.h "" || missing+=(libopenmpi-dev)
    _headwise_have_command mpiexec || missing+=(openmpi-bin)
    # The asan and fuzz presets: clang++ (the clang package links it to clang-14), its sanitizer
    # and libFuzzer runtime, and its OpenMP runtime (asan builds with OpenMP; libomp's omp.h sits
    # in clang's own include directory, so only dpkg can tell).
    _headwise_have_command clang++ || missing+=(clang-14 clang)
    _headwise_have_fuzzer_runtime || missing+=(libclang-rt-14-dev)
    _headwise_have_package libomp-dev "" "" || missing+=(libomp-dev)

    if ((${#missing[@]} > 0)); then
        _headwise_install "${missing[@]}" || return 1
    fi

    _headwise_check_cmake_version || return 1
    echo "headwise: dependencies present" \
        "(cmake $(_headwise_cmake_version), $("${CXX:-g++}" --version | head -n 1))"
}

# --- helpers ------------------------------------------------------------------------------------

_headwise_have_command() {
    command -v "$1" >/dev/null 2>&1
}

# _headwise_have_package <debian package> <header under an include dir, or "">
#                        <CMake config file, or "">
# True when dpkg says the package is installed, or, without it (another distribution, a build
# from source), when the header and the CMake package file are found under /usr or /usr/local.
_headwise_have_package() {
    local package="$1" header="$2" config="$3"
    local status=""
    if _headwise_have_command dpkg-query; then
        status="$(dpkg-query -W -f='${Status}' "${package}" 2>/dev/null || true)"
    fi
    if [[ "${status}" == "install ok installed" ]]; then
        return 0
    fi
    local prefix found_header="" found_config=""
    for prefix in /usr/local /usr; do
        if [[ -z "${header}" || -f "${prefix}/include/${header}" ]] ||
            compgen -G "${prefix}/include/*/${header}" >/dev/null; then
            found_header=yes
        fi
        if [[ -z "${config}" ]] || compgen -G "${prefix}/lib/cmake/*/${config}" >/dev/null ||
            compgen -G "${prefix}/lib/*/cmake/*/${config}" >/dev/null ||
            compgen -G "${prefix}/lib64/cmake/*/${config}" >/dev/null ||
            compgen -G "${prefix}/share/*/cmake/${config}" >/dev/null ||
            compgen -G "${prefix}/share/cmake/*/${config}" >/dev/null; then
            found_config=yes
        fi
    done
    [[ -n "${found_header}" && -n "${found_config}" ]]
}

# OpenBLAS itself: another BLAS's cblas.h does not do. Debian images often carry the reference
# BLAS (libblas-dev, pulled in by liblapack-dev), whose cblas.h would pass a header probe while
# its GEMMs run a hundred times slower than OpenBLAS's.
_headwise_have_openblas() {
    local status=""
    if _headwise_have_command dpkg-query; then
        status="$(dpkg-query -W -f='${Status}' libopenblas-dev 2>/dev/null || true)"
        [[ "${status}" == "install ok installed" ]]
        return
    fi
    compgen -G "/usr/lib*/libopenblas.so" >/dev/null ||
        compgen -G "/usr/lib*/*/libopenblas.so" >/dev/null ||
        compgen -G "/usr/local/lib*/libopenblas.so" >/dev/null
}

# libFuzzer's runtime, as clang's -fsanitize=fuzzer links it.
_headwise_have_fuzzer_runtime() {
    local status=""
    if _headwise_have_command dpkg-query; then
        status="$(dpkg-query -W -f='${Status}' libclang-rt-14-dev 2>/dev/null || true)"
    fi
    [[ "${status}" == "install ok installed" ]] ||
        compgen -G "/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-*.a" >/dev/null ||
        compgen -G "/usr/lib/clang/*/lib/*/libclang_rt.fuzzer*.a" >/dev/null
}

_headwise_install() {
    local -a packages=("$@")
    local -a apt=(apt-get install -y --no-install-recommends "${packages[@]}")
    echo "headwise: installing ${packages[*]} ..."
    if [[ "$(id -u)" -eq 0 ]]; then
        DEBIAN_FRONTEND=noninteractive apt-get update &&
            DEBIAN_FRONTEND=noninteractive "${apt[@]}"
    elif _headwise_have_command sudo && sudo -n true 2>/dev/null; then
        sudo -n env DEBIAN_FRONTEND=noninteractive apt-get update &&
            sudo -n env DEBIAN_FRONTEND=noninteractive "${apt[@]}"
    else
        echo "headwise: missing ${packages[*]}, and cannot install them (not root, no sudo" \
            "without a password). Run:" >&2
        echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends" \
            "${packages[*]}" >&2
        return 1
    fi
}

_headwise_cmake_version() {
    cmake --version | head -n 1 | sed -e 's/^cmake version //'
}

# CMakePresets.json (version 6, workflow presets) needs CMake 3.25.
_headwise_check_cmake_version() {
    local version
    version="$(_headwise_cmake_version)"
    if [[ "$(printf '%s\n%s\n' 3.25 "${version%%-*}" | sort -V | head -n 1)" != "3.25" ]]; then
        echo "headwise: cmake ${version} is too old; the presets need cmake 3.25 or newer" >&2
        return 1
    fi
}

# Run when executed, not when sourced.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    set -euo pipefail
    headwise_deps
fi
