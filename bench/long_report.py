#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The long-sequence table, the issue's targets and a log-log plot, from one run.

    python3 bench/long_report.py build/bench/long/bench_long.json
                                 [--torch build/bench/long/bench_long_torch.json]
                                 [--png build/bench/long/bench_long.png]

Reads bench_long's Google Benchmark JSON (medians) and long_torch.py's JSON. Prints, per mode,
mask and length, the time and the extra memory of headwise's blocked and materialised kernels and
of torch, the ratios to torch, then whether each target holds at (1, 4096, 512, 8):
  training   extra memory <= 1/8 of torch's, time <= 0.5 x torch's
  inference  time <= 0.6 x torch's
  causal     causal training time <= 0.6 x the non-causal one (blocked)
  short      at (8, 128, 512, 8) blocked no slower than materialised, or the automatic choice
             running the faster of the two (the case's "blocked" counter says which it ran)
The plot (needs python3-matplotlib): time and memory against L, log-log, one panel each for
inference and training, solid without a mask and dashed causal.
"""

import argparse
import json
import re
import sys

NAME = re.compile(r"^long/(?P<mode>[a-z_]+)/(?P<kernel>[a-z]+)/(?P<mask>[a-z]+)/float/"
                  r"B:(?P<B>\d+)/L:(?P<L>\d+)")
UNIT = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


def load_headwise(path):
    """{(mode, kernel, mask, B, L): {"ms": median ms, "extra_MiB": median MiB}} and the context."""
    with open(path) as f:
        data = json.load(f)
    timing = "real_time" if data.get("context", {}).get("headwise_timing") == "wall" else \
        "cpu_time"
    out = {}
    for b in data.get("benchmarks", []):
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        m = NAME.match(b["name"])
        if not m:
            continue
        key = (m["mode"], m["kernel"], m["mask"], int(m["B"]), int(m["L"]))
        out[key] = {"ms": b[timing] * UNIT[b.get("time_unit", "ns")],
                    "extra_MiB": b.get("extra_MiB", -1.0), "blocked": b.get("blocked")}
    return out, data.get("context", {})


def load_torch(path):
    if not path:
        return {}, {}
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError:
        return {}, {}
    return ({(r["mode"], r["mask"], r["B"], r["L"]): r for r in data["results"]},
            data.get("context", {}))


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def ratio(a, b):
    return None if a is None or b is None or b <= 0 else a / b


def table(hw, torch):
    keys = sorted({(k[0], k[2], k[3], k[4]) for k in hw} | set(torch),
                  key=lambda k: (k[0] != "forward_eval", k[1], k[2], k[3]))
    header = ["mode", "mask", "B", "L", "torch ms", "blocked ms", "mat. ms", "blocked/torch",
              "mat./torch", "torch MiB", "blocked MiB", "mat. MiB"]
    rows = []
    for mode, mask, B, L in keys:
        t = torch.get((mode, mask, B, L), {})
        bl = hw.get((mode, "blocked", mask, B, L), {})
        ma = hw.get((mode, "materialised", mask, B, L), {})
        rows.append([mode, mask, str(B), str(L), fmt(t.get("ms"), ".1f"),
                     fmt(bl.get("ms"), ".1f"), fmt(ma.get("ms"), ".1f"),
                     fmt(ratio(bl.get("ms"), t.get("ms")), ".2f"),
                     fmt(ratio(ma.get("ms"), t.get("ms")), ".2f"),
                     fmt(t.get("extra_MiB"), ".1f"), fmt(bl.get("extra_MiB"), ".1f"),
                     fmt(ma.get("extra_MiB"), ".1f")])
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    line = lambda r: "  ".join(c.rjust(w) if i > 1 else c.ljust(w)
                               for i, (c, w) in enumerate(zip(r, widths)))
    print(line(header))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print(line(r))
    auto = [(k[0], hw[k]["ms"]) for k in sorted(hw) if k[1] == "automatic"]
    for mode, ms in auto:
        print("automatic choice, %s (8, 128, 512, 8): %.2f ms" % (mode, ms))


def targets(hw, torch):
    def get(d, key, field):
        return d.get(key, {}).get(field)

    checks = []
    t_train = get(torch, ("training", "none", 1, 4096), "ms")
    t_mem = get(torch, ("training", "none", 1, 4096), "extra_MiB")
    b_train = get(hw, ("training", "blocked", "none", 1, 4096), "ms")
    b_mem = get(hw, ("training", "blocked", "none", 1, 4096), "extra_MiB")
    t_eval = get(torch, ("forward_eval", "none", 1, 4096), "ms")
    b_eval = get(hw, ("forward_eval", "blocked", "none", 1, 4096), "ms")
    b_causal = get(hw, ("training", "blocked", "causal", 1, 4096), "ms")
    checks.append(("training extra memory <= 1/8 torch's", ratio(b_mem, t_mem), 1 / 8,
                   "%s MiB vs torch %s MiB" % (fmt(b_mem, ".1f"), fmt(t_mem, ".1f"))))
    checks.append(("training time <= 0.5 x torch", ratio(b_train, t_train), 0.5,
                   "%s ms vs torch %s ms" % (fmt(b_train, ".0f"), fmt(t_train, ".0f"))))
    checks.append(("inference time <= 0.6 x torch", ratio(b_eval, t_eval), 0.6,
                   "%s ms vs torch %s ms" % (fmt(b_eval, ".0f"), fmt(t_eval, ".0f"))))
    checks.append(("causal training <= 0.6 x non-causal", ratio(b_causal, b_train), 0.6,
                   "%s ms vs %s ms" % (fmt(b_causal, ".0f"), fmt(b_train, ".0f"))))
    print()
    print("Targets at (1, 4096, 512, 8), float, blocked kernel:")
    for name, value, limit, detail in checks:
        verdict = "-" if value is None else ("holds" if value <= limit else "MISSED")
        print("  %-40s %-6s (%s; ratio %s)" % (name, verdict, detail, fmt(value, ".3f")))
    for mode in ("forward_eval", "training"):
        bl = get(hw, (mode, "blocked", "none", 8, 128), "ms")
        ma = get(hw, (mode, "materialised", "none", 8, 128), "ms")
        au = get(hw, (mode, "automatic", "none", 8, 128), "ms")
        if bl is None or ma is None:
            continue
        # The automatic case runs one of the two kernels (its "blocked" counter says which): the
        # target holds when blocked is no slower, or when the automatic choice is the faster one.
        chose = get(hw, (mode, "automatic", "none", 8, 128), "blocked")
        chose = None if chose is None else ("blocked" if chose >= 0.5 else "materialised")
        ok = bl <= ma or chose == "materialised"
        print("  %-40s %-6s (blocked %.2f ms, materialised %.2f ms; automatic runs %s: %s ms)" % (
            "(8, 128) %s: blocked no slower" % mode, "holds" if ok else "MISSED", bl, ma,
            chose or "?", fmt(au, ".2f")))


def plot(hw, torch, png):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("long_report: matplotlib not available: no plot")
        return
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    series = [("torch 1.13", None, "tab:red"), ("headwise blocked", "blocked", "tab:blue"),
              ("headwise materialised", "materialised", "tab:green")]
    for col, mode in enumerate(("forward_eval", "training")):
        for row, field in enumerate(("ms", "extra_MiB")):
            ax = axes[row][col]
            for label, kernel, color in series:
                for mask, style in (("none", "-"), ("causal", "--")):
                    if kernel is None:
                        pts = sorted((k[3], v[field]) for k, v in torch.items()
                                     if k[0] == mode and k[1] == mask and k[2] == 1)
                    else:
                        pts = sorted((k[4], v[field]) for k, v in hw.items()
                                     if k[0] == mode and k[1] == kernel and k[2] == mask
                                     and k[3] == 1)
                    pts = [(x, y) for x, y in pts if y is not None and y > 0]
                    if pts:
                        ax.plot([p[0] for p in pts], [p[1] for p in pts], style, color=color,
                                marker="o", markersize=3,
                                label="%s%s" % (label, ", causal" if mask == "causal" else ""))
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("sequence length L (B = 1, E = 512, H = 8, float, 1 thread)")
            ax.set_ylabel("time per call (ms)" if field == "ms" else "extra peak memory (MiB)")
            ax.set_title("%s: %s" % ("inference" if mode == "forward_eval" else
                                     "training step (forward + backward)",
                                     "time" if field == "ms" else "memory"))
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    print("long_report: plot written to %s" % png)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("headwise", help="bench_long JSON")
    parser.add_argument("--torch", help="long_torch.py JSON")
    parser.add_argument("--png", help="write the log-log plot here")
    args = parser.parse_args(argv)
    hw, context = load_headwise(args.headwise)
    torch, torch_context = load_torch(args.torch)
    print()
    print("Long sequences: headwise (%s, %s threads, %s time) and torch %s; extra_MiB = %s" % (
        context.get("build_type", "?"), context.get("headwise_threads", "?"),
        context.get("headwise_timing", "?"), torch_context.get("torch_version", "(not run)"),
        context.get("memory", "?")))
    table(hw, torch)
    targets(hw, torch)
    if args.png:
        plot(hw, torch, args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
