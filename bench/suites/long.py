# SPDX-License-Identifier: MIT
"""Long sequences: bench_long's Google Benchmark cases long/<mode>/<kernel>/<mask>/float/B:_/L:_,
MultiheadAttention's blocked and materialised kernels (and the automatic choice) inside the
layer, inference (forward_eval) and a training step, causal and not, E = 512, H = 8, one thread:
CPU time and the extra peak memory of the calls (extra_MiB), medians of --rounds repetitions.
--full: L up to 8192. Against torch's layers on the same long shapes: the attention suite's long
cases (scripts/bench_long.sh runs both)."""

import re

from common import gbench, median, print_table

PACKAGES = ()
NAME = re.compile(r"^long/(?P<op>[a-z_]+)/(?P<kernel>[a-z]+)/(?P<mask>[a-z]+)/float/"
                  r"B:(?P<B>\d+)/L:(?P<L>\d+)")


def add_arguments(ap):
    """The suite's options."""
    gbench.add_arguments(ap, "build/bench/long", "0.2")
    ap.add_argument("--full", action="store_true", help="L from 256 to 8192")


def run(args):
    """Runs bench_long once: the results record."""
    return gbench.one_run("long", args, "bench_long", NAME, ["B", "L"],
                          ["--full"] if args.full else [])


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
