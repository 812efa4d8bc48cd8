#!/usr/bin/env python3
"""Renders the benchmark tables of bench/RESULTS.md as PNG bar charts in bench/plots/.

Every Markdown table whose cells hold timings ("0.100 s") or rates ("353k queries/s") becomes
one chart: one group of bars per row (its leading text columns name it), one bar per measured column
(ratio, target and other columns are left out), on a log scale so that tools an order of
magnitude apart stay readable. A cell of several runs ("0.833, 0.827 s") or a range
("0.128–0.134 s") is drawn at its median, labelled as written. The chart title is the section
heading above the table.

Usage: python3 bench/plot_results.py [RESULTS.md] [OUT_DIR]   (needs matplotlib)
"""

import re
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).resolve().parent
NUMBER = r"[0-9][0-9.,]*"
# One number, or several runs ("0.833, 0.827 s") or a range ("0.128–0.134 s"), then one unit.
VALUE = re.compile(rf"^\**({NUMBER}(?:(?:, |–){NUMBER})*)\s*([kM]?)\s*(s|queries/s)\**$")
SCALE = {"": 1.0, "k": 1e3, "M": 1e6}


def cell_value(text):
    """(number, unit, text) of a timing or rate cell, else None; several values give their median."""
    m = VALUE.match(text.strip())
    if not m:
        return None
    values = sorted(float(v.replace(",", "")) for v in re.split(r", |–", m.group(1)))
    mid = len(values) // 2
    median = values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
    return median * SCALE[m.group(2)], m.group(3), text.strip().strip("*")


def tables(markdown):
    """(heading, header cells, rows of cells) for each table, in order."""
    heading, header, rows, out = "", None, [], []
    for line in markdown.splitlines() + [""]:
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if header is None:
                header = cells
            elif not set("".join(cells)) <= set("-: "):
                rows.append(cells)
            continue
        if header is not None:
            out.append((heading, header, rows))
        header, rows = None, []
    return out


def slug(text):
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60]


def plot(heading, header, rows, path):
    columns, first = [], None
    for j, name in enumerate(header[1:], start=1):
        if any(w in name.lower() for w in ("ratio", "target", "speedup")):
            continue
        values = [cell_value(r[j]) if j < len(r) else None for r in rows]
        if sum(v is not None for v in values) >= 1:
            columns.append((name, values))
            first = j if first is None else first
    if not columns:
        return False
    units = {v[1] for _, vals in columns for v in vals if v}
    if len(units) != 1:
        return False
    unit = units.pop()
    # The row's name: its text cells before the first measured column ("radius 1 · SSS").
    named = [h for h in header[:first]]
    labels = [
        " · ".join(
            (f"{h} {c}" if c.replace(".", "").isdigit() else c).replace("**", "").replace("`", "")
            for h, c in zip(named, r[:first])
        )
        for r in rows
    ]
    fig, ax = plt.subplots(figsize=(9, 0.6 + 0.55 * len(rows) * max(1, len(columns) / 2)))
    height = 0.8 / len(columns)
    for c, (name, values) in enumerate(columns):
        ys = [i + c * height for i in range(len(rows))]
        xs = [v[0] if v else 0 for v in values]
        bars = ax.barh(ys, xs, height=height, label=name)
        for bar, v in zip(bars, values):
            if v:
                ax.annotate(v[2], (bar.get_width(), bar.get_y() + height / 2),
                            xytext=(3, 0), textcoords="offset points", va="center", fontsize=7)
    ax.set_yticks([i + height * (len(columns) - 1) / 2 for i in range(len(rows))])
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    better = "lower is better" if unit == "s" else "higher is better"
    ax.set_xlabel(f"{'seconds' if unit == 's' else 'queries per second'} (log scale, {better})")
    ax.set_title(heading, fontsize=10)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main():
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "RESULTS.md"
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else HERE / "plots"
    out.mkdir(parents=True, exist_ok=True)
    seen = {}
    for heading, header, rows in tables(src.read_text()):
        name = slug(heading) or "table"
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            name = f"{name}-{seen[name]}"
        path = out / f"{name}.png"
        if plot(heading, header, rows, path):
            print(path)


if __name__ == "__main__":
    main()
