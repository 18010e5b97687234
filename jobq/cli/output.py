"""Printing tasks, tables and workers for the command line."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime

from jobq.core.live_workers import LiveWorker
from jobq.db.durations import format_duration
from jobq.db.tasks import Task, Undecodable


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
    if isinstance(value, Undecodable):
        text = f"(not JSON: {value.reason}) {value.text!r}"
    elif name in ("args", "result"):
        text = json.dumps(value, ensure_ascii=False)
    elif isinstance(value, datetime):
        text = value.isoformat(sep=" ")
    else:
        text = "-" if value is None else str(value)
    # A terminal cannot print lone surrogates (undecodable bytes in a str): escape them.
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def overrun_note(task: Task, now: datetime) -> str | None:
    """What ``jobq show`` says of a run still going past its timeout at ``now`` (the
    database's clock, read with the task), or None."""
    if task.status != "in_progress" or task.timeout is None or task.started_at is None:
        return None
    running = (now - task.started_at).total_seconds()
    if running <= task.timeout:
        return None
    return (
        f"timed out after {task.timeout:g} s and still running ({format_duration(running)}); "
        "it keeps its lease and lock until its code returns, then fails as timed out"
    )


def worker_row(worker: LiveWorker) -> list[object]:
    """A worker as `jobq status` and `jobq workers` print it, its age on the database's clock."""
    seen = format_duration(max(worker.last_seen_ago, 0.0))
    return [
        worker.worker_id,
        worker.host,
        worker.pid,
        "-" if worker.supervisor_pid is None else f"{worker.host}:{worker.supervisor_pid}",
        "all" if worker.queues is None else ",".join(worker.queues),
        worker.concurrency,
        f"{seen} ago",
        "alive" if worker.alive else "stale",
        worker.timed_out,
    ]
