# SPDX-License-Identifier: MIT
"""Google Benchmark programs (bench_mha, bench_long, ...) run once, their repetitions read back
as rows of the results."""

import json
import os
import subprocess

SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def run_program(program, flags, env=None):
    """Runs the program with --benchmark_format=json and the flags: its parsed JSON."""
    if not os.path.exists(program):
        raise SystemExit("no %s (build it first: cmake --build <build> --target %s)"
                         % (program, os.path.basename(program)))
    out = subprocess.run([program, "--benchmark_format=json"] + list(flags), env=env,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def repetitions(gb, pattern):
    """{run_name: {"fields": the pattern's groups, "cpu_s": [...], "real_s": [...], counters:
    [...]}} of the iteration rows whose run_name the compiled regex matches."""
    runs = {}
    for b in gb["benchmarks"]:
        m = pattern.match(b["run_name"])
        if not m or b.get("run_type") != "iteration":
            continue
        scale = SECONDS[b["time_unit"]]
        r = runs.setdefault(b["run_name"], {"fields": m.groupdict(), "cpu_s": [], "real_s": []})
        r["cpu_s"].append(b["cpu_time"] * scale)
        r["real_s"].append(b["real_time"] * scale)
        for key in ("extra_MiB", "blocked"):
            if key in b:
                r.setdefault(key, []).append(b[key])
    return runs


def standard_flags(rounds, min_time, extra=()):
    """Repetitions interleaved at random across cases, each at least min_time seconds."""
    return ["--benchmark_repetitions=%d" % rounds, "--benchmark_min_time=%s" % min_time,
            "--benchmark_enable_random_interleaving=true"] + list(extra)
