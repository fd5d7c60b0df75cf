# SPDX-License-Identifier: MIT
"""Timing, medians, the order of a round, and the kernel's memory figures."""

import statistics
import time


def median(xs):
    """The median of xs, NaN for none."""
    return statistics.median(xs) if xs else float("nan")


def time_calls(call, calls):
    """Calls `call` `calls` times: (median wall seconds, median CPU seconds of this thread)."""
    wall, cpu = [], []
    for _ in range(calls):
        t0, c0 = time.perf_counter(), time.thread_time()
        call()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
    return median(wall), median(cpu)


def calls_for(first_seconds, target_seconds, most=200):
    """Timed calls per round that take about target_seconds, from the warm-up call's time."""
    return max(1, min(most, int(target_seconds / max(first_seconds, 1e-6))))


def rotated(items, r):
    """items with its start rotated by round r: every worker goes first in turn, so that no
    engine always runs right after the same neighbour."""
    k = r % len(items) if items else 0
    return items[k:] + items[:k]


def status_kb(field):
    """A field of /proc/self/status in kB: VmRSS (now) or VmHWM (peak); -1 where there is none.
    A worker's peak is VmHWM rather than ru_maxrss, which a process inherits from its parent."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


def print_table(header, rows):
    """A Markdown table: the header's cells, then one line per row."""
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")
