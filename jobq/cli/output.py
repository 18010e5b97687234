"""Printing tasks, tables and workers for the command line."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime

from jobq.durations import format_duration
from jobq.live_workers import LiveWorker
from jobq.tasks import Task


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Aligned text columns; a column of numbers is right-aligned."""
    cells = [list(headers)] + [[str(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    numeric = [
        bool(rows) and all(isinstance(row[i], int) for row in rows) for i in range(len(headers))
    ]
    return "\n".join(
        "  ".join(
            cell.rjust(width) if right else cell.ljust(width)
            for cell, width, right in zip(row, widths, numeric, strict=True)
        ).rstrip()
        for row in cells
    )


def when(moment: datetime | None) -> str:
    return "-" if moment is None else moment.isoformat(sep=" ", timespec="seconds")


def count(n: int) -> str:
    return f"{n} task" if n == 1 else f"{n} tasks"


def field_text(task: Task, name: str) -> str:
    """One field of ``task`` as ``jobq show`` prints it: args and result as JSON."""
    value = getattr(task, name)
    if name in ("args", "result"):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    return "-" if value is None else str(value)


def worker_row(worker: LiveWorker, now: datetime) -> list[object]:
    seen = format_duration((now - worker.last_seen).total_seconds())
    return [
        worker.worker_id,
        worker.host,
        worker.pid,
        "all" if worker.queues is None else ",".join(worker.queues),
        worker.concurrency,
        f"{seen} ago",
        "alive" if worker.alive else "stale",
    ]
