"""Why a task is or is not running, said in a line or a few, from the rows alone.

Store.explain(id) reads the task's row with the database's clock in one statement, then
what may hold it back: a running or earlier row of its lock key, its queue's limit, its
fair queue's other keys (their turn, its key's cap), and the worker registry. Every time
compared is the database's, never this process's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from jobq.db.errors import TaskNotFound
from jobq.db.tasks import Status, as_utc
from jobq.db.validation import check_int
from jobq.dialects.predicates import waiting
from jobq.dialects.schema import limit_starts, status_is, tasks
from jobq.limits.fair import FairQueues
from jobq.limits.pause import Pauses
from jobq.limits.sql import Limits
from jobq.workflows.rows import Workflows

if TYPE_CHECKING:
    from jobq.core.live_workers import LiveWorker
    from jobq.core.store import TaskStore

c = tasks.c

#: The columns explain reads of the task itself (args and result are never needed).
_COLUMNS = (
    c.id, c.queue_id, c.name, c.status, c.run_at, c.retries_left, c.attempt, c.timeout,
    c.locked_by, c.locked_until, c.lock_key, c.error, c.recurring, c.started_at,
    c.finished_at, c.cancel_requested_at, c.fair_key,
)  # fmt: skip


@dataclass(frozen=True)
class Explanation:
    """Why task ``task_id`` is or is not running.

    ``reason`` is a short stable code (due_later, retry_wait, queue_paused, lock_key_held,
    lock_key_behind, concurrency_full, rate_full, no_worker, ready, running, finished,
    cancelled, waiting_for_parents); ``lines`` say it in sentences, the first the main
    one; ``details`` hold the facts as JSON-able values (ids, worker ids, ISO 8601 UTC
    times, counts).
    """

    task_id: int
    reason: str
    lines: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The explanation as a JSON-able dict: task_id, reason, lines, details."""
        return {
            "task_id": self.task_id,
            "reason": self.reason,
            "lines": list(self.lines),
            "details": dict(self.details),
        }


def explain(store: TaskStore, id: int) -> Explanation:
    """Explain task ``id`` from the rows as they are now; TaskNotFound if there is none."""
    check_int("id", id)
    stmt = sa.select(*_COLUMNS, store.dialect.now().label("db_now")).where(c.id == id)
    with store.db.unit(read_only=True) as conn:
        row = conn.execute(stmt).first()
    if row is None:
        raise TaskNotFound(id=id)
    now: datetime = as_utc(row.db_now)
    status = Status(row.status)
    details: dict[str, Any] = {
        "status": status.value,
        "queue": row.queue_id,
        "name": row.name,
        "attempt": row.attempt,
        "retries_left": row.retries_left,
        "now": _iso(now),
    }
    if status is Status.IN_PROGRESS:
        return _running(store, row, now, details)
    if status is Status.BLOCKED:
        return _blocked(store, row, details)
    if status is Status.CANCELLED:
        lines = [f"cancelled at {_when(row.finished_at)}"]
        if row.error:
            details["error"] = _last_line(row.error)
            lines[0] += f": {details['error']}"
        if row.recurring:
            lines.append("its schedule is disabled (`jobq cron enable` resumes it)")
        details["finished_at"] = _iso(row.finished_at)
        return Explanation(row.id, "cancelled", lines, details)
    rests = status is Status.DONE and row.recurring  # a cron row waiting for its next tick
    if (status is Status.DONE and not rests) or (status is Status.FAILED and not row.retries_left):
        return _finished(row, status, details)
    return _waiting(store, row, now, details)


# --- finished, running, and workflow nodes waiting for their parents ------------------------


def _blocked(store: TaskStore, row: Any, details: dict[str, Any]) -> Explanation:
    """A workflow node whose parents are not all done: which it waits for."""
    parents = store.capability(Workflows).parents(row.id)
    waiting_for = [
        {"id": parent_id, "name": task.name if task else None, "status": _status_of(task)}
        for parent_id, task in parents
        if task is None or task.status is not Status.DONE
    ]
    details.update(parents=[parent_id for parent_id, _ in parents], waiting_for=waiting_for)
    said = ", ".join(
        f"task {p['id']} ({p['name']}, {p['status']})" if p["name"] else f"task {p['id']} (gone)"
        for p in waiting_for[:_PARENTS_SHOWN]
    )
    more = len(waiting_for) - _PARENTS_SHOWN
    if more > 0:
        said += f" and {more} more"
    lines = [f"waits for {len(waiting_for)} of its {len(parents)} parent(s): {said}"]
    lines.append("it is queued once they are all done, and cancelled if one of them fails for good")
    return Explanation(row.id, "waiting_for_parents", lines, details)


#: Parents a waiting node's explanation names one by one.
_PARENTS_SHOWN = 5


def _status_of(task: Any) -> str:
    return "gone" if task is None else task.status.value


