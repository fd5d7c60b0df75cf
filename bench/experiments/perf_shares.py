#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Where a profiled call's time goes: a perf report's symbols grouped into GEMM, packing,
softmax, masks, copies, zeroing, malloc and kernel time.

    echo 'setup c train <case dir> 8 128 512 8 0 0 /tmp/out' > in.txt  # fields as bench_peers's
    echo 'run c 20' >> in.txt; echo quit >> in.txt
    perf record -g -o perf.data build/bench/peers/bench/bench_peers worker 1 < in.txt
    perf report -i perf.data --no-children --sort dso,sym --stdio -g none > perf.txt
    python3 bench/experiments/perf_shares.py perf.txt [top symbols, default 15]

(Case directories: those `bench/run.py attention` writes under its --work, e.g.
/tmp/headwise-bench/attention/train-8-128-512-8.) GEMM is the BLAS's
kernels; packing its copy routines (OpenBLAS's *_oncopy/_otcopy/_incopy/_itcopy, which lay out
operand panels before each product); GEMM beta its scaling of C (sgemm_beta, run even for
beta = 0). Everything headwise does outside the BLAS is inlined into a few symbols of the
program; their names say which step they are (exp_shifted_sum: the softmax, ...).
"""

import collections
import re
import sys


def category(dso, sym):
    s = sym.lower()
    if "openblas" in dso or "libblas" in dso or "mkl" in dso:
        if "copy" in s:
            return "packing (BLAS)"
        if "beta" in s:
            return "GEMM beta (BLAS)"
        return "GEMM"
    if "memcpy" in s or "memmove" in s or "copy_" in s:
        return "copies"
    if "memset" in s:
        return "zeroing"
    if "exp" in s or "softmax" in s or "row_max" in s:
        return "softmax"
    if "mask" in s or "causal" in s:
        return "masks"
    if dso.startswith("[kernel"):
        return "kernel (page faults, scheduling)"
    if "malloc" in s or "free" in s or "_int_" in s:
        return "malloc"
    return "other"


def main():
    shares, syms = collections.Counter(), collections.Counter()
    for line in open(sys.argv[1]):
        m = re.match(r"\s*([\d.]+)%\s+(\S+)\s+\[(.)\]\s+(.*)", line)
        if not m:
            continue
        p, dso, sym = float(m.group(1)), m.group(2), m.group(4).strip()
        c = category(dso, sym)
        shares[c] += p
        syms[(c, dso, sym[:90])] += p
    for c, p in shares.most_common():
        print("%-34s %5.1f%%" % (c, p))
    print("top symbols:")
    for (c, dso, s), p in syms.most_common(int(sys.argv[2]) if len(sys.argv) > 2 else 15):
        print("  %5.1f%%  %-22s %-18s %s" % (p, c, dso[:18], s))


if __name__ == "__main__":
    main()
