# SPDX-License-Identifier: MIT
"""Draws the CSV that `heads --csv FILE` or `llama_heads --csv FILE` writes as a heatmap PNG
(layers down, heads across; layers across when there are more than twice as many as heads).

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
    # Many layers of few heads (SmolLM2: 30 x 9) read better, and take fewer bytes, lying down:
    # layers across, heads down.
    across, down = "head", "layer"
    if layers > 2 * heads:
        grid = [list(column) for column in zip(*grid)]
        across, down = "layer", "head"
    rows, columns = len(grid), len(grid[0])
    wide = columns > 12  # narrower cells, smaller figures, a thinner colour bar
    fig, ax = plt.subplots(figsize=(1.5 + 0.42 * columns if wide else 1 + 0.6 * columns,
                                    1 + 0.5 * rows))
    image = ax.imshow(grid, cmap="viridis", aspect="auto")
    ax.set_xticks(range(columns))
    ax.set_yticks(range(rows))
    ax.set_xlabel(across)
    ax.set_ylabel(down)
    ax.set_title(f"head importance I_h / {top:.3g} (Michel et al. 2019)")
    for i in range(rows):
        for j in range(columns):
            ax.text(j, i, f"{grid[i][j]:.2f}", ha="center", va="center",
                    fontsize=6 if wide else 7,
                    color="black" if grid[i][j] > 0.6 else "white")
    fig.colorbar(image, ax=ax, fraction=0.03 if wide else 0.15)
    fig.tight_layout()
    fig.savefig(target, dpi=80 if wide else 100)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: heatmap.py IMPORTANCE_CSV OUT_PNG")
    main(sys.argv[1], sys.argv[2])
