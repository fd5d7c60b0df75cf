#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Times torch's single-query attention step and prints the decode table of bench_decode.

    /usr/bin/python3 bench/torch_decode.py [--headwise build/release/bench_decode.json]
                                           [--json build/release/bench_decode_torch.json]

torch.nn.MultiheadAttention has no KV cache: producing the next token's attention output takes
one call with the last token's query over the keys and values of every token so far,
mha(x[:, -1:], x, x), which projects all of them again. That is the step timed here, for B = 1,
E = 512, H = 8, float32, batch_first, eval mode, torch.inference_mode(), need_weights=False,
one thread, at the cache lengths of bench_decode (the step sees cache + 1 tokens, as a headwise
decode step appends one token to a cache of that length). Each time is the median of timed
calls after warm-up, the lengths taking turns in rounds, on bench_decode's clock: CPU time of
the process (time.process_time).

With --headwise, prints per cache length: the headwise decode step (fused projection, Hkv = H),
recomputing the whole prefix with forward, torch's step, and the ratios; then the grouped-query
table (cache memory and step time at Hkv = H, H/4, 1). Without torch it prints headwise's tables.
"""

import argparse
import json
import os
import re
import statistics
import sys
import time

CACHE_LENGTHS = [128, 256, 512, 1024, 2048, 4096]
B, E, H = 1, 512, 8


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--headwise", help="bench_decode's JSON (Google Benchmark, aggregates)")
    parser.add_argument("--json", help="write torch's medians here")
    parser.add_argument("--min-time", type=float, default=0.5, help="seconds per length")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--no-torch", action="store_true", help="headwise's tables only")
    return parser.parse_args(argv)


def time_torch(args):
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"
    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        os.environ.pop(var, None)  # let OpenBLAS pick its kernels and blocking for this CPU
    try:
        import torch
    except ImportError:
        return None, None
    torch.set_num_threads(1)
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(E, H, batch_first=True).eval()
    calls = []
    for n in CACHE_LENGTHS:
        x = torch.randn(B, n + 1, E)
        q = x[:, -1:].contiguous()

        def call(q=q, x=x):
            with torch.inference_mode():
                mha(q, x, x, need_weights=False)
        calls.append(call)
    clock = time.process_time
    per_round = []
    for call in calls:
        for _ in range(args.warmup):
            t0 = clock()
            call()
            estimate = clock() - t0
        per_round.append(max(1, min(200, int(args.min_time / args.rounds / max(estimate, 1e-6)))))
    times = [[] for _ in calls]
    for _ in range(args.rounds):
        for i, call in enumerate(calls):
            for _ in range(per_round[i]):
                t0 = clock()
                call()
                times[i].append(clock() - t0)
    return {n: 1e3 * statistics.median(t) for n, t in zip(CACHE_LENGTHS, times)}, torch.__version__


def load_headwise(path):
    """name without the aggregate suffix -> median ms (CPU time), and the counters."""
    with open(path) as f:
        data = json.load(f)
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
    out = {}
    for b in data.get("benchmarks", []):
        if b.get("aggregate_name") != "median":
            continue
        name = b["run_name"] if "run_name" in b else re.sub(r"_median$", "", b["name"])
        out[name] = dict(ms=b["cpu_time"] * scale[b["time_unit"]],
                         cache_mib=b.get("cache_MiB"))
    return out


def hw_name(kind, n, hkv, projection="fused"):
    return "%s/%s/float/B:%d/cache:%d/E:%d/H:%d/Hkv:%d" % (kind, projection, B, n, E, H, hkv)


def table(header, rows):
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    line = lambda r: "  ".join(c.rjust(w) for c, w in zip(r, widths))
    print(line(header))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print(line(r))


def main(argv=None):
    args = parse_args(argv)
    torch_ms, version = (None, None) if args.no_torch else time_torch(args)
    if args.json and torch_ms is not None:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)) or ".", exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"torch_version": version, "threads": 1, "timing": "cpu",
                       "step_ms": {str(n): ms for n, ms in torch_ms.items()}}, f, indent=1)
    hw = load_headwise(args.headwise) if args.headwise and os.path.exists(args.headwise) else {}
    fmt = lambda x, f="%.3f": "-" if x is None else f % x

    print()
    print("One decode step, B=%d E=%d H=%d float32, one thread, medians (ms); torch %s" % (
        B, E, H, version or "not available"))
    rows = []
    for n in CACHE_LENGTHS:
        step = hw.get(hw_name("decode_step", n, H), {}).get("ms")
        prefix = hw.get(hw_name("recompute_prefix", n, H), {}).get("ms")
        t = torch_ms.get(n) if torch_ms else None
        rows.append([str(n), fmt(step), fmt(prefix), fmt(t),
                     fmt(1e3 / step if step else None, "%.0f"),
                     fmt(prefix / step if step and prefix else None, "%.1f"),
                     fmt(t / step if step and t else None, "%.1f")])
    table(["cache", "decode", "recompute", "torch step", "tokens/s", "recompute/decode",
           "torch/decode"], rows)

    rows = []
    for n in CACHE_LENGTHS:
        full = hw.get(hw_name("decode_step", n, H), {})
        row = [str(n)]
        for hkv in (H, H // 4, 1):
            r = hw.get(hw_name("decode_step", n, hkv), {})
            row += [fmt(r.get("cache_mib"), "%.2f"), fmt(r.get("ms")),
                    fmt(r["ms"] / full["ms"] if r.get("ms") and full.get("ms") else None, "%.2f")]
        rows.append(row)
    if hw:
        print()
        print("Grouped-query decode step: cache MiB, step ms and step time / MHA's, per Hkv")
        header = ["cache"]
        for hkv in (H, H // 4, 1):
            header += ["MiB Hkv=%d" % hkv, "ms", "/MHA"]
        table(header, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
