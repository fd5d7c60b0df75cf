# SPDX-License-Identifier: MIT
"""MultiheadAttention per projection: bench_mha's Google Benchmark cases mha/<operation>/
<projection>/float/B:_/L:_/E:_/H:_ for the fused (one [3E, E] in-projection), per_head (H
products of [D, E] blocks) and separate (three [E, E] products) projections, forward_eval and
forward_backward at the four main shapes and over the head sweep, one thread. bench_mha times
each case by the CPU time of its thread; the figures are medians of --rounds repetitions, the
cases of one repetition interleaved (--benchmark_enable_random_interleaving). Several --build
directories (e.g. the Eigen backend, no -march) run one after the other, each an engine named
after its directory; the first is the reference."""

import os
import re

from common import environment, gbench, median, print_table
from engines import program_facts, thread_env

PACKAGES = ()
NAME = re.compile(r"^(?P<family>mha|mha_threads)/(?P<op>\w+)/(?P<projection>\w+)/(?P<scalar>\w+)/"
                  r"B:(?P<B>\d+)/L:(?P<L>\d+)/E:(?P<E>\d+)/H:(?P<H>\d+)(/T:(?P<T>\d+))?")
# The limits the layer is put against: the fused projection's product as one bare GEMM (and as
# 3 and 3H GEMMs), and the FMA peak of one core.
ROOFLINE = re.compile(r"^roofline/(?P<family>\w+)/(?P<scalar>\w+)"
                      r"(/B:(?P<B>\d+)/L:(?P<L>\d+)/E:(?P<E>\d+)(/H:(?P<H>\d+))?)?")
SHAPE = ["B", "L", "E", "H"]


def add_arguments(ap):
    """The suite's options."""
    ap.add_argument("--build", nargs="+", default=["build/bench/peers"],
                    help="release builds of headwise (bench_mha built)")
    ap.add_argument("--omp-build", help="an OpenMP build of bench_mha: with --threads above 1, "
                    "its mha_threads cases (OpenMP threads, the BLAS on one), engine headwise-omp")
    ap.add_argument("--filter", default="^(mha|roofline)/",
                    help="Google Benchmark's --benchmark_filter (the one-thread run)")
    ap.add_argument("--min-time", default="0.2", help="seconds per repetition of a case")


def _run(record, program, engine, args, flags, env):
    """One run of a bench_mha program: its cases' rows into the record."""
    gb = gbench.run_program(program, gbench.standard_flags(args.rounds, args.min_time, flags),
                            env)
    threads = max(int(env["OMP_NUM_THREADS"]), int(env["OPENBLAS_NUM_THREADS"]))
    record["workers"]["%s/%d" % (engine, threads)] = program_facts(program, gb)
    for row in gbench.rows_of(gb, NAME, engine, shape=SHAPE):
        T = row.pop("T")
        if row.pop("family") == "mha_threads":
            record["mha_threads"].append(dict(row, threads=int(T)))
        else:
            record["rows"].append(row)
    record["roofline"] += gbench.rows_of(gb, ROOFLINE, engine, shape=SHAPE)


def run(args):
    """Runs bench_mha of every build on one thread, then, with --threads above 1, the
    mha_threads cases on the first build (the BLAS's threads) and the --omp-build: the results
    record (the mha_threads cases in "mha_threads", their T as threads; the bare GEMMs and the
    FMA peak in "roofline")."""
    record = {"suite": "mha", "environment": environment(), "cases": {}, "rows": [],
              "roofline": [], "mha_threads": [], "workers": {}}
    print("load before:", record["environment"]["load_before"], flush=True)
    for build in args.build:
        engine = "headwise" if build == args.build[0] else os.path.basename(build.rstrip("/"))
        _run(record, os.path.join(build, "bench", "bench_mha"), engine, args,
             ["--benchmark_filter=" + args.filter], thread_env(1))
    most = max(args.threads)
    if most > 1:
        threads = ["--benchmark_filter=^mha_threads/"]
        _run(record, os.path.join(args.build[0], "bench", "bench_mha"), "headwise-blas", args,
             threads, thread_env(1, blas_threads=most))
        if args.omp_build:
            _run(record, os.path.join(args.omp_build, "bench", "bench_mha"), "headwise-omp",
                 args, threads, thread_env(most, blas_threads=1))
    return record


def report(record):
    """The projections side by side, then the roofline and the thread tables."""
    report_projections(record)
    report_roofline(record)
    report_threads(record)


