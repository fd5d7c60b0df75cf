# SPDX-License-Identifier: MIT
"""What every suite of bench/run.py shares: the one worker protocol (bench/worker_process.hpp
speaks it in C++), timing and medians, rounds interleaving the workers, peak memory, the
machine's environment and load, and the JSON results."""

from .measure import calls_for, median, print_table, rotated, status_kb, time_calls
from .record import environment, load_average, results_path, write_results
from .worker import Case, Worker, serve

__all__ = ["Case", "Worker", "calls_for", "environment", "load_average", "median", "print_table",
           "results_path", "rotated", "serve", "status_kb", "time_calls", "write_results"]