def _finished(row: Any, status: Status, details: dict[str, Any]) -> Explanation:
    """A task that will not run again by itself: done, or failed with no retry left."""
    details["finished_at"] = _iso(row.finished_at)
    line = f"finished {status.value} at {_when(row.finished_at)}"
    if status is Status.FAILED:
        last = _last_line(row.error)
        details["error"] = last
        line += f" (attempt {row.attempt}, no retry left): {last}"
    return Explanation(row.id, "finished", [line], details)


def _running(store: TaskStore, row: Any, now: datetime, details: dict[str, Any]) -> Explanation:
    """A task in progress: on which worker, since when, its heartbeat, lease and timeout."""
    started, until = as_utc(row.started_at), as_utc(row.locked_until)
    worker = next((w for w in store.live_workers() if w.worker_id == row.locked_by), None)
    details.update(
        worker=row.locked_by,
        started_at=_iso(started),
        locked_until=_iso(until),
        last_heartbeat=None if worker is None else _iso(worker.last_seen),
    )
    line = f"running on worker {row.locked_by} since {_when(started)} (attempt {row.attempt}"
    if worker is None:
        line += "; the worker is not in the registry)"
    else:
        line += f", last heartbeat {_seconds(now - worker.last_seen)} ago)"
    lines = [line]
    lease_expired = until is not None and until < now
    details["lease_expired"] = lease_expired
    if lease_expired:
        lines.append(
            f"its lease expired at {_when(until)}: it is taken again"
            + (" (a retry)" if row.retries_left else ", or failed by a rescue")
        )
    else:
        lines.append(f"lease until {_when(until)}")
    past_timeout = (
        row.timeout is not None
        and started is not None
        and (now - started).total_seconds() > float(row.timeout)
    )
    details["past_timeout"] = past_timeout
    if past_timeout:
        lines.append(
            f"past its timeout of {float(row.timeout):g} s; it fails as timed out once its "
            "code returns"
        )
    if row.cancel_requested_at is not None:
        details["cancel_requested_at"] = _iso(row.cancel_requested_at)
        lines.append(f"cancel requested at {_when(row.cancel_requested_at)}")
    return Explanation(row.id, "running", lines, details)


# --- waiting -----------------------------------------------------------------------------------


def _waiting(store: TaskStore, row: Any, now: datetime, details: dict[str, Any]) -> Explanation:
    """A task that waits to be captured: why it has not been, in the order that explains best.

    Not yet due comes first (nothing else matters until then); a due one may be held back
    by its lock key, then its queue's limit; with no live worker serving its queue nothing
    takes it at all, which is said in any case.
    """
    run_at: datetime = as_utc(row.run_at)
    details["run_at"] = _iso(run_at)
    failed = Status(row.status) is Status.FAILED
    if failed:
        details["error"] = _last_line(row.error)
    serving = _serving(store.live_workers(), row.queue_id)
    details["workers"] = [w.worker_id for w in serving]
    no_worker = f"no live worker serves its queue {row.queue_id!r}"

    if run_at > now:
        wait = _seconds(run_at - now)
        if failed:
            reason = "retry_wait"
            line = (
                f"waiting for its retry until {_when(run_at)}, in {wait} "
                f"(attempt {row.attempt} failed: {details['error']})"
            )
        else:
            reason = "due_later"
            tick = "its next tick is" if row.recurring else "due"
            line = f"{tick} in {wait}, at {_when(run_at)}"
        lines = [line]
        if _paused(store, row, details) is not None:  # said too: it will not run when due
            lines.append(f"and its queue {row.queue_id!r} is paused")
        return Explanation(row.id, reason, lines + ([] if serving else [no_worker]), details)

    lines = [f"due now (since {_when(run_at)})"]
    if failed:
        lines[0] = f"attempt {row.attempt} failed: {details['error']}; its retry is due now"
    # First: a paused queue is taken by no capture at all, whatever else holds.
    blocked = (
        _paused(store, row, details)
        or _lock_key(store, row, now, details)
        or _limit(store, row, now, details)
        or _fair(store, row, details)
    )
    if blocked is not None:
        reason, line = blocked
        lines.append(line)
        if not serving:
            lines.append(no_worker)
        return Explanation(row.id, reason, lines, details)
    if not serving:
        return Explanation(row.id, "no_worker", [*lines, no_worker], details)
    lines.append(f"capturable: a worker serving queue {row.queue_id!r} should take it")
    return Explanation(row.id, "ready", lines, details)


def _serving(workers: list[LiveWorker], queue: str) -> list[LiveWorker]:
    """The live workers that capture from ``queue`` (queues None: every queue)."""
    return [w for w in workers if w.alive and (w.queues is None or queue in w.queues)]


def _paused(store: TaskStore, row: Any, details: dict[str, Any]) -> tuple[str, str] | None:
    """(reason, line) if the row's queue is paused; else None."""
    details["paused"] = row.queue_id in store.capability(Pauses).paused_queues()
    if not details["paused"]:
        return None
    resume = f"jobq queues resume {row.queue_id}"
    return "queue_paused", f"queue {row.queue_id!r} is paused (`{resume}` lets it run)"


