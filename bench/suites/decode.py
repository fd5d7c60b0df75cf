# SPDX-License-Identifier: MIT
"""Decoding with a KV cache: bench_decode's Google Benchmark cases decode_step/<projection>/float/
B:_/cache:_/E:_/H:_/Hkv:_ (decode_into of one token onto a cache of `cache` tokens; full,
grouped-query and multi-query key/value heads) and recompute_prefix/fused/... (forward of all
cache + 1 tokens, is_causal: the same token without a cache), E = 512, H = 8, one thread: CPU
time, medians of --rounds repetitions. Against torch's single-query step: the attention suite's
decode cases."""

import re

from common import gbench, median, print_table

PACKAGES = ()
NAME = re.compile(r"^(?P<op>decode_step|recompute_prefix)/(?P<projection>\w+)/float/B:(?P<B>\d+)/"
                  r"cache:(?P<cache>\d+)/E:(?P<E>\d+)/H:(?P<H>\d+)/Hkv:(?P<Hkv>\d+)")


def add_arguments(ap):
    """The suite's options."""
    gbench.add_arguments(ap, "build/bench/cblas-native", "0.1")


def run(args):
    """Runs bench_decode once: the results record."""
    return gbench.one_run("decode", args, "bench_decode", NAME, ["B", "cache", "E", "H", "Hkv"])


def report(record):
    """Per projection, cache length and key/value heads: one step's microseconds, and against
    recomputing the prefix (fused, full heads)."""
    us = {(r["op"], r["projection"], tuple(r["shape"])): 1e6 * median(r["cpu_s"])
          for r in record["rows"]}
    table = []
    for (op, proj, shape), t in sorted(us.items(), key=lambda kv: (kv[0][1], kv[0][2])):
        if op != "decode_step":
            continue
        full = us.get(("recompute_prefix", proj, shape))
        table.append([proj, shape[1], shape[4], "%.1f" % t,
                      "%.1f" % full if full else "-", "%.1f" % (full / t) if full else "-"])
    print_table(["projection", "cache", "Hkv", "step us", "recompute us", "recompute / step"],
                table)
