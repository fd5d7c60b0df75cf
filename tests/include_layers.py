#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# Checks every #include "..." under include/headwise against the folder table of docs/design.md
# ("The folders"): a header may include headers of its own row and of the rows its "May include"
# column lists, and a row may list only rows of its level or below. Prints each include that
# breaks the table as <file>:<line>: and exits 1; exits 0 when none does.
#
# Usage: include_layers.py <source dir>
import os
import re
import sys

TABLE_HEADING = "## The folders"
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
CODE = re.compile(r"`([^`]+)`")


def read_table(design_path):
    """Rows of the table under TABLE_HEADING: a list of (level, keys, allowed)."""
    with open(design_path, encoding="utf-8") as f:
        text = f.read()
    start = text.find(TABLE_HEADING)
    if start < 0:
        sys.exit(f"{design_path}: no '{TABLE_HEADING}' section")
    rows = []
    for line in text[start:].splitlines()[1:]:
        if line.startswith("## "):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].isdigit():
            continue  # prose, the header row or the |---| line
        keys = CODE.findall(cells[1])
        allowed = CODE.findall(cells[3])
        if not keys:
            sys.exit(f"{design_path}: a row of level {cells[0]} names no folder: {line[:80]}")
        rows.append((int(cells[0]), keys, allowed))
    if not rows:
        sys.exit(f"{design_path}: the '{TABLE_HEADING}' section has no table rows")
    return rows


def row_of(path, rows):
    """The key of the row a header (path relative to include/headwise) belongs to, or None: a row
    naming the file itself, else the row naming the longest folder holding it, else `*.hpp` for a
    file at the top."""
    best = None
    for _, keys, _ in rows:
        for key in keys:
            if key == path:
                return key
            if key.endswith("/") and path.startswith(key) and (best is None or len(key) > len(best)):
                best = key
    if best is None and "/" not in path:
        best = "*.hpp"
    return best


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: include_layers.py <source dir>")
    source = sys.argv[1]
    root = os.path.join(source, "include", "headwise")
    design = os.path.join(source, "docs", "design.md")
    rows = read_table(design)
    by_key = {key: (level, allowed) for level, keys, allowed in rows for key in keys}
    problems = []

    # The table itself: every listed row exists and sits at the row's level or below.
    for level, keys, allowed in rows:
        for name in allowed:
            if name == "*":
                continue
            if name not in by_key:
                problems.append(f"{design}: the row of {keys[0]} allows {name}, which no row names")
            elif by_key[name][0] > level:
                problems.append(f"{design}: the row of {keys[0]} (level {level}) allows {name} "
                                f"(level {by_key[name][0]}): an include pointing up")

    headers = 0
    for folder, _, files in os.walk(root):
        for name in sorted(files):
            if not name.endswith(".hpp"):
                continue
            headers += 1
            full = os.path.join(folder, name)
            path = os.path.relpath(full, root).replace(os.sep, "/")
            own = row_of(path, rows)
            if own is None:
                problems.append(f"include/headwise/{path}: its folder has no row in {design}")
                continue
            level, allowed = by_key[own]
            with open(full, encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    target_full = os.path.normpath(os.path.join(folder, m.group(1)))
                    target = os.path.relpath(target_full, root).replace(os.sep, "/")
                    where = f"include/headwise/{path}:{number}"
                    if target.startswith("../") or not os.path.isfile(target_full):
                        problems.append(f'{where}: #include "{m.group(1)}" names no header '
                                        "under include/headwise")
                        continue
                    theirs = row_of(target, rows)
                    if theirs is None:
                        problems.append(f"{where}: includes {target}, whose folder has no row "
                                        f"in {design}")
                    elif theirs != own and theirs not in allowed and "*" not in allowed:
                        problems.append(
                            f"{where}: includes {target} (row {theirs}), which the row of {own} "
                            f"does not allow (it allows: {', '.join(allowed) or 'nothing'})")
    for p in problems:
        print(p)
    print(f"include_layers: {headers} headers, {len(rows)} rows of {design}: "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
