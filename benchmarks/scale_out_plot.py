#!/usr/bin/env python
"""Draw scale_out.py's results (its JSON file) as a PNG of four panels against the busy
processes, direct and through PgBouncer: jobs/s, steady-load p99 latency, PostgreSQL's
CPU, and its connections. The runs of idle workers beside busy ones are marked apart.

Runs in benchmarks/.venv-peers, which has matplotlib (see peers.sh); scale_out.py calls it:

    benchmarks/.venv-peers/bin/python benchmarks/scale_out_plot.py \\
        benchmarks/scale_out.json benchmarks/scale_out.png
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt

from benchmarks._scale_report import Run, cores, rate, scale_runs

COLORS = {"direct": "tab:blue", "pooled": "tab:orange"}
NAMES = {"direct": "direct", "pooled": "PgBouncer (+ --listen-url)"}
MARKERS = {False: "s", True: "D"}  # idle ones polling / with --listen-url


def series(runs: list[Run], mode: str, value: Callable[[Run], float]) -> tuple[list, list]:
    """Process counts and the median of ``value`` over each count's scale runs."""
    xs = sorted({r["point"]["processes"] for r in runs if r["point"]["mode"] == mode})
    pairs = [(x, [value(r) for r in scale_runs(runs, mode, x)]) for x in xs]
    return [x for x, ys in pairs if ys], [statistics.median(ys) for _, ys in pairs if ys]


def panel(ax: Any, runs: list[Run], value: Callable[[Run], float], title: str, ylabel: str) -> None:
    """One panel: a line a mode, and a marker for each run beside idle workers."""
    for mode in COLORS:
        xs, ys = series(runs, mode, value)
        if xs:
            ax.plot(xs, ys, marker="o", color=COLORS[mode], label=NAMES[mode])
    for run in runs:
        p = run["point"]
        if p["idle"]:
            how = "--listen-url" if p["idle_listen"] else "polling"
            ax.plot(
                [p["processes"]], [value(run)], marker=MARKERS[p["idle_listen"]],
                linestyle="none", color="tab:red", markerfacecolor="none", markersize=9,
                label=f"{p['processes']} PgBouncer + {p['idle']} idle, {how}",
            )  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_xticks([1, 2, 4, 8, 16], labels=["1", "2", "4", "8", "16"])
    ax.set_xlabel("busy worker processes")
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)


def p99_ms(run: Run) -> float:
    """The steady phase's p99, enqueue to start, in ms (NaN without one)."""
    return run["steady"]["p99"] * 1000 if run["steady"] else float("nan")


def main(argv: list[str]) -> int:
    """Read the JSON file ``argv[0]``, write the PNG ``argv[1]``."""
    payload = json.loads(Path(argv[0]).read_text())
    runs = payload["runs"]
    setting = payload["setting"]
    fig, axes = plt.subplots(2, 2, figsize=(10, 7.5), dpi=90)
    panel(axes[0][0], runs, rate, "Backlog drain: jobs/s (first start to last end)", "jobs/s")
    steady = f"Steady {payload['args']['steady_rate']:g} tasks/s: p99 enqueue -> start"
    panel(axes[0][1], runs, p99_ms, steady, "ms")
    drain_cpu = "PostgreSQL CPU during the drain (of 2 cores)"
    panel(axes[1][0], runs, lambda r: cores(r["backlog"]), drain_cpu, "cores")
    sessions = "PostgreSQL connections, most at once"
    panel(axes[1][1], runs, lambda r: r["peaks"]["sessions"], sessions, "server connections")
    axes[0][0].legend(fontsize=8, loc="lower right")
    fig.suptitle(
        f"jobq scale-out: worker groups in network namespaces, one {setting['server']},"
        f" {payload['args']['tasks']:,} no-op tasks a drain",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(argv[1])
    print(f"plot: {argv[1]} ({Path(argv[1]).stat().st_size / 1000:.0f} KB)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
