# SPDX-License-Identifier: MIT
"""The machine, its load and the versions beside every figure; results written as JSON."""

import json
import os
import platform
import subprocess
import time

RESULTS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "results")


def load_average():
    """The 1, 5 and 15 minute load averages, as uptime prints them."""
    return [round(x, 2) for x in os.getloadavg()]


def _cpu_model():
    """The CPU's model name from /proc/cpuinfo."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git_revision():
    """The repository's HEAD commit, or None outside a git work tree."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        rev = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return rev


def package_versions(names):
    """{name: version} of the installed Python packages among names."""
    import importlib.metadata as md

    found = {}
    for n in names:
        try:
            found[n] = md.version(n)
        except md.PackageNotFoundError:
            pass
    return found


def environment(packages=()):
    """What a result needs beside it: date, machine, CPUs, load, Python, packages, revision."""
    return {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "cpu": _cpu_model(), "cpus": os.cpu_count(), "load_before": load_average(),
            "python": platform.python_version(), "packages": package_versions(packages),
            "revision": _git_revision()}


def results_path(suite, directory=RESULTS_DIR):
    """bench/results/<date>-<suite>.json: one file per suite and day."""
    return os.path.join(directory, "%s-%s.json" % (time.strftime("%Y-%m-%d"), suite))


def write_results(path, record):
    """Writes the record (environment, load after, rows) as indented JSON; returns the path."""
    record.setdefault("environment", {})["load_after"] = load_average()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    return path
