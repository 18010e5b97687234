"""Ends of runs: the fenced UPDATEs that record how a captured run ended.

A write about a run applies only while its row is still in_progress with that run's
attempt. One end goes through set_status_statement; a batch of them (a worker's finished
runs) through record_statement, one set-based UPDATE whatever the batch's size. Neither
touches recurring rows, whose ends jobq.cron.periodic records (it must compute a cron tick).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from jobq.core import retry
from jobq.core.retry import Backoff
from jobq.db.errors import InvalidOption, PayloadTooLarge
from jobq.db.payload import (
    checked_result,
    encode_records,
    encode_result,
    larger_than,
    storable_text,
)
from jobq.db.room import Room
from jobq.db.tasks import CANCELLED_ON_REQUEST, Completion, Status, as_utc
from jobq.db.validation import INT32, check_datetime, check_int, check_seconds
from jobq.dialects.base import Dialect
from jobq.dialects.schema import HAS_RETRIES, status_is, tasks

c = tasks.c

#: Statuses a run can end with (only capture moves a task to in_progress).
END_STATUSES = (Status.DONE, Status.FAILED, Status.QUEUED, Status.CANCELLED)

#: The fields of each object in record_statement's JSON array parameter ``completions``.
COMPLETION_FIELDS: tuple[tuple[str, Any], ...] = (
    ("id", sa.BigInteger()),
    ("attempt", sa.Integer()),
    ("status", sa.String()),
    ("result", sa.Text()),  # JSON text, or null
    ("error", sa.Text()),
    ("delay", sa.Float()),  # seconds until the next run (failed with retries, queued)
    ("terminal", sa.Integer()),  # 1: a failure never retried, whatever retries are left
)


def end_values(
    dialect: Dialect,
    status: Status,
    *,
    next_run: sa.ColumnElement[Any] | datetime,
    result: sa.ColumnElement[Any],
    error: sa.ColumnElement[Any] | str | None,
    terminal: sa.ColumnElement[bool] | None = None,
) -> dict[str, Any]:
    """The SET clause ending a run with ``status``, given SQL (or values: cron's rows pass
    a moment and an error) for its parts.

    - done: stores ``result`` and clears the error.
    - failed: with retries left, the task returns at ``next_run``, else it is terminal;
      where ``terminal`` holds it is terminal anyway, its retries_left set to 0.
    - queued: a release; back to the queue at ``next_run``, no retry spent.
    - cancelled: terminal.
    """
    now = dialect.now()
    values: dict[str, Any] = {"status": status.value, "locked_by": None, "locked_until": None}
    if status is Status.DONE:
        values.update(result=result, error=None, finished_at=now)
    elif status is Status.FAILED:
        retried = HAS_RETRIES if terminal is None else sa.and_(HAS_RETRIES, sa.not_(terminal))
        values.update(
            error=error,
            run_at=sa.case((retried, next_run), else_=c.run_at),
            finished_at=sa.case((retried, sa.null()), else_=now),
        )
        if terminal is not None:
            values["retries_left"] = sa.case((terminal, 0), else_=c.retries_left)
    elif status is Status.QUEUED:
        values.update(run_at=next_run)
    else:
        values.update(error=error, finished_at=now)
    return values


#: A cancel of the running task was asked for (Store.cancel): an end that would make it
#: wait again (a failure with retries left, a snooze, a release) ends it cancelled instead;
#: done and terminal failures are recorded as they happened.
CANCEL_PENDING = c.cancel_requested_at.is_not(None)


def _cancelled_instead(dialect: Dialect) -> dict[str, Any]:
    """The SET clause of an end that a pending cancel request turns into a cancel."""
    null = sa.null()
    return end_values(
        dialect, Status.CANCELLED, next_run=null, result=null,
        error=sa.literal(CANCELLED_ON_REQUEST, sa.Text),
    )  # fmt: skip


def _either(cancels: sa.ColumnElement[bool], instead: Any, value: Any) -> Any:
    """``instead`` where ``cancels`` holds, else ``value``; None when both are None (a
    CASE of two bare NULLs would be untyped, which PostgreSQL refuses for a timestamp)."""
    if instead is None and value is None:
        return None
    return sa.case((cancels, instead), else_=value)


def _fenced(id: sa.ColumnElement[Any], attempt: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
    # A recurring row's end needs its schedule's next tick: jobq.cron.periodic records it.
    return sa.and_(
        c.id == id, status_is(Status.IN_PROGRESS), c.attempt == attempt, sa.not_(c.recurring)
    )


def set_status_statement(
    dialect: Dialect, status: Status, timing: str, node: bool = False
) -> sa.Update:
    """The fenced UPDATE ending one run with ``status``, of a task outside workflows (of
    a workflow node with ``node``, whose end must then settle the nodes after it).

    Parameters: ``task_id``, ``run_attempt``, ``new_result``, ``new_error``, and the next
    run's time per ``timing``: 'at' (``next_run_at``) or 'delay' (``delay`` seconds on the
    database's clock).
    """
    if timing == "at":
        next_run: Any = sa.bindparam("next_run_at", type_=c.run_at.type)
    else:
        next_run = dialect.now_plus(sa.bindparam("delay", type_=sa.Float))
    values = end_values(
        dialect,
        status,
        next_run=next_run,
        result=sa.bindparam("new_result", type_=c.result.type),
        error=sa.bindparam("new_error", type_=c.error.type),
    )
    if status in (Status.FAILED, Status.QUEUED):
        would_wait = HAS_RETRIES if status is Status.FAILED else sa.true()
        instead = _cancelled_instead(dialect)
        cancels = sa.and_(CANCEL_PENDING, would_wait)
        values = {
            column: _either(cancels, instead.get(column, c[column]), values.get(column, c[column]))
            for column in {"status", *values, *instead}
        }
    where = _fenced(sa.bindparam("task_id"), sa.bindparam("run_attempt"))
    of_kind = c.workflow_id.is_not(None) if node else c.workflow_id.is_(None)
    return sa.update(tasks).where(where, of_kind).values(**values)


def record_statement(dialect: Dialect) -> sa.Update:
    """One fenced UPDATE ending every run in the JSON array parameter ``completions``.

    Each row takes the SET clause of its own status (a CASE per column); its rowcount is
    how many ends applied.
    """
    record = dialect.json_records(sa.bindparam("completions", type_=sa.Text), COMPLETION_FIELDS)
    per_status = {
        status: end_values(
            dialect,
            status,
            next_run=dialect.now_plus(record.c.delay),
            result=dialect.json_from_text(record.c.result),
            error=record.c.error,
            terminal=record.c.terminal == 1,
        )
        for status in END_STATUSES
    }
    # Checked first in every column: the end a pending cancel request turns into a cancel.
    instead = _cancelled_instead(dialect)
    would_wait = sa.or_(
        record.c.status == Status.QUEUED.value,
        sa.and_(record.c.status == Status.FAILED.value, HAS_RETRIES, record.c.terminal != 1),
    )
    cancels = sa.and_(CANCEL_PENDING, would_wait)
    values: dict[str, Any] = {
        "status": sa.case((cancels, Status.CANCELLED.value), else_=record.c.status)
    }
    for column in {name for ends in per_status.values() for name in ends} - {"status"}:
        choices = [(status, ends[column]) for status, ends in per_status.items() if column in ends]
        if all(value is None for _, value in choices) and len(choices) == len(END_STATUSES):
            values[column] = None
            continue
        values[column] = sa.case(
            (cancels, instead.get(column, c[column])),
            *[(record.c.status == status.value, value) for status, value in choices],
            else_=c[column],
        )
    # The join alone leaves the planner free to hash a scan of every running row.
    by_key = dialect.id_among(sa.select(record.c.id))
    return sa.update(tasks).where(by_key, _fenced(record.c.id, record.c.attempt)).values(**values)


def check_end(
    id: int,
    attempt: int,
    status: Status | str,
    *,
    error: str | None,
    run_at: datetime | None,
    retry_delay: float | None,
) -> Status:
    """Check one end of run's parts but its result (InvalidOption naming the bad one)."""
    status = Status.parse(status)
    check_int("id", id)
    check_int("attempt", attempt, minimum=1, maximum=INT32[1])
    if status is Status.BLOCKED:
        reason = "only a workflow's enqueue makes a task blocked"
        raise InvalidOption(option="status", reason=reason)
    if status not in END_STATUSES:
        raise InvalidOption(option="status", reason="only capture moves a task to in_progress")
    if run_at is not None and retry_delay is not None:
        raise InvalidOption(option="run_at", reason="give run_at or retry_delay, not both")
    if retry_delay is not None:
        check_seconds("retry_delay", retry_delay)
    if run_at is not None:
        check_datetime("run_at", run_at)
    if error is not None and not isinstance(error, str):
        raise InvalidOption(option="error", reason=f"{error!r} is not a string")
    return status


