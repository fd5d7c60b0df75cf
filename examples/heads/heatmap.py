# SPDX-License-Identifier: MIT
"""Draws the CSV that `heads --csv FILE` writes as a heatmap PNG (layers down, heads across).

    python heatmap.py importance.csv heads.png

Needs matplotlib (scripts/peers.sh installs it in ~/.cache/headwise/peers).
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(source, target):
    rows = list(csv.DictReader(open(source, newline="")))
    layers = 1 + max(int(r["layer"]) for r in rows)
    heads = 1 + max(int(r["head"]) for r in rows)
    grid = [[0.0] * heads for _ in range(layers)]
    for r in rows:
        grid[int(r["layer"])][int(r["head"])] = float(r["importance"])
    top = max(max(row) for row in grid) or 1.0
    grid = [[v / top for v in row] for row in grid]  # relative to the largest, as heads prints
    fig, ax = plt.subplots(figsize=(1 + 0.6 * heads, 1 + 0.5 * layers))
    image = ax.imshow(grid, cmap="viridis", aspect="auto")
    ax.set_xticks(range(heads))
    ax.set_yticks(range(layers))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(f"head importance I_h / {top:.3g} (Michel et al. 2019)")
    for i in range(layers):
        for j in range(heads):
            ax.text(j, i, f"{grid[i][j]:.2f}", ha="center", va="center", fontsize=7,
                    color="black" if grid[i][j] > 0.6 else "white")
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    fig.savefig(target, dpi=100)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: heatmap.py IMPORTANCE_CSV OUT_PNG")
    main(sys.argv[1], sys.argv[2])
