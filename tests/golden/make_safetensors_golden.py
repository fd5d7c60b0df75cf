# SPDX-License-Identifier: MIT
"""A safetensors file with every dtype headwise reads, for tests/test_io_safetensors.cpp.

    python3 tests/golden/make_safetensors_golden.py

Written with the standard library only (struct, json), as the format's specification describes
it: an 8-byte little-endian header length, a JSON header, then the data. Each entry `x.<dtype>`
has a twin `expected.x.<dtype>` in F64 holding the exact values the reader must produce. The
entries `bits.F32` and `bits.F64` are written from the bit patterns BITS_F32 and BITS_F64 (the
test holds the same lists): zeros, the smallest subnormal, the largest finite value, infinity and
NaNs with payloads, signalling ones included, which a reader must return bit for bit.
"""

import json
import pathlib
import struct

OUT = pathlib.Path(__file__).resolve().parent / "safetensors" / "dtypes.safetensors"

VALUES = [0.0, -0.0, 1.0, -2.5, 0.333251953125, 65504.0, 6.103515625e-05, 5.960464477539063e-08,
          float("inf"), -float("inf")]


BITS_F32 = [0x3E124925, 0x80000000, 0x00000001, 0x7F7FFFFF, 0x7F800000, 0x7F800001, 0xFFC00001,
            0x7FBFFFFF]
BITS_F64 = [0x3FC2492492492492, 0x8000000000000000, 0x0000000000000001, 0x7FEFFFFFFFFFFFFF,
            0x7FF0000000000000, 0x7FF0000000000001, 0xFFF8000000000001, 0x7FF7FFFFFFFFFFFF]


def f16(values):
    data = b"".join(struct.pack("<e", v) for v in values)
    return data, [struct.unpack("<e", struct.pack("<e", v))[0] for v in values]


def bf16(values):
    # bfloat16 is the top half of a float32; truncate (the values chosen are exact or truncated).
    words = [struct.unpack("<I", struct.pack("<f", v))[0] >> 16 for v in values]
    data = b"".join(struct.pack("<H", w) for w in words)
    return data, [struct.unpack("<f", struct.pack("<I", w << 16))[0] for w in words]


def f32(values):
    data = b"".join(struct.pack("<f", v) for v in values)
    return data, [struct.unpack("<f", struct.pack("<f", v))[0] for v in values]


def f64(values):
    return b"".join(struct.pack("<d", v) for v in values), list(values)


def main():
    bf_values = [1.0, -3.140625, 1e30, 2.0 ** -130, 0.0, 7.0, -0.5, 100.0, 1e-3, 3.0]
    entries = {}
    for name, (encode, dtype, values) in {
        "x.F16": (f16, "F16", VALUES),
        "x.BF16": (bf16, "BF16", bf_values),
        "x.F32": (f32, "F32", [v / 7 for v in range(10)]),
        "x.F64": (f64, "F64", [v / 7 for v in range(10)]),
    }.items():
        data, exact = encode(values)
        entries[name] = (dtype, [2, 5], data)
        entries["expected." + name] = ("F64", [2, 5], f64(exact)[0])
    entries["bits.F32"] = ("F32", [8], b"".join(struct.pack("<I", b) for b in BITS_F32))
    entries["bits.F64"] = ("F64", [8], b"".join(struct.pack("<Q", b) for b in BITS_F64))
    header, blob = {"__metadata__": {"format": "pt"}}, b""
    for name in sorted(entries):
        dtype, shape, data = entries[name]
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_bytes(struct.pack("<Q", len(text)) + text + blob)


if __name__ == "__main__":
    main()
