#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Reads the JSON written by bench_mha and prints the benchmark table, then draws it as a PNG.

    python3 bench/report.py build/bench/cblas-native/bench.json
                            [--torch build/bench/torch-1.json build/bench/torch-2.json]
                            [--runs <bench.json of each build and thread count> ...]
                            [--png build/bench/bench.png]

Uses the median of each case's repetitions (the JSON of a run without repetitions works too).
Every row of the layer is put against two limits measured in the same run: the bare Eigen GEMM of
the fused projection shape (what the layer can reach) and the FMA peak of one core (what the
machine can reach). Ratios (per_head / fused, separate / fused) are of medians (CPU time for a
single-threaded run, wall time otherwise, as bench_mha chose); above 1 means slower than fused.
With --torch, the plot also shows torch.nn.MultiheadAttention from bench/compare_torch.py.
With --runs (what scripts/bench.sh passes: every build and thread count of one run), it also
prints one table with a backend column (Eigen or CBLAS, -march=native or not, 1 or 2 threads)
against torch at the same thread count, what -march=native, the BLAS backend and a second thread
are worth, and the performance targets with the figure each one got.
Without matplotlib the tables are still printed and the plot is skipped.
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
            "wall_ms": r.get("real_time", float("nan")) * TIME_TO_MS[r.get("time_unit", "ns")],
            "flops": r.get("FLOP/s", float("nan")),
            "label": r.get("label", ""),
        }
        if parts[:1] == ["mha_threads"] and len(parts) == 4:
            # The layer on T threads (wall time): kept as mha_threads[(operation, problem, T)].
            _, operation, projection, scalar = parts
            problem = (args["B"], args["L"], args["E"], args["H"])
            mha.setdefault("threads", {})[(operation, scalar, problem, args["T"])] = record
        elif parts[:1] == ["mha"] and len(parts) == 4:
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
    threads = mha.pop("threads", {})
    if threads:
        # A run on several thread counts: its layer rows are the largest count's, and each row
        # keeps the 1-thread wall time of the same program for the speed-up.
        top = max(t for (_, _, _, t) in threads)
        for (operation, scalar, problem, t), record in threads.items():
            if t == top:
                one = threads.get((operation, scalar, problem, 1))
                record = dict(record, one_thread_wall_ms=one and one["wall_ms"])
                mha[(operation, "fused", scalar, problem)] = record
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


MARKDOWN = False  # set by --markdown: tables as GitHub Markdown, for the documentation pages


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