def _lock_key(
    store: TaskStore, row: Any, now: datetime, details: dict[str, Any]
) -> tuple[str, str] | None:
    """(reason, line) if the row's lock key is held by a run, or taken first by an earlier
    due row of the key (capture takes only the earliest); else None."""
    if row.lock_key is None:
        return None
    key = row.lock_key
    details["lock_key"] = key
    holder = sa.select(c.id, c.attempt, c.locked_by, c.locked_until).where(
        c.lock_key == key, status_is(Status.IN_PROGRESS), c.id != row.id
    )
    earlier = (
        sa.select(c.id)
        .where(
            c.lock_key == key,
            c.id < row.id,
            waiting(c),
            c.run_at <= store.dialect.now(),
        )
        .order_by(c.id)
        .limit(1)
    )
    with store.db.unit(read_only=True) as conn:
        held = conn.execute(holder).first()
        first = None if held is not None else conn.execute(earlier).scalar()
    if held is not None:
        details["holder"] = {
            "task_id": held.id,
            "attempt": held.attempt,
            "worker": held.locked_by,
            "locked_until": _iso(held.locked_until),
        }
        return "lock_key_held", (
            f"lock key {key!r} held by task {held.id} attempt {held.attempt} on worker "
            f"{held.locked_by}, lease until {_when(held.locked_until)}"
        )
    if first is not None:
        details["ahead"] = first
        return "lock_key_behind", (
            f"waits behind task {first}, due earlier with the same lock key {key!r}"
        )
    return None


def _limit(
    store: TaskStore, row: Any, now: datetime, details: dict[str, Any]
) -> tuple[str, str] | None:
    """(reason, line) if the queue's limit leaves no room now; else None."""
    limit = store.capability(Limits).limits().get(row.queue_id)
    if limit is None:
        return None
    running, started = store.capability(Limits).limit_usage().get(row.queue_id, (0, 0))
    details["limit"] = {"concurrency": limit.concurrency, "running": running}
    if limit.concurrency is not None and running >= limit.concurrency:
        return "concurrency_full", (
            f"queue concurrency full ({running} of {limit.concurrency} running)"
        )
    if limit.rate is not None:
        details["limit"].update(rate=str(limit.rate), started=started)
        if started >= limit.rate.count:
            oldest = _oldest_start(store, row.queue_id, limit.rate.period)
            # A start leaves the window one period after it was made: then there is room.
            next_start = None if oldest is None else oldest + timedelta(seconds=limit.rate.period)
            details["limit"]["next_start_at"] = _iso(next_start)
            return "rate_full", (
                f"rate window full ({started} of {limit.rate.count} starts in "
                f"{limit.rate.period:g} s; next start at {_when(next_start)})"
            )
    return None


def _fair(store: TaskStore, row: Any, details: dict[str, Any]) -> tuple[str, str] | None:
    """(reason, line) if the row's fair queue serves other keys or rows first, or its
    key is at its cap; else None."""
    found = store.capability(FairQueues).position(row.queue_id, row.fair_key, row.id)
    if found is None:
        return None
    details["fair"] = found
    key = found["key"]
    if key is None:
        return "fair_unsettled", (
            f"its queue {row.queue_id!r} is fair and the row has no key yet: the upkeep "
            "gives it the keyless rows' key ''"
        )
    cap = found["cap"]
    if cap is not None and found["running"] >= cap:
        return "fair_key_cap", (
            f"its key {key!r} is at its cap ({found['running']} of {cap} running)"
        )
    if not found["in_turn"]:
        return "fair_key_idle", (
            f"its key {key!r} is not in turn (idle): the next enqueue of the key or the "
            "upkeep wakes it"
        )
    keys, rows = found["keys_ahead"], found["rows_ahead"]
    if keys or rows:
        return "fair_turn", (
            f"waiting for its key's turn: {keys} key(s) with work are visited before key {key!r} "
            f"(weight {found['weight']}), and {rows} row(s) of its own key"
        )
    return None


def _oldest_start(store: TaskStore, queue: str, period: float) -> datetime | None:
    """The earliest start of ``queue`` still inside its rate window, or None."""
    sc = limit_starts.c
    stmt = sa.select(sa.func.min(sc.started_at)).where(
        sc.queue == queue, sc.started_at > store.dialect.now_plus(-float(period))
    )
    with store.db.unit(read_only=True) as conn:
        return as_utc(conn.execute(stmt).scalar())


# --- words -------------------------------------------------------------------------------------


def _last_line(error: str | None) -> str:
    """The last non-blank line of an error (a traceback's is the exception itself)."""
    lines = [line.strip() for line in (error or "").splitlines() if line.strip()]
    return lines[-1] if lines else "no error recorded"


def _seconds(delta: timedelta) -> str:
    return f"{max(round(delta.total_seconds()), 0)} s"


def _iso(moment: datetime | None) -> str | None:
    """ISO 8601 in UTC, as details hold times."""
    moment = as_utc(moment)
    return None if moment is None else moment.isoformat()


def _when(moment: datetime | None) -> str:
    """A time as lines say it: to the second, in UTC."""
    moment = as_utc(moment)
    return "-" if moment is None else moment.isoformat(sep=" ", timespec="seconds")
