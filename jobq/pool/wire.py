"""The frames a worker and its pool children exchange: JSON, never pickle.

Each frame is one JSON object sent with Connection.send_bytes. A task's arguments came
from the database as JSON and go on as JSON; a run's result must be storable JSON
anyway (jobq.db.payload), so nothing a task or the database supplied is ever unpickled.
"""

from __future__ import annotations

import json
from dataclasses import fields
from datetime import datetime
from typing import Any

from jobq.db.tasks import Status, Task
from jobq.worker.executor import Outcome

# Unescaped, and encoded with surrogatepass: a lone surrogate crosses as itself. (As
# \ud83d\ude00 escapes, two lone surrogates side by side would be read back as one
# character, and an error text would differ from what a thread's run stores.)
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _bytes(document: Any) -> bytes:
    return _ENCODER.encode(document).encode("utf-8", "surrogatepass")


def _document(frame: bytes) -> Any:
    return json.loads(frame.decode("utf-8", "surrogatepass"))


_MOMENTS = {"run_at", "locked_until", "created_at", "started_at", "finished_at"}
_MOMENTS |= {"cancel_requested_at"}


def task_frame(task: Task, timeout: float | None) -> bytes:
    """The frame that asks a child to run ``task`` with ``timeout`` (its definition's,
    or the one it was given at enqueue)."""
    row: dict[str, Any] = {}
    for field in fields(Task):
        value = getattr(task, field.name)
        if isinstance(value, datetime):
            value = value.isoformat()
        row[field.name] = value
    return _bytes({"task": row, "timeout": timeout})


def read_task(frame: bytes) -> tuple[Task, float | None]:
    """The task and timeout of a frame made by task_frame."""
    document = _document(frame)
    row = document["task"]
    for name in _MOMENTS:
        if row.get(name) is not None:
            row[name] = datetime.fromisoformat(row[name])
    row["status"] = Status(row["status"])
    return Task(**row), document["timeout"]


def outcome_frame(outcome: Outcome, max_rss_kib: int) -> bytes:
    """The frame of a run's ``outcome``; ``max_rss_kib``: the child's peak memory so far."""
    return _bytes(
        {
            "status": outcome.status.value, "result": outcome.result, "error": outcome.error,
            "retry_delay": outcome.retry_delay, "terminal": outcome.terminal,
            "max_rss_kib": max_rss_kib,
        }
    )  # fmt: skip


def progress_frame(reports: dict[tuple[int, int], dict[str, Any]]) -> bytes:
    """The frame of the progress reports (jobq.set_progress) of the child's run."""
    document = {"progress": [[*fence, report] for fence, report in reports.items()]}
    return _bytes(document)


def read_reply(frame: bytes) -> dict[str, Any]:
    """A child's frame: {"progress": [[id, attempt, report], ...]} or an outcome."""
    document: dict[str, Any] = _document(frame)
    return document


def outcome_of(document: dict[str, Any]) -> Outcome:
    """The Outcome of an outcome frame, as read_reply returned it."""
    return Outcome(
        Status(document["status"]), result=document["result"], error=document["error"],
        retry_delay=document["retry_delay"], terminal=document["terminal"],
    )  # fmt: skip