def backend_str(context):
    """'cblas (OpenBLAS ..., kernels Cooperlake, 1 thread)' or 'eigen'."""
    backend = context.get("gemm_backend", "eigen")
    if backend == "cblas":
        details = [context.get("blas", "?")]
        if context.get("blas_core"):
            details.append("kernels " + context["blas_core"])
        if context.get("blas_threads"):
            details.append("%s BLAS thread(s)" % context["blas_threads"])
        backend += " (%s)" % ", ".join(details)
    return backend


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
    print("  GEMM backend: %s" % backend_str(context))
    print("  medians of %s repetitions, %s; host load average at start %s" % (
        _repetitions(path),
        "wall-clock time" if context.get("headwise_timing") == "wall"
        else "CPU time (1 thread)",
        ", ".join("%.2f" % x for x in context.get("load_avg", []))))
    print("  fwd = forward in eval mode (inference path); f+b = training forward + backward")
    print("  GFLOP/s counts 8 B L E^2 + 4 B L^2 E per forward, twice that per backward")
    print("  %% GEMM = of the bare %s GEMM [B L, E] x [E, 3E] (the fused projection) at the"
          % context.get("gemm_backend", "eigen"))
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
            print("%s: the in-projection alone, bare GEMMs (no bias, no attention): fused "
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


# ---- every build of one run: backends, -march, threads, torch, targets -------------------------

def torch_threads(path):
    try:
        with open(path) as f:
            return int(json.load(f).get("context", {}).get("threads", 1))
    except (OSError, ValueError):
        return None


def load_torch(paths):
    """{threads: {(mode, shape): ms}} from compare_torch.py's JSON files."""
    out = {}
    for path in paths:
        if not os.path.exists(path):
            continue
        with open(path) as f:
            data = json.load(f)
        threads = int(data.get("context", {}).get("threads", 1))
        for r in data.get("results", []):
            out.setdefault(threads, {})[(r["mode"], tuple(r["shape"]))] = r["ms"]
    return out


def run_label(context):
    """(backend, build, threading) of one bench_mha run, as the summary table shows them."""
    backend = context.get("gemm_backend", "eigen")
    if backend == "cblas" and context.get("blas_core"):
        backend += " (%s)" % context["blas_core"]
    native = "native" in context.get("build", "") or "AVX-512" in context.get("march", "")
    build = "-march=native" if native else "no -march"
    threads = threads_of(context)
    omp = int(context.get("headwise_openmp_threads", "1") or 1)
    if threads == 1:
        how = "1"
    elif omp > 1:
        how = "%d (OpenMP, BLAS 1/call)" % threads
    else:
        how = "%d (BLAS threads)" % threads
    return backend, build, how


def summary(run_paths, torch_paths):
    runs = []
    for path in run_paths:
        if os.path.exists(path):
            context, mha, gemm, peak = load_results(path)
            runs.append({"path": path, "context": context, "mha": mha, "gemm": gemm,
                         "peak": peak, "threads": threads_of(context),
                         "build": context.get("build", os.path.basename(os.path.dirname(path)))})
    if not runs:
        return
    torch = load_torch(torch_paths)
    scalar = "float"

    print()
    print("Backends and builds, fused projection, float, medians (time; x/torch below 1 = "
          "headwise faster than torch.nn.MultiheadAttention at the same thread count)")
    header = ["backend", "build", "threads", "shape (B, L, E, H)", "fwd ms", "f+b ms",
              "fwd/torch", "f+b/torch", "GEMM GFLOP/s"]
    rows = []
    for run in runs:
        backend, build, how = run_label(run["context"])
        t = torch.get(run["threads"], {})
        for p in MAIN_SHAPES:
            fwd = get(run["mha"], "forward_eval", "fused", scalar, p)
            fb = get(run["mha"], "forward_backward", "fused", scalar, p)
            if fwd is None and fb is None:
                continue
            g = run["gemm"].get((scalar, p[:3]))
            rows.append([backend, build, how, shape_str(p), fmt(fwd, ".2f"), fmt(fb, ".2f"),
                         fmt(ratio(fwd, t.get(("inference", p))), ".2f"),
                         fmt(ratio(fb, t.get(("training", p))), ".2f"),
                         fmt(g and g["flops"] / 1e9, ".1f")])
    print_table(header, rows, ["<", "<", "<", "<"] + [">"] * 5)
    for threads in sorted(torch):
        print("  torch, %d thread(s): %s" % (threads, ", ".join(
            "%s %s %.2f ms" % (shape_str(shape), mode[:5], ms)
            for (mode, shape), ms in sorted(torch[threads].items(), key=lambda kv: kv[0][1]))))
    # The same product in both processes gauges the machine's drift between them.
    primary = next((r for r in runs if r["threads"] == 1 and r["build"] == "cblas-native"), None)
    t1 = torch.get(1, {})
    drift = []
    for p in MAIN_SHAPES:
        g, tg = primary and primary["gemm"].get((scalar, p[:3])), t1.get(("gemm", p))
        if g and tg:
            drift.append("%s %.2f" % (shape_str(p), g["ms"] / tg))
    if drift:
        print("  drift: the bare fused-projection GEMM ([B L, E] x [E, 3E], the same OpenBLAS) in "
              "headwise's 1-thread run / in torch's: %s. Away from 1, the machine's speed moved "
              "between the two processes, and the x/torch ratios carry that." % ", ".join(drift))

    by_build = {}
    for run in runs:
        by_build.setdefault((run["build"], run["threads"], run_label(run["context"])[2]), run)

    def find(build, threads=1, how=None):
        for (b, t, h), run in by_build.items():
            if b == build and t == threads and (how is None or how in h):
                return run
        return None

    def ratios(slow, fast, op, field="ms"):
        """time(slow) / time(fast) per main shape, both runs having it."""
        out = []
        for p in MAIN_SHAPES:
            a = slow and get(slow["mha"], op, "fused", scalar, p, field)
            b = fast and get(fast["mha"], op, "fused", scalar, p, field)
            if a and b:
                out.append((p, a / b))
        return out

    def speedups(run, op):
        """1-thread wall time / T-thread wall time per main shape, within one program's run."""
        out = []
        for p in MAIN_SHAPES:
            r = run and run["mha"].get((op, "fused", scalar, p))
            if r and r.get("one_thread_wall_ms") and r.get("wall_ms"):
                out.append((p, r["one_thread_wall_ms"] / r["wall_ms"]))
        return out

    def ratio_line(pairs):
        return ", ".join("%s %.2f" % (shape_str(p), r) for p, r in pairs) or "-"

    print()
    print("What each choice is worth (time ratios of medians, same run, per main shape; the")
    print("speed-ups from a second thread: wall time on 1 thread / on 2, the same program, cases")
    print("interleaved):")
    for title, slow, fast in (
            ("no -march / -march=native, Eigen backend", "eigen-portable", "eigen-native"),
            ("no -march / -march=native, CBLAS backend", "cblas-portable", "cblas-native"),
            ("Eigen / CBLAS, both -march=native", "eigen-native", "cblas-native"),
            ("Eigen -march=native / CBLAS no -march", "eigen-native", "cblas-portable"),
            ("Eigen no -march / CBLAS no -march", "eigen-portable", "cblas-portable")):
        for op, short in (("forward_eval", "fwd"), ("forward_backward", "f+b")):
            pairs = ratios(find(slow), find(fast), op)
            if pairs:
                print("  %-42s %s: %s" % (title, short, ratio_line(pairs)))
    one = find("cblas-native")
    for how, label in (("OpenMP", "2 threads, OpenMP + BLAS 1/call"),
                       ("BLAS threads", "2 threads, the BLAS's own threads")):
        two = None
        for (b, t, h), run in by_build.items():
            if t == 2 and how in h:
                two = run
        for op, short in (("forward_eval", "fwd"), ("forward_backward", "f+b")):
            pairs = speedups(two, op)
            if pairs:
                print("  %-42s %s: %s" % ("speed-up 1 -> " + label, short, ratio_line(pairs)))

    # ---- the targets (CBLAS, -march=native, 1 thread, float) ----
    print()
    print("Targets (CBLAS backend, -march=native, 1 thread, float, fused unless said):")
    results = []

    def target(text, value, ok, detail=""):
        results.append(ok)
        print("  %-6s %-62s %s%s" % ("MET" if ok else ("MISSED" if ok is False else "n/a"), text,
                                      value, ("  (" + detail + ")") if detail else ""))

    t1 = torch.get(1, {})
    key = (8, 128, 512, 8)
    if one:
        m = one["mha"]
        fb, fwd = get(m, "forward_backward", "fused", scalar, key), get(
            m, "forward_eval", "fused", scalar, key)
        r = ratio(fb, t1.get(("training", key)))
        target("training (8,128,512,8) <= 0.87x torch", fmt(r, ".2f"), None if r is None else r <= 0.87)
        r = ratio(fwd, t1.get(("inference", key)))
        target("forward (8,128,512,8) <= 0.9x torch's fastest forward", fmt(r, ".2f"),
               None if r is None else r <= 0.9, "torch inference_mode, need_weights=False")
        worst = []
        for p in MAIN_SHAPES:
            for op, mode in (("forward_eval", "inference"), ("forward_backward", "training")):
                r = ratio(get(m, op, "fused", scalar, p), t1.get((mode, p)))
                if r is not None:
                    worst.append((r, p, mode))
        if worst:
            r, p, mode = max(worst)
            over = ["%s %s %.2f" % (shape_str(q), md[:5], x) for x, q, md in sorted(worst) if x > 1]
            target("every default shape <= 1.0x torch (worst shown)", "%.2f" % r, r <= 1.0,
                   "%s %s%s" % (shape_str(p), mode, "; above 1: " + ", ".join(over) if over else ""))
        g = [(p, get(m, "forward_eval", "fused", scalar, p, "flops"),
              get(m, "forward_backward", "fused", scalar, p, "flops"), one["gemm"].get((scalar, p[:3])))
             for p in MAIN_SHAPES if p[1] <= 512]
        g = [(p, f, b, gg["flops"]) for p, f, b, gg in g if f and gg]
        if g:
            worst_fwd, worst_p = min((f / gg, p) for p, f, _, gg in g)
            target("layer >= 90% of the bare fused-projection GEMM rate, L <= 512",
                   "%.1f%%" % (100 * worst_fwd), worst_fwd >= 0.9,
                   "forward, worst: %s; f+b: " % shape_str(worst_p) + ", ".join(
                       "%s %.1f%%" % (shape_str(p), 100 * b / gg) for p, _, b, gg in g if b))
        pk = one["peak"].get(scalar)
        f = get(m, "forward_eval", "fused", scalar, key, "flops")
        if pk and f:
            target(">= 80% of the FMA peak, (8,128,512,8) forward", "%.1f%%" % (100 * f / pk["flops"]),
                   f / pk["flops"] >= 0.8, "peak %.0f GFLOP/s, %s" % (pk["flops"] / 1e9, pk.get("label", "")))
        ph = []
        for (op, proj, sc, p) in m:
            if proj == "per_head" and sc == scalar and p[3] <= 16:
                r = ratio(get(m, op, "per_head", scalar, p), get(m, op, "fused", scalar, p))
                if r is not None:
                    ph.append((r, p, op))
        if ph:
            r, p, op = max(ph)
            target("per_head within 1.15x of fused at H <= 16 (worst shown)", "%.2f" % r, r <= 1.15,
                   "%s %s" % (shape_str(p), "fwd" if op == "forward_eval" else "f+b"))
        far = [(r, p, op) for (op, proj, sc, p) in m if proj == "per_head" and sc == scalar
               and p[3] > 16 for r in [ratio(get(m, op, "per_head", scalar, p),
                                              get(m, op, "fused", scalar, p))] if r]
        if far:
            print("         per_head/fused at H > 16: " + ", ".join(
                "H=%d %s %.2f" % (p[3], "fwd" if op == "forward_eval" else "f+b", r)
                for r, p, op in sorted(far, key=lambda x: (x[1][3], x[2]))))
    portable = find("cblas-portable")
    if one and portable:
        pairs = ratios(portable, one, "forward_eval") + ratios(portable, one, "forward_backward")
        if pairs:
            r = max(x for _, x in pairs)
            target("CBLAS no -march within 1.2x of -march=native (worst)", "%.2f" % r, r <= 1.2)
    best = None
    for (b, t, h), run in by_build.items():
        if t == 2 and one:
            pairs = dict(speedups(run, "forward_backward"))
            if key in pairs and (best is None or pairs[key] > best[0]):
                best = (pairs[key], h)
    if best:
        target("training (8,128,512,8): 2 threads >= 1.7x faster than 1", "%.2f" % best[0],
               best[0] >= 1.7, "best 2-thread way: " + best[1])
    print("  (%d of %d targets met in this run)" % (sum(1 for x in results if x),
                                                   sum(1 for x in results if x is not None)))


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
    parser.add_argument("--torch", nargs="+", default=[],
                        help="JSON written by bench/compare_torch.py (1 and 2 threads)")
    parser.add_argument("--runs", nargs="+", default=[],
                        help="bench_mha JSON of every build and thread count of the run")
    parser.add_argument("--png", help="where to write the plot (default: next to the JSON)")
    parser.add_argument("--markdown", action="store_true",
                        help="print the tables as GitHub Markdown (for the documentation pages)")
    args = parser.parse_args(argv)
    global MARKDOWN
    MARKDOWN = args.markdown
    png = args.png or os.path.join(os.path.dirname(os.path.abspath(args.json)), "bench.png")
    torch_1 = next((t for t in args.torch if torch_threads(t) == 1), None)
    status = report(args.json, torch_1, png)
    if args.runs:
        summary(args.runs, args.torch)
    return status


if __name__ == "__main__":
    sys.exit(main())
