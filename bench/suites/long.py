# SPDX-License-Identifier: MIT
"""Long sequences: bench_long's Google Benchmark cases long/<mode>/<kernel>/<mask>/float/B:_/L:_,
MultiheadAttention's blocked and materialised kernels (and the automatic choice) inside the
layer, inference (forward_eval) and a training step, causal and not, E = 512, H = 8, one thread:
CPU time and the extra peak memory of the calls (extra_MiB), medians of --rounds repetitions.
--full: L up to 8192. Against torch's layers on the same long shapes: the attention suite's long
cases (scripts/bench_long.sh runs both)."""

import os
import re

from common import environment, gbench, median, print_table
from engines import cmake_cache, thread_env

PACKAGES = ()
NAME = re.compile(r"^long/(?P<mode>[a-z_]+)/(?P<kernel>[a-z]+)/(?P<mask>[a-z]+)/float/"
                  r"B:(?P<B>\d+)/L:(?P<L>\d+)")


def add_arguments(ap):
    """The suite's options."""
    ap.add_argument("--build", default="build/bench/long", help="a release build of headwise")
    ap.add_argument("--full", action="store_true", help="L from 256 to 8192")
    ap.add_argument("--min-time", default="0.2", help="seconds per repetition of a short case")
    ap.add_argument("--filter", default=".", help="Google Benchmark's --benchmark_filter")


def run(args):
    """Runs bench_long once: the results record."""
    program = os.path.join(args.build, "bench", "bench_long")
    record = {"suite": "long", "environment": environment(), "cases": {}, "rows": []}
    print("load before:", record["environment"]["load_before"], flush=True)
    flags = gbench.standard_flags(args.rounds, args.min_time,
                                  ["--benchmark_filter=" + args.filter])
    gb = gbench.run_program(program, flags + (["--full"] if args.full else []), thread_env(1))
    record["workers"] = {"headwise/1": {"program": program, "build": cmake_cache(program),
                                        "context": gb["context"]}}
    for name, r in gbench.repetitions(gb, NAME).items():
        g = r.pop("fields")
        record["rows"].append(dict(r, case=name, engine="headwise", threads=1, op=g["mode"],
                                   kernel=g["kernel"], mask=g["mask"],
                                   shape=[int(g["B"]), int(g["L"])]))
    return record


def report(record):
    """Per mode, mask and shape: each kernel's ms and extra MiB, blocked over materialised."""
    cells = {}
    for row in record["rows"]:
        key = (row["op"], row["mask"], tuple(row["shape"]))
        cells.setdefault(key, {})[row["kernel"]] = (1e3 * median(row["cpu_s"]),
                                                    median(row.get("extra_MiB", [])))
    table = []
    for (op, mask, shape), k in sorted(cells.items()):
        b, m = k.get("blocked", (float("nan"),) * 2), k.get("materialised", (float("nan"),) * 2)
        table.append([op, mask, "(%d, %d)" % shape, "%.2f" % b[0], "%.2f" % m[0],
                      "%.2f" % (b[0] / m[0]), "%.1f" % b[1], "%.1f" % m[1]])
    print_table(["mode", "mask", "(B, L)", "blocked ms", "materialised ms",
                 "blocked / materialised", "blocked MiB", "materialised MiB"], table)