def report_projections(record):
    """ms per call of each projection, and per_head and separate against fused."""
    ms = {}
    for row in record["rows"]:
        key = (row["engine"], row["op"], tuple(row["shape"]))
        ms.setdefault(key, {})[row["projection"]] = 1e3 * median(row["cpu_s"])
    table = []
    for (engine, op, shape), p in sorted(ms.items(), key=lambda kv: (kv[0][0] != "headwise",
                                                                      kv[0])):
        fused = p.get("fused", float("nan"))
        table.append([engine, op, "(%d, %d, %d, %d)" % shape] +
                     ["%.3f" % p.get(k, float("nan")) for k in ("fused", "per_head", "separate")]
                     + ["%.2f" % (p.get(k, float("nan")) / fused) for k in ("per_head",
                                                                              "separate")])
    print_table(["build", "operation", "(B, L, E, H)", "fused ms", "per_head ms", "separate ms",
                 "per_head / fused", "separate / fused"], table)


def _gflops(row):
    """The median FLOP/s counter of a row, in GFLOP/s (NaN without one)."""
    return median(row.get("FLOP/s", [])) / 1e9


def _percent(part, whole):
    """part / whole in per cent, "-" where either is missing."""
    return "%.0f" % (100 * part / whole) if part == part and whole == whole and whole else "-"


def report_roofline(record):
    """Each one-thread layer row against the bare GEMM of its fused projection (what the layer
    can reach) and the best repetition of the FMA peak of one core (what the machine can)."""
    gemm, peak = {}, {}
    for row in record.get("roofline", []):
        if row["family"] == "fma_peak":
            peak[row["engine"]] = max(row.get("FLOP/s", [float("nan")])) / 1e9
        else:
            gemm[(row["engine"], row["family"], tuple(row["shape"][:3]))] = row
    table = []
    for row in sorted(record["rows"], key=lambda r: (r["engine"], r["shape"], r["projection"],
                                                      r["op"])):
        qkv = gemm.get((row["engine"], "gemm_qkv", tuple(row["shape"][:3])))
        if qkv is None or row["scalar"] != "float":
            continue
        table.append([row["engine"], "(%d, %d, %d, %d)" % tuple(row["shape"]), row["projection"],
                      row["op"], "%.3f" % (1e3 * median(row["cpu_s"])), "%.1f" % _gflops(row),
                      _percent(_gflops(row), _gflops(qkv)),
                      _percent(_gflops(row), peak.get(row["engine"], float("nan")))])
    if not table:
        return
    print("\nRoofline, one thread: FMA peak %s GFLOP/s per core (the best repetition: a loaded "
          "machine makes it read low); %% GEMM = of the bare fused projection GEMM [B L, E] x "
          "[E, 3E] at the same shape" % ", ".join("%s %.1f" % kv for kv in sorted(peak.items())))
    print_table(["build", "(B, L, E, H)", "projection", "operation", "ms", "GFLOP/s", "% GEMM",
                 "% FMA peak"], table)
    gemms = [[e, "(%d, %d, %d)" % shape, "%.3f" % (1e3 * median(r["cpu_s"])),
              "%.1f" % _gflops(r), _percent(_gflops(r), peak.get(e, float("nan")))]
             for (e, family, shape), r in sorted(gemm.items()) if family == "gemm_qkv"]
    print_table(["build", "(B, L, E)", "fused GEMM ms", "GFLOP/s", "% FMA peak"], gemms)


def report_threads(record):
    """The layer on T threads by wall time, each against its own program's one-thread time: what
    a second thread is worth (below 1: slower on more threads)."""
    ms = {}
    for row in record.get("mha_threads", []):
        key = (row["engine"], row["op"], tuple(row["shape"]))
        ms.setdefault(key, {})[row["threads"]] = 1e3 * median(row["real_s"])
    table = []
    for (engine, op, shape), t in sorted(ms.items()):
        for threads in sorted(k for k in t if k > 1):
            table.append([engine, op, "(%d, %d, %d, %d)" % shape, threads, "%.3f" % t[1],
                          "%.3f" % t[threads], "%.2f" % (t[1] / t[threads])])
    if table:
        print("\nThreads (wall time): headwise-blas = the BLAS's threads, headwise-omp = OpenMP's"
              " with the BLAS on one")
        print_table(["build", "operation", "(B, L, E, H)", "threads", "1 thread ms",
                     "threads ms", "speed-up"], table)