def next_delay(status: Status, attempt: int, retry_delay: float | None, backoff: Backoff) -> float:
    """Seconds until the next run: as told, else the backoff's for a failure, else none."""
    if retry_delay is not None:
        return float(retry_delay)
    if status is not Status.FAILED:
        return 0.0
    return retry.retry_delay(backoff, attempt, whose="the Store")


def set_status_parameters(
    id: int,
    attempt: int,
    status: Status | str,
    *,
    result: Any,
    error: str | None,
    run_at: datetime | None,
    retry_delay: float | None,
    backoff: Backoff,
    room: Room,
) -> tuple[tuple[Status, str], dict[str, Any]]:
    """The shape of set_status_statement to run, (status, timing), and its parameters."""
    status = check_end(id, attempt, status, error=error, run_at=run_at, retry_delay=retry_delay)
    result_text = encode_result(result)
    if result_text is not None and not room.fits(result_text):
        raise PayloadTooLarge(what="The result", size=room.size(result_text), why=room.why)
    if error is not None:
        error = storable_text(error)
    params: dict[str, Any] = {
        "task_id": id, "run_attempt": attempt, "new_result": result, "new_error": error,
    }  # fmt: skip
    if run_at is not None:
        params["next_run_at"] = as_utc(run_at)
        return (status, "at"), params
    params["delay"] = next_delay(status, attempt, retry_delay, backoff)
    return (status, "delay"), params


