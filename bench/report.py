#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The tables of bench/run.py's results files and the speed targets they have figures for.

    python3 bench/report.py bench/results/<date>-<suite>.json ...

For each file: its suite's tables (bench/suites/<suite>.py's report: in the mha suite also the
roofline, each layer row against the bare GEMM of its projection and the FMA peak, and the
thread counts), then every target of bench/targets.json whose suite it is, per case and thread
count: MET or MISSED with the ratio, the engines it compares and the machine's load. bench/run.py
prints the same after every run.
"""

import importlib
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import median, print_table  # noqa: E402

TARGETS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "targets.json")


def load_targets(path=TARGETS):
    """The targets of bench/targets.json."""
    with open(path) as f:
        return json.load(f)["targets"]


def rounds(row):
    """A row's per-round seconds: wall time where the suite has it, else CPU time."""
    return row.get("wall_s") or row["cpu_s"]


def fastest(rows):
    """The row of the lowest median time, None for none."""
    return min(rows, key=lambda r: median(rounds(r)), default=None)


def side_by_side(a, b):
    """The median over rounds of a's time / b's, round by round (figures taken in one round)."""
    return median([x / y for x, y in zip(rounds(a), rounds(b)) if y > 0])


def verdict(target, hw, peer):
    """(ratio, bound, MET or MISSED) of the target for headwise's row and the peer's."""
    if "speed_at_least" in target:
        ratio, bound = side_by_side(peer, hw), ">= %.2f" % target["speed_at_least"]
        return ratio, bound, "MET" if ratio >= target["speed_at_least"] else "MISSED"
    ratio, bound = side_by_side(hw, peer), "<= %.2f" % target["time_at_most"]
    return ratio, bound, "MET" if ratio <= target["time_at_most"] else "MISSED"


def check_target(target, record):
    """Table rows of one target: one per case and thread count the record has both sides of."""
    groups = {}
    for row in record["rows"]:
        if re.search(target["cases"], row["case"]):
            groups.setdefault((row["case"], row["threads"]), []).append(row)
    out = []
    for (case, threads), rows in sorted(groups.items()):
        hw = fastest([r for r in rows if r["engine"].startswith("headwise")])
        peer = fastest([r for r in rows if not r["engine"].startswith("headwise") and
                        r["engine"] in target.get("against", [r["engine"]])])
        if hw is None or peer is None:
            continue
        ratio, bound, status = verdict(target, hw, peer)
        out.append([status, case, threads, hw["engine"], peer["engine"], "%.2f" % ratio, bound])
    return out


def report_targets(record, targets=None):
    """MET or MISSED, with the ratio, of every target the record has figures for."""
    env = record.get("environment", {})
    load = "load %s before, %s after" % (env.get("load_before"), env.get("load_after", "-"))
    for target in targets or load_targets():
        if target["suite"] != record["suite"]:
            continue
        table = check_target(target, record)
        print("\nTarget: %s (%s)" % (target["target"], load))
        if table:
            print_table(["", "case", "threads", "headwise", "peer", "ratio", "target"], table)
        else:
            print("not measured in this run (no case matching %r with headwise and a peer)"
                  % target["cases"])


def report(record, suite=None):
    """The suite's tables, then its targets."""
    suite = suite or importlib.import_module("suites." + record["suite"])
    suite.report(record)
    report_targets(record)


def main(argv=None):
    """Reports every results file named on the command line."""
    paths = sys.argv[1:] if argv is None else argv
    if not paths or paths[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if paths else 2
    for path in paths:
        with open(path) as f:
            record = json.load(f)
        print("== %s (%s, %s)" % (path, record["suite"], record.get("environment", {})
                                  .get("date", "undated")))
        report(record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
