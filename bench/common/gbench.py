# SPDX-License-Identifier: MIT
"""Google Benchmark programs (bench_mha, bench_long, ...) run once, their repetitions read back
as rows of the results."""

import json
import os
import subprocess

from engines import program_facts, thread_env  # bench/engines.py (imports only common's core)

from .record import environment

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
        for key in ("extra_MiB", "blocked", "FLOP/s"):
            if key in b:
                r.setdefault(key, []).append(b[key])
    return runs


def rows_of(gb, pattern, engine, threads=1, shape=None):
    """The results' rows of the program's cases the pattern matches: the pattern's groups, the
    repetitions' times and counters, the case, engine and threads; shape (a list of group
    names) gathers those of them that matched into the row's "shape" as integers."""
    rows = []
    for name, r in repetitions(gb, pattern).items():
        fields = r.pop("fields")
        if shape:
            fields["shape"] = [int(v) for v in (fields.pop(k) for k in shape) if v is not None]
        rows.append(dict(r, case=name, engine=engine, threads=threads, **fields))
    return rows


def standard_flags(rounds, min_time, extra=()):
    """Repetitions interleaved at random across cases, each at least min_time seconds."""
    return ["--benchmark_repetitions=%d" % rounds, "--benchmark_min_time=%s" % min_time,
            "--benchmark_enable_random_interleaving=true"] + list(extra)


def add_arguments(ap, build, min_time):
    """The options of a suite that runs one Google Benchmark program of a build."""
    ap.add_argument("--build", default=build, help="a release build of headwise")
    ap.add_argument("--min-time", default=min_time, help="seconds per repetition of a case")
    ap.add_argument("--filter", default=".", help="Google Benchmark's --benchmark_filter")


def one_run(suite, args, program, pattern, shape, extra=()):
    """A suite's record of one run of <build>/bench/<program> on one thread: the rows of the
    cases the pattern matches (rows_of), medians of args.rounds interleaved repetitions."""
    path = os.path.join(args.build, "bench", program)
    record = {"suite": suite, "environment": environment(), "cases": {}, "rows": []}
    print("load before:", record["environment"]["load_before"], flush=True)
    flags = standard_flags(args.rounds, args.min_time, ["--benchmark_filter=" + args.filter])
    gb = run_program(path, flags + list(extra), thread_env(1))
    record["workers"] = {"headwise/1": program_facts(path, gb)}
    record["rows"] = rows_of(gb, pattern, "headwise", shape=shape)
    return record