@dataclass(frozen=True)
class Encoded:
    """A batch of ends made storable, and record_statement's parameters that write it."""

    #: The ends as they will be stored: errors escaped, and an end whose result cannot be
    #: stored turned into a failure saying why.
    completions: list[Completion]
    #: Values of the ``completions`` parameter, each small enough for one statement.
    chunks: list[str]


def storable_end(done: Completion, room: Room) -> tuple[Completion, str | None]:
    """``done`` as the database can store it, and its result's JSON text.

    A result that cannot be stored (not JSON, a lone surrogate, too large) makes the run a
    failure that says why; an error is escaped where it holds NUL or undecodable text.
    """
    result_text = None
    if done.result is not None:
        if larger_than(done.result, room.limit):  # refused before its JSON is built
            why = f"result too large for this database: over {room.limit:,} bytes ({room.why})"
            return _unstorable(done, why), None
        result_text, problem = checked_result(done.result, sized=True)
        if problem is not None:
            return _unstorable(done, f"its result {problem}"), None
        if not room.fits(result_text):
            size = room.size(result_text)
            why = f"result too large for this database: {size:,} bytes ({room.why})"
            return _unstorable(done, why), None
    if done.error is not None:  # a str: check_end saw to it
        error = storable_text(done.error)
        if error is not done.error:
            done = dataclasses.replace(done, error=error)
    return done, result_text


def _unstorable(done: Completion, why: str) -> Completion:
    """The failure recorded in place of ``done``, whose outcome cannot be stored."""
    return Completion(done.id, done.attempt, Status.FAILED, error=why, in_workflow=done.in_workflow)


def encode_completions(completions: Sequence[Completion], backoff: Backoff, room: Room) -> Encoded:
    """record_statement's ``completions`` parameter, every end checked and made storable.

    A second end of the same run is left out: in order, the first would have ended the
    run and made it stale, and one UPDATE would apply either of the two. The parameter
    comes in several chunks when one would be too large for the database.
    """
    ends: list[Completion] = []
    records = []
    seen: set[tuple[int, int]] = set()
    for given in completions:
        status = check_end(
            given.id, given.attempt, given.status, error=given.error, run_at=None,
            retry_delay=given.retry_delay,
        )  # fmt: skip
        fence = (given.id, given.attempt)
        if fence in seen:
            continue
        seen.add(fence)
        if given.result is None and given.error is None:
            done, result_text = given, None  # nothing to make storable (most ends)
        else:
            done, result_text = storable_end(given, room)
            status = Status.parse(done.status)
        ends.append(done)
        records.append(
            {
                "id": done.id,
                "attempt": done.attempt,
                "status": status.value,
                "result": result_text,
                "error": done.error,
                "delay": next_delay(status, done.attempt, done.retry_delay, backoff),
                "terminal": 1 if done.terminal else 0,
            }
        )
    return Encoded(ends, chunked_records(records, room))


def chunked_records(records: Sequence[dict[str, Any]], room: Room) -> list[str]:
    """JSON arrays of ``records``, in order, as few as fit the database one statement each."""
    text = encode_records(records)
    if room.fits(text):
        return [text]
    chunks: list[str] = []
    chunk: list[str] = []
    size = 2
    for record in records:
        text = encode_records([record])[1:-1]
        if chunk and size + room.size(text) + 1 > room.limit:
            chunks.append(f"[{','.join(chunk)}]")
            chunk, size = [], 2
        chunk.append(text)
        size += room.size(text) + 1
    chunks.append(f"[{','.join(chunk)}]")
    return chunks
