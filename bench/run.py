#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""headwise's one benchmark driver: a suite of cases, timed on every engine side by side.

    python3 bench/run.py mha --build build/bench/peers          fused vs per_head vs separate
    $HEADWISE_PEERS_PYTHON bench/run.py <suite> [--engines ...] [--threads 1 2] [--rounds N]
        [--json PATH | --no-json] [--pools sleep|spin]
    $HEADWISE_PEERS_PYTHON bench/plot.py bench/results/<date>-<suite>.json ...
    python3 bench/report.py bench/results/<date>-<suite>.json ...   the tables and targets again

Suites (bench/suites/<suite>.py; `run.py <suite> --help` lists each one's options):
  mha        bench_mha's Google Benchmark cases: MultiheadAttention per projection (fused,
             per_head, separate), forward_eval and forward_backward, medians of repetitions
  long       bench_long's Google Benchmark cases: the blocked and materialised attention kernels
             inside the layer at long sequences, time and extra peak memory
  decode     bench_decode's Google Benchmark cases: one token's step onto a KV cache (full,
             grouped-query, multi-query heads) against recomputing the prefix
  attention  MultiheadAttention against torch.nn.MultiheadAttention, a layer on torch's SDPA
             and ONNX Runtime on the same weights: default shapes, long sequences, decode steps
  minilm     all-MiniLM-L6-v2 sentence embeddings against sentence-transformers (torch),
             ONNX Runtime and CTranslate2
  llama      a Llama-style model (SmolLM2's Q4_1 GGUF by default) against llama.cpp and
             transformers: decode (tg128) and prompt processing (pp512)

Method (every worker suite): each engine runs in worker processes of its own, one per thread
count, so that a process's memory is that engine's alone. Every round asks every worker in
turn, the order rotated each round, for the median time of a few calls of every case; a
result is the median over the rounds, and per-round ratios compare figures taken side by side.
The results, with the machine's load before and after, go to bench/results/<date>-<suite>.json.
Then the suite's tables and the speed targets it has figures for (bench/targets.json), each
MET or MISSED with its ratio (bench/report.py).
"""

import argparse
import importlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
import report  # noqa: E402

SUITES = ("mha", "long", "decode", "attention", "minilm", "llama")


def suite_module(name):
    """bench/suites/<name>.py."""
    if name not in SUITES:
        raise SystemExit("unknown suite %r (one of %s)" % (name, ", ".join(SUITES)))
    return importlib.import_module("suites." + name)


def parse(argv):
    """The suite and its options."""
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        raise SystemExit(0)
    suite = suite_module(argv[0])
    ap = argparse.ArgumentParser(prog="run.py " + argv[0], description=suite.__doc__)
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--target-seconds", type=float, default=0.15,
                    help="timed calls per worker, case and round: about this long")
    ap.add_argument("--pools", choices=["sleep", "spin"], default="sleep",
                    help="sleep: idle thread pools sleep between calls; spin: engines' defaults")
    ap.add_argument("--json", help="where the results go (default bench/results/<date>-<suite>"
                    ".json)")
    ap.add_argument("--no-json", action="store_true", help="print only")
    suite.add_arguments(ap)
    args = ap.parse_args(argv[1:])
    args.suite = argv[0]
    return suite, args


def start_workers(engines, args):
    """One worker per engine and thread count, and what each says about itself."""
    workers, described = [], {}
    for threads in args.threads:
        for engine in engines:
            w = engine.start(threads, args.pools)
            workers.append(w)
            described[w.key] = dict(engine.describe(), **w.info())
    return workers, described


def for_worker(words, worker):
    """The words of a setup, "{worker}" replaced by <engine>-<threads> (per-worker outputs)."""
    return [str(x).replace("{worker}", "%s-%d" % (worker.engine, worker.threads))
            for x in words]


def setup_phase(suite, phase, workers, args, record):
    """Builds every case of the phase on its engines' workers: [(cid, worker, calls)]."""
    active = []
    for case in phase["cases"]:
        words = case.get("prepare", lambda: case["words"])()
        mine = [w for w in workers if w.engine in case["engines"]]
        firsts = {w.key: w.setup(case["id"], for_worker(words, w)) for w in mine}
        calls = case.get("calls") or common.calls_for(min(firsts.values()), args.target_seconds)
        record["cases"][case["id"]] = dict(case.get("meta", {}), calls=calls, first_s=firsts)
        if hasattr(suite, "check"):
            record["cases"][case["id"]]["check"] = suite.check(case, mine, args)
        active += [(case["id"], w, calls) for w in mine]
    return active


def time_phase(active, rounds, record):
    """rounds of every (case, worker), the order rotated: rows of per-round medians."""
    rows = {}
    for r in range(rounds):
        for cid, w, calls in common.rotated(active, r):
            wall, cpu = w.run(cid, calls)
            row = rows.setdefault((cid, w.key), {"case": cid, "engine": w.engine,
                                                 "threads": w.threads, "wall_s": [],
                                                 "cpu_s": []})
            row["wall_s"].append(wall)
            row["cpu_s"].append(cpu)
    record["rows"] += list(rows.values())
    return rows


def interleaved(suite, args):
    """The method of the module docstring, phase by phase; the results record."""
    engines = suite.engines(args)
    record = {"suite": args.suite, "environment": common.environment(suite.PACKAGES),
              "options": {k: v for k, v in vars(args).items() if k != "json"},
              "cases": {}, "rows": [], "peak_kB": {}, "mem_kB": {}}
    print("load before:", record["environment"]["load_before"], flush=True)
    workers, record["workers"] = start_workers(engines, args)
    try:
        for phase in suite.phases(args):
            print("== %s (%d rounds)" % (phase["name"], phase["rounds"]), flush=True)
            active = setup_phase(suite, phase, workers, args, record)
            rows = time_phase(active, phase["rounds"], record)
            for cid, w, _ in active:
                if phase.get("peak"):
                    record["peak_kB"]["%s %s" % (cid, w.key)] = w.peak(cid)
                w.free(cid)
            print("   %d rows; load %s" % (len(rows), common.load_average()), flush=True)
        for w in workers:
            record["mem_kB"][w.key] = w.mem()
    finally:
        for w in workers:
            w.close()
    return record


def main(argv=None):
    """A suite run (or, as `run.py worker ...`, a Python engine's worker)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "worker":  # worker <suite> <engine> <threads> <suite args...>
        suite = suite_module(argv[1])
        return suite.serve_worker(argv[2], int(argv[3]), argv[4:])
    suite, args = parse(argv)
    record = suite.run(args) if hasattr(suite, "run") else interleaved(suite, args)
    if not args.no_json:
        print("results:", common.write_results(args.json or common.results_path(args.suite),
                                               record))
    report.report(record, suite)
    print("load after:", record["environment"]["load_after"] if "load_after" in
          record["environment"] else common.load_average())
    return 0


if __name__ == "__main__":
    sys.exit(main())
