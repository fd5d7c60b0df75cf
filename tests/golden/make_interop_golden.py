# SPDX-License-Identifier: MIT
"""Writes the files of other kinds that tests/io/test_file_kind.cpp hands to headwise's loaders.

Run with Debian's /usr/bin/python3 (torch 1.13 and NumPy):

    /usr/bin/python3 tests/golden/make_interop_golden.py

The files land in tests/golden/interop/ and are committed, so the tests need no Python. Each is
what a user may pass by mistake to load_safetensors or load_npy, written by the library that
writes such files, tiny (a few hundred bytes):
- torch_zip.pt: torch.save of a state dict, the zip format of PyTorch 1.6 and later;
- torch_legacy.pt: the same with _use_new_zipfile_serialization=False, the older pickle format;
- arrays.npz: numpy.savez of two small arrays.
"""

import pathlib

import numpy as np
import torch

OUT = pathlib.Path(__file__).resolve().parent / "interop"


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    state = {"weight": torch.arange(6, dtype=torch.float32).reshape(2, 3) / 7,
             "bias": torch.tensor([0.5, -0.25], dtype=torch.float32)}
    torch.save(state, OUT / "torch_zip.pt")
    torch.save(state, OUT / "torch_legacy.pt", _use_new_zipfile_serialization=False)
    np.savez(OUT / "arrays.npz", a=np.arange(3, dtype=np.float64),
             b=np.ones((2, 2), dtype=np.float32))
    for path in sorted(OUT.iterdir()):
        print(f"{path.name}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
