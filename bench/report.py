#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Reads the JSON written by bench_mha and prints the benchmark table, then draws it as a PNG.

    python3 bench/report.py build/release/bench.json [--torch build/release/bench_torch.json]
                            [--png build/release/bench.png]

Uses the median of each case's repetitions (the JSON of a run without repetitions works too).
Every row of the layer is put against two limits measured in the same run: the bare Eigen GEMM of
the fused projection shape (what the layer can reach) and the FMA peak of one core (what the
machine can reach). Ratios (per_head / fused, separate / fused) are of medians (CPU time for a
single-threaded run, wall time otherwise, as bench_mha chose); above 1 means slower than fused.
With --torch, the plot also shows torch.nn.MultiheadAttention from bench/compare_torch.py.
Without matplotlib the table is still printed and the plot is skipped.
"""

import argparse
import json
import os
import sys

PROJECTIONS = ("fused", "separate", "per_head")
TIME_TO_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


# ---- reading ------------------------------------------------------------------------------------

def parse_name(run_name):
    """'mha/forward_eval/fused/float/B:8/L:128/E:512/H:8/real_time' ->
    (['mha', 'forward_eval', 'fused', 'float'], {'B': 8, 'L': 128, 'E': 512, 'H': 8})."""
    parts, args = [], {}
    for piece in run_name.split("/"):
        if piece in ("real_time", "manual_time") or piece.startswith(("repeats:", "min_time:")):
            continue
        if ":" in piece:
            key, value = piece.split(":", 1)
            args[key] = int(value)
        else:
            parts.append(piece)
    return parts, args


def load_results(path):
    """The context and one record per case: median time in ms and FLOP/s.

    Returns (context, mha, gemm, peak) with
      mha[(operation, projection, scalar, (B, L, E, H))] = {"ms": ..., "flops": ...}
      gemm[(scalar, (B, L, E))] = {"ms": ..., "flops": ...}             the fused projection GEMM
      gemm[("separate", scalar, (B, L, E))], gemm[("per_head", scalar, (B, L, E, H))]: the same
          products as 3 and as 3H GEMMs
      peak[scalar] = {"flops": ..., "label": ...}   flops: the best repetition, if reported
    """
    with open(path) as f:
        data = json.load(f)
    # bench_mha times single-threaded runs by CPU time, multithreaded ones by wall time.
    clock = "real_time" if data.get("context", {}).get("headwise_timing") == "wall" else "cpu_time"
    rows = data.get("benchmarks", [])
    has_median = any(r.get("aggregate_name") == "median" for r in rows)
    mha, gemm, peak = {}, {}, {}
    for r in rows:
        if r.get("error_occurred"):
            continue
        if r.get("aggregate_name") == "max" and "fma_peak" in r.get("run_name", ""):
            # The peak's best repetition: a capability, not a typical time.
            peak.setdefault(parse_name(r["run_name"])[0][2], {})["best_flops"] = r.get("FLOP/s")
            continue
        if has_median:
            if r.get("run_type") != "aggregate" or r.get("aggregate_name") != "median":
                continue
        elif r.get("run_type", "iteration") != "iteration":
            continue
        parts, args = parse_name(r.get("run_name", r["name"]))
        record = {
            "ms": r[clock] * TIME_TO_MS[r.get("time_unit", "ns")],
            "flops": r.get("FLOP/s", float("nan")),
            "label": r.get("label", ""),
        }
        if parts[:1] == ["mha"] and len(parts) == 4:
            _, operation, projection, scalar = parts
            problem = (args["B"], args["L"], args["E"], args["H"])
            mha[(operation, projection, scalar, problem)] = record
        elif parts[:2] == ["roofline", "gemm_qkv"]:
            gemm[(parts[2], (args["B"], args["L"], args["E"]))] = record
        elif parts[:2] == ["roofline", "gemm_separate"]:
            gemm[("separate", parts[2], (args["B"], args["L"], args["E"]))] = record
        elif parts[:2] == ["roofline", "gemm_per_head"]:
            gemm[("per_head", parts[2], (args["B"], args["L"], args["E"], args["H"]))] = record
        elif parts[:2] == ["roofline", "fma_peak"]:
            peak.setdefault(parts[2], {}).update(record)
    for record in peak.values():
        # The peak is the best repetition when it was reported, else the median.
        record["flops"] = record.get("best_flops") or record.get("flops", float("nan"))
    return data.get("context", {}), mha, gemm, peak


def threads_of(context):
    for key in ("threads", "headwise_threads"):
        try:
            return max(1, int(context[key]))
        except (KeyError, ValueError):
            pass
    return 1


def sweep_problems(mha, scalar):
    """Problems of the head sweep: the (B, L, E) with most distinct H values, if more than 2."""
    by_ble = {}
    for (_, _, s, p) in mha:
        if s == scalar:
            by_ble.setdefault(p[:3], set()).add(p[3])
    if not by_ble:
        return []
    ble, heads = max(by_ble.items(), key=lambda kv: len(kv[1]))
    return [ble + (h,) for h in sorted(heads)] if len(heads) > 2 else []


# The shapes bench_mha.cpp measures for every projection (kMainShapes, then kLongShape).
MAIN_SHAPES = [(8, 128, 512, 8), (1, 512, 768, 12), (32, 64, 256, 4), (4, 1024, 512, 8),
               (1, 4096, 512, 8)]


def ordered_main(mha, scalar):
    """The main shapes that were measured, in their listed order (the sweep has its own table)."""
    present = {p for (_, _, s, p) in mha if s == scalar}
    return [p for p in MAIN_SHAPES if p in present]


# ---- printing -----------------------------------------------------------------------------------

def fmt(value, spec):
    if value is None or value != value:  # None or NaN
        return "-"
    return format(value, spec)


def ratio(a, b):
    if a is None or b is None or not b:
        return None
    return a / b


MARKDOWN = False  # set by --markdown: tables as GitHub Markdown, for the README


def print_table(header, rows, align=None):
    """Aligned text: first column left, the others right, unless `align` says otherwise."""
    widths = [max(len(str(row[i])) for row in [header] + rows) for i in range(len(header))]
    align = align or ["<"] + [">"] * (len(header) - 1)
    if MARKDOWN:
        line = lambda row: "| " + " | ".join(
            format(str(c).replace("|", "/"), a + str(w))
            for c, w, a in zip(row, widths, align)) + " |"
        print(line(header))
        print("|" + "|".join(("-" * (w + 1) + ":") if a == ">" else ("-" * (w + 2))
                             for w, a in zip(widths, align)) + "|")
    else:
        line = lambda row: "  ".join(format(str(c), a + str(w))
                                     for c, w, a in zip(row, widths, align))
        print(line(header))
        print("  ".join("-" * w for w in widths))
    for row in rows:
        print(line(row))


def shape_str(p):
    return "(%d, %d, %d, %d)" % p


def get(mha, op, proj, scalar, p, field="ms"):
    r = mha.get((op, proj, scalar, p))
    return None if r is None else r[field]


def report(path, torch_path=None, png=None):
    context, mha, gemm, peak = load_results(path)
    if not mha:
        print("report: no MultiheadAttention results in %s" % path)
        return 1
    threads = threads_of(context)
    scalars = [s for s in ("float", "double") if any(k[2] == s for k in mha)]

    print()
    print("headwise benchmarks: %s" % path)
    print("  build_type=%s, threads=%d, set=%s, Eigen %s (%s), %s" % (
        context.get("build_type", "?"), threads, context.get("headwise_set", "?"),
        context.get("eigen_version", "?"), context.get("eigen_simd", "?"),
        "OpenMP " + context.get("headwise_openmp", "?")))
    print("  medians of %s repetitions, %s; host load average at start %s" % (
        _repetitions(path),
        "wall-clock time" if context.get("headwise_timing") == "wall"
        else "CPU time (1 thread)",
        ", ".join("%.2f" % x for x in context.get("load_avg", []))))
    print("  fwd = forward in eval mode (inference path); f+b = training forward + backward")
    print("  GFLOP/s counts 8 B L E^2 + 4 B L^2 E per forward, twice that per backward")
    print("  % GEMM = of the bare Eigen GEMM [B L, E] x [E, 3E] (the fused projection) at the")
    print("  same shape; %% peak = of the measured FMA peak of %d core(s); vs fused = time / fused"
          % threads)
    print("  time at the same shape (on a per_head row: per_head/fused; above 1 = slower)")

    for scalar in scalars:
        pk = peak.get(scalar)
        peak_flops = pk["flops"] * threads if pk else None
        print()
        line = "%s: FMA peak %s GFLOP/s per core" % (
            scalar, fmt(pk["flops"] / 1e9, ".1f") if pk else "-")
        if pk and pk.get("label"):
            line += " (%s)" % pk["label"]
        print(line)
        header = ["shape (B, L, E, H)", "projection", "fwd ms", "f+b ms", "fwd GFLOP/s",
                  "f+b GFLOP/s", "% GEMM fwd|f+b", "% peak fwd|f+b", "vs fused fwd|f+b"]
        rows = []
        for p in ordered_main(mha, scalar):
            g = gemm.get((scalar, p[:3]))
            for proj in PROJECTIONS:
                fwd = mha.get(("forward_eval", proj, scalar, p))
                fb = mha.get(("forward_backward", proj, scalar, p))
                if fwd is None and fb is None:
                    continue
                pct = lambda r, ref: fmt(100 * r["flops"] / ref, ".0f") if r and ref else "-"
                rows.append([
                    shape_str(p), proj,
                    fmt(fwd and fwd["ms"], ".2f"), fmt(fb and fb["ms"], ".2f"),
                    fmt(fwd and fwd["flops"] / 1e9, ".1f"), fmt(fb and fb["flops"] / 1e9, ".1f"),
                    "%s | %s" % (pct(fwd, g and g["flops"]), pct(fb, g and g["flops"])),
                    "%s | %s" % (pct(fwd, peak_flops), pct(fb, peak_flops)),
                    "%s | %s" % (
                        fmt(ratio(get(mha, "forward_eval", proj, scalar, p),
                                  get(mha, "forward_eval", "fused", scalar, p)), ".2f"),
                        fmt(ratio(get(mha, "forward_backward", proj, scalar, p),
                                  get(mha, "forward_backward", "fused", scalar, p)), ".2f")),
                ])
        if rows:
            print_table(header, rows, ["<", "<"] + [">"] * 7)

        gemm_rows = []
        for p in ordered_main(mha, scalar):
            g = gemm.get((scalar, p[:3]))
            if not g:
                continue
            sep = gemm.get(("separate", scalar, p[:3]))
            ph = gemm.get(("per_head", scalar, p))
            gemm_rows.append([
                shape_str(p), fmt(g["ms"], ".2f"), fmt(g["flops"] / 1e9, ".1f"),
                fmt(100 * g["flops"] / peak_flops if peak_flops else None, ".0f"),
                fmt(sep and sep["ms"], ".2f"), fmt(ph and ph["ms"], ".2f"),
                fmt(ratio(sep and sep["ms"], g["ms"]), ".2f"),
                fmt(ratio(ph and ph["ms"], g["ms"]), ".2f")])
        if gemm_rows:
            print()
            print("%s: the in-projection alone, bare Eigen GEMMs (no bias, no attention): fused "
                  "[B L, E] x [E, 3E] (the roofline), separate 3 x [E, E], per_head 3H x [E, D]"
                  % scalar)
            print_table(["shape (B, L, E, H)", "fused ms", "GFLOP/s", "% peak", "separate ms",
                         "per_head ms", "separate/fused", "per_head/fused"], gemm_rows)

        # Other operations of the full set.
        extra_ops = [op for op in ("forward_train", "backward")
                     if any(k[0] == op and k[2] == scalar for k in mha)]
        if extra_ops:
            print()
            print("%s: every operation, ms (forward_train saves for backward; backward alone)"
                  % scalar)
            ops = ["forward_eval", "forward_train", "backward", "forward_backward"]
            rows = []
            for p in ordered_main(mha, scalar):
                for proj in PROJECTIONS:
                    vals = [get(mha, op, proj, scalar, p) for op in ops]
                    if any(v is not None for v in vals):
                        rows.append([shape_str(p), proj] + [fmt(v, ".2f") for v in vals])
            print_table(["shape (B, L, E, H)", "projection"] + ops, rows, ["<", "<"] + [">"] * 4)

        sweep = sweep_problems(mha, scalar)
        if sweep:
            print()
            print("%s: head sweep at (B, L, E) = (%d, %d, %d), D = E / H"
                  % ((scalar,) + sweep[0][:3]))
            ops = [op for op in ("forward_eval", "forward_backward")
                   if all(get(mha, op, "fused", scalar, p) is not None for p in sweep)]
            header = ["H", "D"]
            for op in ops:
                short = "fwd" if op == "forward_eval" else "f+b"
                header += ["%s ms fused" % short, "per_head/fused", "separate/fused"]
            g = gemm.get((scalar, sweep[0][:3]))
            if g:
                header += ["GEMMs alone per_head/fused"]
            rows = []
            for p in sweep:
                row = [str(p[3]), str(p[2] // p[3])]
                for op in ops:
                    t = {pr: get(mha, op, pr, scalar, p) for pr in PROJECTIONS}
                    row += [fmt(t["fused"], ".2f"), fmt(ratio(t["per_head"], t["fused"]), ".2f"),
                            fmt(ratio(t["separate"], t["fused"]), ".2f")]
                if g:
                    ph = gemm.get(("per_head", scalar, p))
                    row += [fmt(ratio(ph and ph["ms"], g["ms"]), ".2f")]
                rows.append(row)
            print_table(header, rows, [">"] * len(header))

        summary = []
        for p in ordered_main(mha, scalar):
            for op, short in (("forward_eval", "fwd"), ("forward_backward", "f+b")):
                f = get(mha, op, "fused", scalar, p)
                ph, sp = get(mha, op, "per_head", scalar, p), get(mha, op, "separate", scalar, p)
                if f:
                    summary.append("  %-22s %s  per_head/fused %s  separate/fused %s" % (
                        shape_str(p), short, fmt(ratio(ph, f), ".2f"), fmt(ratio(sp, f), ".2f")))
        if summary:
            print()
            print("%s: ratios to fused (time; above 1 = slower than fused)" % scalar)
            print("\n".join(summary))

    torch = None
    if torch_path and os.path.exists(torch_path):
        with open(torch_path) as f:
            torch = json.load(f)
    if png:
        plot(png, context, mha, gemm, peak, threads, torch)
    return 0


def _repetitions(path):
    with open(path) as f:
        rows = json.load(f).get("benchmarks", [])
    reps = {r.get("repetitions") for r in rows if r.get("repetitions")}
    return "/".join(str(r) for r in sorted(reps)) or "1"


# ---- plotting -----------------------------------------------------------------------------------

def plot(png, context, mha, gemm, peak, threads, torch):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        print()
        print("report: matplotlib is not available (python3-matplotlib), so no plot; "
              "the table above is complete")
        return
    scalar = "float" if any(k[2] == "float" for k in mha) else "double"
    main = ordered_main(mha, scalar)
    sweep = sweep_problems(mha, scalar)
    pk = peak.get(scalar)
    peak_gflops = pk["flops"] * threads / 1e9 if pk else None
    torch_ms = {}
    if torch:
        for r in torch.get("results", []):
            torch_ms[(r["mode"], tuple(r["shape"]))] = r["ms"]

    colors = {"fused": "#1b6ca8", "separate": "#7fb3d5", "per_head": "#e07b39", "torch": "#777777"}
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6), gridspec_kw={"width_ratios": [1.1, 1.1, 1]})
    panels = (("forward_eval", "inference", "forward, eval mode"),
              ("forward_backward", "training", "forward + backward, training"))
    for ax, (op, torch_mode, title) in zip(axes[:2], panels):
        series = list(PROJECTIONS) + (["torch"] if torch_ms else [])
        width = 0.8 / len(series)
        shapes = [p for p in main if get(mha, op, "fused", scalar, p) is not None]
        for i, name in enumerate(series):
            xs, ys = [], []
            for j, p in enumerate(shapes):
                if name == "torch":
                    ms = torch_ms.get((torch_mode, p))
                    flops = (3.0 if op == "forward_backward" else 1.0) * _forward_flop(p)
                    value = flops / (ms * 1e-3) / 1e9 if ms else None
                else:
                    r = mha.get((op, name, scalar, p))
                    value = r["flops"] / 1e9 if r else None
                if value is not None:
                    xs.append(j - 0.4 + width * (i + 0.5))
                    ys.append(value)
            ax.bar(xs, ys, width, color=colors[name],
                   label=name if name != "torch" else "torch %s" % torch.get("context", {}).get(
                       "torch_version", "").split("a")[0])
        for j, p in enumerate(shapes):
            g = gemm.get((scalar, p[:3]))
            if g:
                ax.hlines(g["flops"] / 1e9, j - 0.45, j + 0.45, colors="black", linewidth=2,
                          label="Eigen GEMM, fused projection shape" if j == 0 else None)
        if peak_gflops:
            ax.axhline(peak_gflops, color="#b03030", linestyle="--", linewidth=1,
                       label="FMA peak, %d core%s" % (threads, "s" if threads > 1 else ""))
            ax.set_ylim(0, peak_gflops * 1.12)
        ax.set_xticks(range(len(shapes)))
        ax.set_xticklabels(["B=%d L=%d\nE=%d H=%d" % p for p in shapes], fontsize=8)
        ax.set_ylabel("GFLOP/s (%s)" % scalar)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=7, loc="upper left", ncol=2)

    ax = axes[2]
    if sweep:
        heads = [p[3] for p in sweep]
        for name in PROJECTIONS:
            ms = [get(mha, "forward_eval", name, scalar, p) for p in sweep]
            ax.plot(heads, ms, marker="o", label=name + " fwd", color=colors[name])
            fb = [get(mha, "forward_backward", name, scalar, p) for p in sweep]
            if all(v is not None for v in fb):
                ax.plot(heads, fb, marker="s", linestyle=":", label=name + " f+b",
                        color=colors[name])
        g = gemm.get((scalar, sweep[0][:3]))
        ph = [gemm.get(("per_head", scalar, p)) for p in sweep]
        if g and all(ph):
            ax.plot(heads, [g["ms"]] * len(heads), linestyle="--", color=colors["fused"],
                    linewidth=1, label="fused projection GEMM alone")
            ax.plot(heads, [r["ms"] for r in ph], linestyle="--", color=colors["per_head"],
                    linewidth=1, label="3H per-head GEMMs alone")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(heads)
        ax.set_xticklabels([str(h) for h in heads])
        ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1, 2, 5)))
        ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        lo, hi = ax.get_ylim()
        ax.set_ylim(lo, hi * 2.2)  # room for the legend above the curves
        ax.set_xlabel("heads H (D = %d / H)" % sweep[0][2])
        ax.set_ylabel("ms (%s)" % scalar)
        ax.set_title("head sweep, B=%d L=%d E=%d" % sweep[0][:3], fontsize=10)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=6.5, loc="upper left", ncol=2)
    else:
        ax.set_visible(False)

    fig.suptitle("headwise MultiheadAttention, %s, %d thread%s, self-attention; medians of %s "
                 "time (build_type=%s)" % (
                     scalar, threads, "s" if threads > 1 else "",
                     "wall" if context.get("headwise_timing") == "wall" else "CPU",
                     context.get("build_type", "?")), fontsize=11)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(png)), exist_ok=True)
    fig.savefig(png, dpi=80)
    plt.close(fig)
    print()
    print("report: plot written to %s" % png)


def _forward_flop(p):
    B, L, E, _ = p
    return 8.0 * B * L * E * E + 4.0 * B * L * L * E


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", help="JSON written by bench_mha --benchmark_out")
    parser.add_argument("--torch", help="JSON written by bench/compare_torch.py, for the plot")
    parser.add_argument("--png", help="where to write the plot (default: next to the JSON)")
    parser.add_argument("--markdown", action="store_true",
                        help="print the tables as GitHub Markdown (for the README)")
    args = parser.parse_args(argv)
    global MARKDOWN
    MARKDOWN = args.markdown
    png = args.png or os.path.join(os.path.dirname(os.path.abspath(args.json)), "bench.png")
    return report(args.json, args.torch, png)


if __name__ == "__main__":
    sys.exit(main())
