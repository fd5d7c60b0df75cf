# SPDX-License-Identifier: MIT
"""Times the embed program with and without --prune-heads: the median wall time of several runs
on the same texts, and each pruned run's speedup over the unpruned one.

    python3 time_embed.py EMBED MODEL_DIR TEXTS_FILE RUNS [LIST ...]

TEXTS_FILE holds one text a line (standard input of embed); each LIST is a --prune-heads value.
Runs alternate between the settings so that a change in the machine's load hits all of them.
"""
import statistics
import subprocess
import sys
import time


def main(embed, model, texts, runs, lists):
    settings = [None] + lists
    times = {i: [] for i in range(len(settings))}
    for _ in range(runs):
        for i, value in enumerate(settings):
            command = [embed, model, "--batch", "32"]
            if value is not None:
                command += ["--prune-heads", value]
            with open(texts, "rb") as stdin:
                start = time.perf_counter()
                subprocess.run(command, stdin=stdin, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, check=True)
                times[i].append(time.perf_counter() - start)
    base = statistics.median(times[0])
    for i, value in enumerate(settings):
        median = statistics.median(times[i])
        heads = 0 if value is None else sum(len(g.split(":")[1].split(",")) for g in value.split(";"))
        print(f"{heads:3d} heads pruned  median {median:.3f} s of {runs}  speedup {base / median:.3f}")


if __name__ == "__main__":
    if len(sys.argv) < 5:
        sys.exit("usage: time_embed.py EMBED MODEL_DIR TEXTS_FILE RUNS [LIST ...]")
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5:])
