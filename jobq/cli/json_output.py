"""The JSON documents of `jobq status --json`, `list --json`, `show --json`, `workers --json`.

Each command prints one JSON document on stdout, ASCII only (other characters, lone
surrogates and NUL included, as ``\\uXXXX`` escapes), so it is valid UTF-8 whatever a task
holds. Times are ISO 8601 in UTC with their offset ("2026-01-02T03:04:05.678901+00:00"),
or null. Durations are seconds (numbers).

A task (``list`` gives an array of them, ``show`` one, ``workers`` a part of each)::

    {"id", "queue", "name", "args", "status", "priority", "run_at", "retries_left",
     "attempt", "lease", "timeout", "locked_by", "locked_until", "unique_key", "lock_key",
     "result", "error", "recurring", "created_at", "started_at", "finished_at",
     "progress", "cancel_requested_at", "awaited", "trace_context"}

every field of jobq.Task in its order, "queue" being its queue_id. "args", "result" and
"progress" are the stored JSON values; one that could not be decoded is
``{"undecodable": true, "reason": ..., "text": ...}`` (the stored text as it is). NaN
and infinities, which JSON has not, are the strings "NaN", "Infinity", "-Infinity".

``show`` adds "notes": the notes its text form prints (a cancel requested, a run past its
timeout), a list of strings, empty if none.

``status``::

    {"queues": [{"queue", "counts": {"queued", "in_progress", "done", "failed",
                 "cancelled"}, "total", "oldest_waiting_seconds" (null: none due)}],
     "schedules": [{"queue", "schedules", "running", "disabled", "no_longer_defined"}],
     "workers": [WORKER]}

WORKER (``status``, and ``workers`` adds "running" and "running_count")::

    {"id", "host", "pid", "queues" (null: all), "concurrency", "started_at", "last_seen",
     "state" ("alive", "stale"; "unregistered" for a worker id holding running tasks
     but not in the registry), "alive" (bool), "timed_out" (its runs past their
     timeouts)}

``workers``: an array of WORKER with "running": its running tasks, each
``{"id", "name", "queue", "attempt", "started_at", "locked_until"}``, oldest first.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import fields
from datetime import datetime
from typing import Any

from jobq.cli.cron import summary_counts
from jobq.core.live_workers import LiveWorker
from jobq.cron.periodic import ScheduleState
from jobq.db.tasks import Status, Task, Undecodable, as_utc

#: Task fields printed under another name: "queue", as every other jobq document says.
RENAMED = {"queue_id": "queue"}


def dumps(document: Any) -> str:
    """``document`` as JSON text: ASCII only (hence valid UTF-8), two-space indented."""
    # ensure_ascii escapes lone surrogates and NUL rather than writing text no UTF-8
    # encoder accepts; allow_nan=False because _plain has replaced every non-finite float.
    return json.dumps(_plain(document), indent=2, ensure_ascii=True, allow_nan=False)


def task_document(task: Task) -> dict[str, Any]:
    """Every field of ``task`` as a JSON object (see the module docstring)."""
    return {RENAMED.get(f.name, f.name): _value(getattr(task, f.name)) for f in fields(task)}


def show_document(task: Task, notes: Sequence[str | None]) -> dict[str, Any]:
    """`jobq show --json`: the task and the notes its text form prints."""
    return {**task_document(task), "notes": [note for note in notes if note]}


def status_document(
    counts: Mapping[tuple[str, Status], int],
    oldest: Mapping[str, float],
    schedules: Sequence[ScheduleState],
    workers: Sequence[LiveWorker],
) -> dict[str, Any]:
    """`jobq status --json`: what its text form shows (see the module docstring)."""
    queues = []
    for queue in sorted({queue for queue, _ in counts}):
        of_queue = {s.value: counts.get((queue, s), 0) for s in Status}
        queues.append(
            {
                "queue": queue,
                "counts": of_queue,
                "total": sum(of_queue.values()),
                "oldest_waiting_seconds": oldest.get(queue),
            }
        )
    return {
        "queues": queues,
        "schedules": summary_counts(schedules),
        "workers": [worker_document(worker) for worker in workers],
    }


def worker_document(worker: LiveWorker) -> dict[str, Any]:
    """One registered worker as a JSON object."""
    return {
        "id": worker.worker_id,
        "host": worker.host,
        "pid": worker.pid,
        "supervisor": (
            None
            if worker.supervisor_pid is None
            else {"host": worker.host, "pid": worker.supervisor_pid}
        ),
        "queues": worker.queues,
        "concurrency": worker.concurrency,
        "started_at": _value(worker.started_at),
        "last_seen": _value(worker.last_seen),
        "state": "alive" if worker.alive else "stale",
        "alive": worker.alive,
        "timed_out": worker.timed_out,
    }


def unregistered_worker_document(worker_id: str | None) -> dict[str, Any]:
    """A worker id that holds running tasks but has no registry row (forgotten after an
    hour unseen, or a process that captured without registering); None: an empty id."""
    return {
        "id": worker_id,
        "host": None,
        "pid": None,
        "supervisor": None,
        "queues": None,
        "concurrency": None,
        "started_at": None,
        "last_seen": None,
        "state": "unregistered",
        "alive": False,
        "timed_out": None,
    }


def running_document(task: Task) -> dict[str, Any]:
    """A running task as `jobq workers --json` lists it under its worker."""
    return {
        "id": task.id,
        "name": task.name,
        "queue": task.queue_id,
        "attempt": task.attempt,
        "started_at": _value(task.started_at),
        "locked_until": _value(task.locked_until),
    }


def _value(value: Any) -> Any:
    """A field's value as JSON: times in UTC, undecodable documents said to be so."""
    if isinstance(value, datetime):
        return as_utc(value).isoformat()
    if isinstance(value, Undecodable):
        return {"undecodable": True, "reason": value.reason, "text": value.text}
    if isinstance(value, Status):
        return value.value
    return value


def _plain(value: Any) -> Any:
    """``value`` with non-finite floats as strings: JSON has no NaN, and a row written by
    hand may hold one (Python's json reads it)."""
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value
