# SPDX-License-Identifier: MIT
"""The suites of bench/run.py, one module each: add_arguments(ap), engines(args),
phases(args) (or run(args) for a suite that is not interleaved workers), serve_worker(engine,
threads, argv) for its Python engines, report(record), PACKAGES (the versions it records)."""
