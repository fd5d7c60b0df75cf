#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Times torch.nn.MultiheadAttention on the shapes of bench_mha and prints headwise/torch ratios.

    python3 bench/compare_torch.py [--headwise build/release/bench.json] [--threads N]
                                   [--full] [--json build/release/bench_torch.json]

Two paths, self-attention (query = key = value), float32, batch_first=True, dropout 0:
  inference  module.eval(), torch.inference_mode(), need_weights=False: torch's fast path
             (torch._native_multi_head_attention) when it applies; headwise's forward_eval
  training   module.train(), input requiring grad, forward then out.backward(G) (the gradient
             of sum(out * G)); headwise's forward_backward
and, as a gauge of the machine's speed during this run, the bare fused-projection GEMM
  gemm       X [B L, E] times W^T, W [3E, E] (torch.nn.functional.linear, no bias): the same
             OpenBLAS product as bench_mha's roofline/gemm_qkv, so that the two runs' times of
             it show how much the machine's speed drifted between them (bench/report.py)
Each time is the median of timed calls after warm-up calls, the cases taking turns in rounds
(as bench_mha's repetitions are interleaved), on bench_mha's clock: CPU time of the process
(time.process_time) with one thread, wall time (time.perf_counter) with more. The thread count
is matched to headwise's (from its JSON, else --threads, else 1): torch.set_num_threads, and
OMP_NUM_THREADS / OPENBLAS_NUM_THREADS (plus OMP_WAIT_POLICY=PASSIVE with 2 threads) set before
torch is imported. torch's GEMMs run in OpenBLAS (Debian's torch), which picks its kernels for
the CPU; an OPENBLAS_CORETYPE inherited from the environment is not applied unless passed as
--openblas-coretype. Ratios are headwise time / torch time: below 1, headwise is faster.
Without torch it says so and exits 0.
"""

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# bench_mha.cpp's kMainShapes, and kLongShape (forward only) with --full.
MAIN_SHAPES = [(8, 128, 512, 8), (1, 512, 768, 12), (32, 64, 256, 4), (4, 1024, 512, 8)]
LONG_SHAPE = (1, 4096, 512, 8)
PROJECTIONS = ("fused", "separate", "per_head")


def headwise_threads(path):
    with open(path) as f:
        context = json.load(f).get("context", {})
    for key in ("threads", "headwise_threads"):
        try:
            return max(1, int(context[key]))
        except (KeyError, ValueError):
            pass
    return None


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--headwise", help="bench_mha JSON: thread count and headwise times")
    parser.add_argument("--threads", type=int, help="torch threads (default: headwise's, or 1)")
    parser.add_argument("--full", action="store_true", help="also (1, 4096, 512, 8) inference")
    parser.add_argument("--json", help="write torch's medians here (read by bench/report.py)")
    parser.add_argument("--min-time", type=float, default=0.5,
                        help="seconds of timed calls per case, at least --min-runs calls")
    parser.add_argument("--min-runs", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5,
                        help="the cases take turns this many times")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--openblas-coretype", metavar="NAME",
                        help="force OpenBLAS's kernels (OPENBLAS_CORETYPE=NAME, e.g. Haswell); "
                             "by default OpenBLAS picks them for this CPU, even if the environment "
                             "sets OPENBLAS_CORETYPE")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    hw_path = args.headwise if args.headwise and os.path.exists(args.headwise) else None
    threads = args.threads or (hw_path and headwise_threads(hw_path)) or 1
    args.clock = "cpu" if threads == 1 else "wall"

    # Read by OpenMP and OpenBLAS when torch loads them: set before the import.
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ["OPENBLAS_NUM_THREADS"] = str(threads)
    os.environ["MKL_NUM_THREADS"] = str(threads)
    if threads == 2:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    # torch's GEMMs run in OpenBLAS (Debian's torch). An OPENBLAS_CORETYPE inherited from the
    # environment would pin its kernels (Haswell: AVX2 only) and compare us with a handicapped
    # torch; torch as a user runs it lets OpenBLAS choose for the CPU.
    inherited_coretype = os.environ.pop("OPENBLAS_CORETYPE", None)
    if args.openblas_coretype:
        os.environ["OPENBLAS_CORETYPE"] = args.openblas_coretype
    try:
        import torch
    except ImportError:
        print("torch not available: skipping comparison")
        return 0
    torch.set_num_threads(threads)

    shapes = [(s, m) for m in ("inference", "training", "gemm") for s in MAIN_SHAPES]
    if args.full:
        shapes.append((LONG_SHAPE, "inference"))
    shapes.sort(key=lambda sm: MAIN_SHAPES.index(sm[0]) if sm[0] in MAIN_SHAPES else 99)

    blas_core = _openblas_core()
    print()
    print("torch %s: nn.MultiheadAttention, float32, batch_first, %d thread(s), %s time "
          "(OMP_NUM_THREADS=%s, OPENBLAS_NUM_THREADS=%s%s); OpenBLAS kernels: %s%s" % (
              torch.__version__, torch.get_num_threads(),
              "CPU" if args.clock == "cpu" else "wall", os.environ["OMP_NUM_THREADS"],
              os.environ["OPENBLAS_NUM_THREADS"],
              ", OMP_WAIT_POLICY=PASSIVE" if threads == 2 else "",
              blas_core or "?",
              " (forced by --openblas-coretype)" if args.openblas_coretype else
              " (chosen by OpenBLAS; OPENBLAS_CORETYPE=%s from the environment not applied)"
              % inherited_coretype if inherited_coretype else ""))
    results = []
    for (shape, mode), (ms, runs, fast_path) in zip(shapes, time_cases(torch, shapes, args)):
        results.append({"shape": list(shape), "mode": mode, "ms": ms, "runs": runs,
                        "fast_path": fast_path})

    context = {
        "torch_version": torch.__version__,
        "threads": threads,
        "torch_threads": torch.get_num_threads(),
        "timing": args.clock,
        "env": {k: os.environ[k] for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                             "OMP_WAIT_POLICY", "OPENBLAS_CORETYPE")
                if k in os.environ},
        "blas": _blas_info(torch),
        "glibc_tunables": os.environ.get("GLIBC_TUNABLES"),
        "openblas_core": blas_core,
        "openblas_coretype_from_environment_not_applied": inherited_coretype
        if not args.openblas_coretype else None,
    }
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"context": context, "results": results}, f, indent=1)

    hw = None
    if hw_path:
        sys.path.insert(0, HERE)
        from report import load_results
        _, mha, _, _ = load_results(hw_path)
        hw = mha
    print_results(results, hw)
    if args.json:
        print("compare_torch: torch medians written to %s" % args.json)
    return 0


def make_call(torch, shape, mode):
    """A function making one call of torch.nn.MultiheadAttention on `shape` along `mode`."""
    B, L, E, H = shape
    torch.manual_seed(0)
    if mode == "gemm":
        x2d, w = torch.randn(B * L, E), torch.randn(3 * E, E)

        def call():
            with torch.inference_mode():
                torch.nn.functional.linear(x2d, w)
        return call
    mha = torch.nn.MultiheadAttention(E, H, batch_first=True)
    x = torch.randn(B, L, E)
    if mode == "inference":
        mha.eval()

        def call():
            with torch.inference_mode():
                mha(x, x, x, need_weights=False)
    else:
        mha.train()
        x.requires_grad_(True)
        g = torch.randn(B, L, E)

        def call():
            out, _ = mha(x, x, x, need_weights=False)
            out.backward(g)  # the gradient of sum(out * g); parameter grads accumulate
    return call


def time_cases(torch, cases, args):
    """Per case: median ms of one call, the number of timed calls, whether the fast path ran.

    The cases take turns, in --rounds rounds, so that a slow spell of a shared machine falls on
    all of them rather than on one (as bench_mha's --benchmark_enable_random_interleaving).
    """
    # The same clock as bench_mha: CPU time of the process with one thread (the time spent
    # waiting for a core on a shared machine left out), wall time with more.
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    calls = [make_call(torch, shape, mode) for shape, mode in cases]
    per_round = []
    for call in calls:
        for _ in range(max(1, args.warmup)):
            t0 = clock()
            call()
            estimate = clock() - t0
        # Enough calls per round for --min-time in all, at least --min-runs calls in all.
        n = max(-(-args.min_runs // args.rounds),
                int(args.min_time / args.rounds / max(estimate, 1e-6)) + 1)
        per_round.append(min(n, 40))
    times = [[] for _ in calls]
    for _ in range(args.rounds):
        for i, call in enumerate(calls):
            for _ in range(per_round[i]):
                t0 = clock()
                call()
                times[i].append(clock() - t0)
    return [(1e3 * statistics.median(t), len(t), _ran_fast_path(torch, call))
            for t, call in zip(times, calls)]


def _ran_fast_path(torch, call):
    """Whether the call went through torch's fused native attention kernel (one profiled call)."""
    try:
        with torch.autograd.profiler.profile() as prof:
            call()
        return any("_native_multi_head_attention" in e.name for e in prof.function_events)
    except Exception:  # the profiler is optional here; the timing above does not depend on it
        return None


def _openblas_core():
    """The kernel set OpenBLAS chose ("Haswell", "SkylakeX", ...), if torch loaded OpenBLAS."""
    import ctypes
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "blas" in line and ".so" in line}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            corename = ctypes.CDLL(path).openblas_get_corename
        except (OSError, AttributeError):
            continue
        corename.restype = ctypes.c_char_p
        return corename().decode()
    return None


