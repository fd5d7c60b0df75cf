#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes tests/golden/gguf/k_quants_*: rows of floats and the Q4_K and Q6_K blocks llama.cpp's
own llama-quantize makes of them (no importance matrix), for tests/quant/test_quant_k_quants.cpp
(which needs neither Python nor llama.cpp).

    bash scripts/llama_cpp.sh        # builds llama-quantize into ~/.cache/headwise/llama.cpp
    ~/.cache/headwise/gguf-venv/bin/python tests/golden/make_k_quants_golden.py \\
        --llama-quantize ~/.cache/headwise/llama.cpp/build/bin/llama-quantize
    # or, from the library alone (its first build step):
    ~/.cache/headwise/gguf-venv/bin/python tests/golden/make_k_quants_golden.py \\
        --libggml-base ~/.cache/headwise/llama.cpp/build/ggml/src/libggml-base.a

How: with --llama-quantize, a one-layer Llama GGUF (F32, embedding width 256) is written with
the `gguf` package, its token embedding holding the rows of k_quants_input(); llama-quantize
--pure turns it into a Q4_K_S file (every matrix Q4_K) and a Q6_K file; the token embedding's
blocks are read back. With --libggml-base, a small C program linked with llama.cpp's
libggml-base.a calls ggml_quantize_chunk (what llama-quantize calls for each tensor, here with no
importance matrix) on the rows. Both give the same bytes. llama-quantize refuses NaN and
infinite inputs (and blocks whose scale would not be finite), so the rows are finite; the tests
check NaN and infinities against the documented behaviour.

Files:
  k_quants_input.npy   float32 [64, 256]: the rows (k_quants_input())
  k_quants_llama.gguf  tensors Q4_K [64 rows of 1 block] and Q6_K (the same), llama.cpp's
                       bytes; keys headwise.llama_cpp_version and headwise.made_by say which
                       build and which route made them
"""
import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

OUT = Path(__file__).resolve().parent / "gguf"
ROWS, WIDTH = 64, 256


def k_quants_input(rng):
    """64 rows of 256: zero and constant rows, many scales (1e-17 to 1e4), one-signed rows,
    zero sub-blocks, few distinct values (ties), outliers, and rows mixing sub-blocks of very
    different scales."""
    x = np.zeros((ROWS, WIDTH), dtype=np.float32)
    x[1] = 1.0
    x[2] = -3.0
    x[3] = 0.02 * rng.standard_normal(WIDTH)
    for r in range(4, ROWS):
        kind = r % 10
        scale = np.float32(2.0) ** rng.integers(-30, 14)
        if kind == 0:
            v = rng.standard_normal(WIDTH) * 0.02
        elif kind == 1:
            v = rng.standard_normal(WIDTH) * scale
        elif kind == 2:
            v = rng.uniform(-1, 1, WIDTH) * scale
        elif kind == 3:
            v = np.abs(rng.standard_normal(WIDTH)) * scale  # all positive: minimum 0
        elif kind == 4:
            v = -np.abs(rng.standard_normal(WIDTH)) * scale  # all negative
        elif kind == 5:
            v = rng.standard_normal(WIDTH)
            v[(np.arange(WIDTH) // 16) % 3 == 0] = 0.0  # zero sub-blocks of 16 (and parts of 32)
        elif kind == 6:
            v = (rng.integers(0, 9, WIDTH) - 4) * 0.25  # few values: ties in the rounding
        elif kind == 7:
            v = rng.standard_normal(WIDTH) * (2.0 ** rng.integers(-20, 20, WIDTH // 16)).repeat(16)
        elif kind == 8:
            v = np.where(rng.random(WIDTH) < 0.02, 100.0, 0.01) * rng.standard_normal(WIDTH)
        else:
            v = rng.standard_normal(WIDTH) * (1e-17 if r % 20 == 9 else 3e3)
        x[r] = v
    return x.astype(np.float32)


def write_model(path, rows, rng):
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(WIDTH)
    w.add_feed_forward_length(WIDTH)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(WIDTH // 2)
    w.add_vocab_size(ROWS)
    w.add_file_type(0)  # all F32
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(ROWS)])
    w.add_token_types([1] * ROWS)
    w.add_token_merges([])

    def m(out, inp):
        return (rng.standard_normal((out, inp)) * 0.02).astype(np.float32)

    w.add_tensor("token_embd.weight", rows)
    w.add_tensor("output_norm.weight", np.ones(WIDTH, dtype=np.float32))
    w.add_tensor("output.weight", m(ROWS, WIDTH))
    w.add_tensor("blk.0.attn_norm.weight", np.ones(WIDTH, dtype=np.float32))
    for name in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"):
        w.add_tensor(f"blk.0.{name}.weight", m(WIDTH, WIDTH))
    w.add_tensor("blk.0.ffn_norm.weight", np.ones(WIDTH, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def quantized_rows(tool, source, ftype, work):
    out = work / f"{ftype}.gguf"
    subprocess.run([tool, "--pure", str(source), str(out), ftype], check=True,
                   stdout=subprocess.DEVNULL)
    t = next(t for t in gguf.GGUFReader(str(out)).tensors if t.name == "token_embd.weight")
    return np.asarray(t.data, dtype=np.uint8).reshape(ROWS, -1)


CHUNK_PROGRAM = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
size_t ggml_quantize_chunk(int type, const float * src, void * dst, int64_t start,
                           int64_t nrows, int64_t n_per_row, const float * imatrix);
int main(int argc, char ** argv) {
    const int type = atoi(argv[1]);
    static float x[64 * 256];
    static unsigned char y[64 * 256];
    if (fread(x, sizeof x, 1, stdin) != 1) return 1;
    const size_t n = ggml_quantize_chunk(type, x, y, 0, 64, 256, NULL);
    return fwrite(y, n, 1, stdout) == 1 ? 0 : 1;
}
"""


