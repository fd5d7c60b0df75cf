#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Plots of bench/run.py's results, made from the JSON files alone.

    $HEADWISE_PEERS_PYTHON bench/plot.py bench/results/<date>-<suite>.json ... [--out docs/]

For each file, <out>/<file name>.png: per case and thread count, every engine's median time
divided by the reference's (headwise; fused in the mha and decode suites, materialised in the long suite),
on a log axis: above 1 slower than the reference. The title carries the date, the CPU and the load.
"""

import argparse
import json
import os
import statistics


REFERENCE = {"mha": "fused", "long": "materialised", "decode": "fused"}


def variant(row):
    """The variant a row of a one-program suite times: a projection (mha), a kernel (long)."""
    return row.get("projection") or row.get("kernel")


def label(row):
    """What a bar is: the variant in one-program suites (after the build's name beside the
    first build), engine/threads elsewhere."""
    if variant(row):
        return variant(row) if row["engine"] == "headwise" else "%s %s" % (row["engine"],
                                                                           variant(row))
    return "%s/%d" % (row["engine"], row["threads"])


def seconds(row):
    """The median over rounds: wall time where the suite has it, else CPU time."""
    return statistics.median(row.get("wall_s") or row["cpu_s"])


def case_of(row):
    """The group a bar belongs to: the case, with the operation and shape in the mha suite."""
    if variant(row):
        return "%s%s (%s)" % (row["op"], " causal" if row.get("mask") == "causal" else "",
                              ", ".join(map(str, row["shape"])))
    return "%s, %d thread%s" % (row["case"], row["threads"], "s" if row["threads"] > 1 else "")


def ratios(record):
    """{case: {label: time / reference time}} and the reference's label."""
    ref = REFERENCE.get(record["suite"], "headwise")
    times = {}
    for row in record["rows"]:
        times.setdefault(case_of(row), {})[label(row)] = seconds(row)
    out = {}
    for case, t in times.items():
        base = next((v for k, v in t.items() if k.split("/")[0] == ref), None)
        if base:
            out[case] = {k: v / base for k, v in t.items()}
    return out, ref


def plot(record, png):
    """One horizontal bar chart of the record's ratios."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401 - matplotlib.ticker below

    data, ref = ratios(record)
    labels = sorted({k for r in data.values() for k in r})
    cases = sorted(data)
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.28 * len(cases) * max(1, len(labels))))
    width = 0.8 / max(1, len(labels))
    for i, name in enumerate(labels):
        ys = [k + (i - (len(labels) - 1) / 2) * width for k in range(len(cases))]
        ax.barh(ys, [data[c].get(name, 0) for c in cases], height=width, label=name)
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%.3g"))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%.3g"))
    ax.set_yticks(range(len(cases)))
    ax.set_yticklabels(cases, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time / %s's time (log; > 1: slower than %s)" % (ref, ref))
    env = record["environment"]
    ax.set_title("%s, %s: %s, load %s before, %s after" % (
        record["suite"], env["date"][:10], env["cpu"], env["load_before"][0],
        env.get("load_after", ["?"])[0]), fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return png


def main():
    """Plots every results file given."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", help="results JSON files of bench/run.py")
    ap.add_argument("--out", default=None, help="directory of the plots (default: beside each)")
    args = ap.parse_args()
    for path in args.results:
        with open(path) as f:
            record = json.load(f)
        name = os.path.splitext(os.path.basename(path))[0] + ".png"
        print("plot:", plot(record, os.path.join(args.out or os.path.dirname(path), name)))


if __name__ == "__main__":
    main()
