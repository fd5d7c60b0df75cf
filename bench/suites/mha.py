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
from engines import cmake_cache, thread_env

PACKAGES = ()
NAME = re.compile(r"^mha/(?P<op>\w+)/(?P<proj>\w+)/(?P<scalar>\w+)/B:(?P<B>\d+)/L:(?P<L>\d+)/"
                  r"E:(?P<E>\d+)/H:(?P<H>\d+)")


def add_arguments(ap):
    """The suite's options."""
    ap.add_argument("--build", nargs="+", default=["build/bench/peers"],
                    help="release builds of headwise (bench_mha built)")
    ap.add_argument("--filter", default="^mha/(forward_eval|forward_backward)/",
                    help="Google Benchmark's --benchmark_filter")
    ap.add_argument("--min-time", default="0.2", help="seconds per repetition of a case")


def run(args):
    """Runs bench_mha of every build: the results record."""
    record = {"suite": "mha", "environment": environment(), "cases": {}, "rows": [],
              "workers": {}}
    print("load before:", record["environment"]["load_before"], flush=True)
    for build in args.build:
        program = os.path.join(build, "bench", "bench_mha")
        engine = "headwise" if build == args.build[0] else os.path.basename(build.rstrip("/"))
        gb = gbench.run_program(program, gbench.standard_flags(
            args.rounds, args.min_time, ["--benchmark_filter=" + args.filter]), thread_env(1))
        record["workers"][engine + "/1"] = {"program": program, "build": cmake_cache(program),
                                            "context": gb["context"]}
        for name, r in gbench.repetitions(gb, NAME).items():
            g = r["fields"]
            record["rows"].append({"case": name, "engine": engine, "threads": 1,
                                   "op": g["op"], "projection": g["proj"], "scalar": g["scalar"],
                                   "shape": [int(g[k]) for k in "BLEH"], "cpu_s": r["cpu_s"]})
    return record


def report(record):
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
