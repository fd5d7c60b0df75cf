#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds llama.cpp, the reference headwise's GGUF kernels, quantizers and SmolLM2 runs are
# measured against, from the source distribution of `llama-cpp-python` on PyPI (it carries
# llama.cpp in vendor/llama.cpp), into a cache beside the peers environment. Never run by CI or
# scripts/test.sh. About 20 minutes on two cores the first time; a second run builds nothing.
#
#   bash scripts/llama_cpp.sh            build (or find) the tools, print their directory
#   source scripts/llama_cpp.sh && headwise_llama_cpp   the same from another script; sets
#                                        HEADWISE_LLAMA_CPP_BIN to the directory of the tools
#
# Where: $HEADWISE_LLAMA_CPP_DIR, default ${XDG_CACHE_HOME:-$HOME/.cache}/headwise/llama.cpp.
# Which version: $HEADWISE_LLAMA_CPP_PYTHON_VERSION (a llama-cpp-python version), default the
# newest on PyPI at the first build; the version built is written to VERSION in the cache.
# The tools: llama-bench, llama-quantize, llama-perplexity, llama-simple, llama-cli,
# test-backend-ops. Built for the machine it runs on (GGML_NATIVE), CPU only, one static build.

headwise_llama_cpp() {
    local dir="${HEADWISE_LLAMA_CPP_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/headwise/llama.cpp}"
    local version="${HEADWISE_LLAMA_CPP_PYTHON_VERSION:-}"
    local -a tools=(llama-bench llama-quantize llama-perplexity llama-simple llama-cli
        test-backend-ops)
    local missing=0 tool
    for tool in "${tools[@]}"; do
        [[ -x "${dir}/build/bin/${tool}" ]] || missing=1
    done
    if ((missing)); then
        mkdir -p "${dir}/download"
        if ! ls "${dir}"/download/llama_cpp_python-*.tar.gz >/dev/null 2>&1; then
            local spec="llama-cpp-python${version:+==${version}}"
            echo "headwise: downloading the source distribution of ${spec} from PyPI"
            [[ -x "${dir}/venv/bin/python" ]] || python3 -m venv "${dir}/venv" || {
                echo "headwise: 'python3 -m venv' failed (Debian: apt-get install python3-venv)" >&2
                return 1
            }
            "${dir}/venv/bin/python" -m pip download --quiet --no-deps --no-binary :all: "${spec}" \
                -d "${dir}/download" || {
                echo "headwise: 'pip download ${spec}' failed (is PyPI reachable?)" >&2
                return 1
            }
        fi
        local archive
        archive="$(ls "${dir}"/download/llama_cpp_python-*.tar.gz | head -n 1)"
        if [[ ! -f "${dir}/source/CMakeLists.txt" ]]; then
            rm -rf "${dir}/unpack" "${dir}/source"
            mkdir -p "${dir}/unpack"
            tar -xzf "${archive}" -C "${dir}/unpack" || return 1
            mv "${dir}"/unpack/llama_cpp_python-*/vendor/llama.cpp "${dir}/source" || return 1
            basename "${archive}" .tar.gz | sed 's/^llama_cpp_python-//' >"${dir}/VERSION"
            rm -rf "${dir}/unpack"
        fi
        echo "headwise: building llama.cpp ($(cat "${dir}/VERSION") of llama-cpp-python) in ${dir}/build"
        cmake -S "${dir}/source" -B "${dir}/build" -DCMAKE_BUILD_TYPE=Release \
            -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DGGML_OPENMP=ON \
            -DLLAMA_BUILD_TESTS=ON -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_SERVER=OFF \
            >"${dir}/configure.log" 2>&1 || {
            echo "headwise: configuring llama.cpp failed: ${dir}/configure.log" >&2
            return 1
        }
        cmake --build "${dir}/build" --target "${tools[@]}" -j "$(nproc)" \
            >"${dir}/build.log" 2>&1 || {
            echo "headwise: building llama.cpp failed: ${dir}/build.log" >&2
            return 1
        }
    fi
    HEADWISE_LLAMA_CPP_BIN="${dir}/build/bin"
    export HEADWISE_LLAMA_CPP_BIN
}

if [[ "${BASH_SOURCE[0]}" == "${0}" ]]; then
    set -euo pipefail
    headwise_llama_cpp
    echo "headwise: llama.cpp $(cat "$(dirname "${HEADWISE_LLAMA_CPP_BIN}")/../VERSION") tools: ${HEADWISE_LLAMA_CPP_BIN}"
fi
