"""The jobq app processes.py runs: a no-op sync task and a CPU-bound sync task.

The database is $JOBQ_DATABASE_URL (processes.py points it at a schema of its own).

    python -m jobq.cli worker --app benchmarks.processes_app:app --burst --processes 2
"""

from __future__ import annotations

import time

import jobq

app = jobq.App()


@app.task(name="bench.proc.noop")
def noop(n: int = 0) -> None:
    """Do nothing: what a run costs the worker (and its pool) alone."""
    return None


def spin(iterations: int) -> int:
    """A pure-Python loop of ``iterations`` turns; holds the GIL throughout."""
    total = 0
    for i in range(iterations):
        total += i * i % 7
    return total


@app.task(name="bench.proc.cpu")
def cpu(iterations: int, n: int = 0) -> None:
    """Spin ``iterations`` turns of ``spin`` (processes.py calibrates them to ~50 ms)."""
    spin(iterations)


def calibrate(target_s: float, probe: int = 200_000, repeat: int = 5) -> tuple[int, float]:
    """Iterations of ``spin`` that take about ``target_s`` seconds here, and the seconds
    one probe turn took (best of ``repeat`` runs of ``probe`` iterations)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        spin(probe)
        best = min(best, time.perf_counter() - start)
    per_turn = best / probe
    return max(1, round(target_s / per_turn)), per_turn