def _blas_info(torch):
    try:
        config = torch.__config__.show()
    except Exception:
        return "?"
    for part in config.replace("\n", ",").split(","):
        if "BLAS_INFO" in part:
            return part.strip()
    return "?"


def print_results(results, hw):
    def hw_ms(op, proj, shape):
        if not hw:
            return None
        r = hw.get((op, proj, "float", tuple(shape)))
        return r["ms"] if r else None

    header = ["shape (B, L, E, H)", "path", "torch ms", "calls", "fast path"]
    if hw:
        header += ["headwise ms (fused)"] + ["%s/torch" % p for p in PROJECTIONS]
    rows = []
    for r in results:
        if r["mode"] == "gemm":
            continue  # bench/report.py puts these against bench_mha's roofline/gemm_qkv
        op = "forward_eval" if r["mode"] == "inference" else "forward_backward"
        row = ["(%d, %d, %d, %d)" % tuple(r["shape"]), r["mode"], "%.2f" % r["ms"], str(r["runs"]),
               {True: "yes", False: "no", None: "?"}[r["fast_path"]]]
        if hw:
            fused = hw_ms(op, "fused", r["shape"])
            row.append("%.2f" % fused if fused is not None else "-")
            for proj in PROJECTIONS:
                t = hw_ms(op, proj, r["shape"])
                row.append("%.2f" % (t / r["ms"]) if t is not None else "-")
        rows.append(row)
    widths = [max(len(row[i]) for row in [header] + rows) for i in range(len(header))]
    align = ["<", "<"] + [">"] * (len(header) - 2)
    line = lambda row: "  ".join(format(c, a + str(w)) for c, w, a in zip(row, widths, align))
    print(line(header))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(line(row))
    if hw:
        print("headwise/torch = headwise median time / torch median time, same shape and path; "
              "below 1, headwise is faster. inference = headwise forward_eval, training = "
              "headwise forward_backward.")
    else:
        print("(no headwise JSON given: pass --headwise build/release/bench.json for ratios)")


if __name__ == "__main__":
    sys.exit(main())