def chunk_rows(library, rows, work):
    source, program = work / "chunk.c", work / "chunk"
    source.write_text(CHUNK_PROGRAM)
    subprocess.run(["cc", "-O2", str(source), str(library), "-lstdc++", "-lm", "-lpthread", "-fopenmp",
                    "-o", str(program)], check=True)
    out = []
    for qtype in (T.Q4_K, T.Q6_K):
        done = subprocess.run([str(program), str(int(qtype))], input=rows.tobytes(),
                              stdout=subprocess.PIPE, check=True)
        out.append(np.frombuffer(done.stdout, dtype=np.uint8).reshape(ROWS, -1))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--llama-quantize", help="llama.cpp's llama-quantize")
    which.add_argument("--libggml-base", help="llama.cpp's build/ggml/src/libggml-base.a")
    args = parser.parse_args()
    tool = Path(args.llama_quantize or args.libggml_base).resolve()
    build = tool.parent.parent if args.llama_quantize else tool.parent.parent.parent
    version_file = build.parent / "VERSION"
    version = version_file.read_text().strip() if version_file.exists() else "unknown"
    rng = np.random.default_rng(20261128)
    rows = k_quants_input(rng)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.llama_quantize:
            write_model(work / "f32.gguf", rows, rng)
            q4k = quantized_rows(tool, work / "f32.gguf", "Q4_K_S", work)
            q6k = quantized_rows(tool, work / "f32.gguf", "Q6_K", work)
        else:
            q4k, q6k = chunk_rows(tool, rows, work)
    assert q4k.shape == (ROWS, 144) and q6k.shape == (ROWS, 210)
    np.save(OUT / "k_quants_input.npy", rows)
    w = gguf.GGUFWriter(str(OUT / "k_quants_llama.gguf"), arch="headwise-test")
    w.add_string("headwise.llama_cpp_version", f"llama-cpp-python {version}")
    w.add_string("headwise.made_by", "llama-quantize" if args.llama_quantize else
                 "ggml_quantize_chunk")
    w.add_tensor("Q4_K", q4k, raw_dtype=T.Q4_K)
    w.add_tensor("Q6_K", q6k, raw_dtype=T.Q6_K)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {OUT}/k_quants_input.npy and k_quants_llama.gguf (llama.cpp of "
          f"llama-cpp-python {version})")


if __name__ == "__main__":
    sys.exit(main())
