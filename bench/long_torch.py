#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Times torch.nn.MultiheadAttention on bench_long's shapes and measures its peak memory.

    python3 bench/long_torch.py [--full] [--json build/bench/long/bench_long_torch.json]
                                [--repetitions 3]

Self-attention, float32, batch_first=True, dropout 0, E = 512, H = 8, one thread:
  forward_eval  module.eval(), torch.inference_mode(), need_weights=False
  training      module.train(), input requiring grad, forward then out.backward(G)
with no mask or a causal one (a [L, L] boolean attn_mask, torch 1.13 has no is_causal; built
before the measurement, so it is part of the baseline). Lengths as bench_long: 256, 1024, 4096
and (8, 128); --full: 256 to 8192.

Time: median of --repetitions calls after one warm-up call, CPU time of the process
(time.process_time), as bench_long with one thread.
Memory (extra_MiB): as bench_long, the peak resident set while the case's calls run minus the
resident set just before them, after the module, input, gradient and mask are built and freed
heap memory is handed back to the system (glibc malloc_trim); the peak is VmHWM of
/proc/self/status, reset by writing 5 to /proc/self/clear_refs. torch on the CPU allocates through
glibc's malloc, as headwise does, so the two are measured alike.
torch's GEMMs run in OpenBLAS (Debian's torch), which picks its kernels and cache sizes for the
CPU: an OPENBLAS_CORETYPE or OPENBLAS_L2_SIZE inherited from the environment (Haswell would hold
it to AVX2 kernels) is dropped, as scripts/bench.sh does, unless --keep-openblas-env.
Without torch it says so and exits 0.
"""

import argparse
import ctypes
import json
import os
import statistics
import sys
import time

E, H = 512, 8
DEFAULT_LENGTHS = [256, 1024, 4096]
FULL_LENGTHS = [256, 512, 1024, 2048, 4096, 8192]
SHORT = (8, 128)


def status_kib(field):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def malloc_trim():
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def measure(torch, mode, causal, B, L, repetitions):
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(E, H, batch_first=True)
    x = torch.randn(B, L, E)
    g = torch.randn(B, L, E)
    mask = torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1) if causal else None
    if mode == "forward_eval":
        mha.eval()

        def call():
            with torch.inference_mode():
                mha(x, x, x, attn_mask=mask, need_weights=False)
    else:
        mha.train()
        x.requires_grad_(True)

        def call():
            out, _ = mha(x, x, x, attn_mask=mask, need_weights=False)
            out.backward(g)

    malloc_trim()
    measured = reset_peak()
    before = status_kib("VmRSS")
    call()  # warm-up, inside the memory measurement (as Google Benchmark's first run)
    times = []
    for _ in range(repetitions):
        t0 = time.process_time()
        call()
        times.append(time.process_time() - t0)
    peak = status_kib("VmHWM")
    extra = (peak - before) / 1024.0 if measured and before >= 0 and peak >= 0 else -1.0
    return {"mode": mode, "mask": "causal" if causal else "none", "B": B, "L": L,
            "ms": 1e3 * statistics.median(times), "runs": len(times), "extra_MiB": extra}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="L from 256 to 8192")
    parser.add_argument("--json", help="write the results here (read by bench/long_report.py)")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--keep-openblas-env", action="store_true",
                        help="keep OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE from the environment")
    args = parser.parse_args(argv)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    dropped = {}
    if not args.keep_openblas_env:
        for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
            if var in os.environ:
                dropped[var] = os.environ.pop(var)
    try:
        import torch
    except ImportError:
        print("long_torch: torch not available: skipping")
        return 0
    torch.set_num_threads(1)
    if dropped:
        print("long_torch: not applied from the environment: %s (OpenBLAS chooses for this CPU)"
              % ", ".join("%s=%s" % kv for kv in sorted(dropped.items())))
    lengths = FULL_LENGTHS if args.full else DEFAULT_LENGTHS
    cases = [(mode, causal, 1, L) for mode in ("forward_eval", "training")
             for causal in (False, True) for L in lengths]
    cases += [(mode, False) + SHORT for mode in ("forward_eval", "training")]
    results = []
    for mode, causal, B, L in cases:
        r = measure(torch, mode, causal, B, L, args.repetitions)
        print("torch %-12s %-6s B=%d L=%-5d %10.2f ms  %+9.1f MiB" % (
            mode, r["mask"], B, L, r["ms"], r["extra_MiB"]), flush=True)
        results.append(r)
    context = {"torch_version": torch.__version__, "threads": torch.get_num_threads(),
               "timing": "cpu", "memory": "extra_MiB = peak VmHWM - VmRSS before (malloc_trim)",
               "openblas_env_dropped": dropped}
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"context": context, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
