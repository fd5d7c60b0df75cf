# SPDX-License-Identifier: MIT
"""Writes the .npy files tests/test_io_npy.cpp reads, as NumPy itself writes them.

Run from anywhere with a Python that has NumPy (Debian's /usr/bin/python3 does):

    /usr/bin/python3 tests/golden/make_npy_golden.py

The files land in tests/golden/npy/ next to this script and are committed, so the tests need no
Python. Every value is a closed formula the C++ test recomputes (i / 7.0 and the like), so the
test checks exact equality without a second copy of the numbers.
"""

import pathlib

import numpy as np
from numpy.lib import format as npy_format

OUT = pathlib.Path(__file__).resolve().parent / "npy"


def save(name, array):
    np.save(OUT / name, array, allow_pickle=False)


def save_version(name, array, version):
    with open(OUT / name, "wb") as f:
        npy_format.write_array(f, array, version=version, allow_pickle=False)


def main():
    OUT.mkdir(parents=True, exist_ok=True)

    # '<f4' [2, 3]: (i - 2.5) / 2, exact in float32.
    f4 = ((np.arange(6, dtype=np.float32) - np.float32(2.5)) / np.float32(2)).reshape(2, 3)
    save("f4_2x3.npy", f4)
    # The same values in format version 3.0 (4-byte header length, UTF-8 header).
    save_version("f4_2x3_v3.npy", f4, (3, 0))
    # Edge values of float32: largest finite, smallest subnormal, -inf, -0.
    save("f4_special.npy", np.array([np.finfo(np.float32).max, np.float32(1e-45), -np.inf, -0.0],
                                    dtype=np.float32))

    # '<f8' [2, 3, 4]: i / 7, not exact in binary, so float conversion is observable.
    save("f8_2x3x4.npy", (np.arange(24, dtype=np.float64) / 7.0).reshape(2, 3, 4))
    # Format version 2.0, [2, 2]: i / 7 again.
    save_version("f8_2x2_v2.npy", (np.arange(4, dtype=np.float64) / 7.0).reshape(2, 2), (2, 0))
    # Rank 0 (a NumPy scalar array).
    save("f8_scalar.npy", np.array(3.25, dtype=np.float64))
    # Edge values of float64.
    save("f8_special.npy", np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324,
                                     np.finfo(np.float64).max, -1.5], dtype=np.float64))
    # No elements.
    save("f8_empty.npy", np.zeros((0, 3), dtype=np.float64))

    # '|b1' [3, 4]: true where (i + j) % 3 == 0.
    i, j = np.meshgrid(np.arange(3), np.arange(4), indexing="ij")
    save("b1_3x4.npy", (i + j) % 3 == 0)

    # Files headwise must reject, each with its own message.
    save("f8_big_endian.npy", (np.arange(4, dtype=np.float64) / 7.0).astype(">f8").reshape(2, 2))
    save("f8_fortran.npy", np.asfortranarray((np.arange(6, dtype=np.float64) / 7.0).reshape(2, 3)))
    save("i8_vector.npy", np.arange(3, dtype="<i8"))


if __name__ == "__main__":
    main()
