"""The dashboard's own queries, each bounded however large the tasks table grows.

- The tasks list walks the primary key backwards from ``before`` (keyset pagination,
  ``id < before ORDER BY id DESC LIMIT n``). With filters, one page searches a window of
  at most WINDOW ids, so a filter that matches few rows still costs one bounded range
  scan; the page then offers to search the next window.
- The chart counts the tasks finished in the last hour by minute, a range scan of the
  jobq_tasks_finished_at index bounded by the hour's start. The minute of each row is
  a CASE over the 60 boundaries, each the database's now (read first, in the same
  transaction) minus whole minutes, bound as parameters, nested as a binary search; no
  dialect needs a function truncating times.
- Busy slots come from the running rows, through their partial index.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from jobq.db.tasks import Status, as_utc
from jobq.dialects.schema import locks, status_is, tasks
from jobq.locks import Lease
from jobq.upkeep import UPKEEP_LOCK
from jobq.web.values import CELL_CHARS, clipped

if TYPE_CHECKING:
    from jobq.app.store import Store

c = tasks.c

#: Tasks on one page of the list.
PAGE = 50
#: Ids one filtered page searches at most, from its ``before`` down.
WINDOW = 100_000
#: Minutes the chart shows, each one bar.
MINUTES = 60
#: The longest filter value accepted: the columns hold 255 characters.
LONGEST = 255

#: The columns the list shows whole: never args, result or error, which may be large.
LIST_COLUMNS = (
    c.id, c.queue_id, c.name, c.status, c.priority, c.attempt, c.retries_left, c.run_at,
    c.created_at, c.started_at, c.finished_at, c.locked_by, c.recurring,
    c.cancel_requested_at,
)  # fmt: skip


@dataclass(frozen=True)
class Filters:
    """What the tasks list is narrowed to; empty strings mean no filter."""

    queue: str = ""
    status: str = ""
    name: str = ""

    @property
    def any(self) -> bool:
        """Whether any filter is set."""
        return bool(self.queue or self.status or self.name)

    def terms(self) -> list[sa.ColumnElement[bool]]:
        """The filters as WHERE terms, every value a bound parameter."""
        terms: list[sa.ColumnElement[bool]] = []
        if self.queue:
            terms.append(c.queue_id == self.queue)
        if self.status:
            terms.append(status_is(Status(self.status)))  # validated by parse_filters
        if self.name.endswith("*"):
            # LIKE with the text's own % and _ escaped: 'a_b*' finds names starting a_b.
            terms.append(c.name.startswith(self.name[:-1], autoescape=True))
        elif self.name:
            terms.append(c.name == self.name)
        return terms


def parse_filters(queue: str, status: str, name: str) -> tuple[Filters, list[str]]:
    """Filters from a query string's values, and what was wrong with them (left out)."""
    problems = []
    queue, name = queue.strip(), name.strip()
    if status and status not in {s.value for s in Status}:
        problems.append(f"unknown status {status!r}")
        status = ""
    if len(queue) > LONGEST or len(name) > LONGEST:
        problems.append(f"a queue or name is at most {LONGEST} characters")
        queue, name = queue[:LONGEST], name[:LONGEST]
    return Filters(queue, status, name), problems


@dataclass(frozen=True)
class TaskPage:
    """One page of the tasks list, newest first.

    ``older`` is the ``before`` of the next page (None: nothing older). ``searched`` is
    the lowest id a filtered page looked at when it ran out of window before filling
    up (None otherwise): the page then says so, and ``older`` continues the search.
    """

    #: LIST_COLUMNS and the error's first characters (a row of any width to the checker).
    rows: Sequence[sa.Row[*tuple[Any, ...]]]
    older: int | None
    searched: int | None
    before: int | None
    #: The database's time when the page was read (None: no task at all).
    now: datetime | None = None


def task_page(store: Store, filters: Filters, before: int | None, limit: int = PAGE) -> TaskPage:
    """The newest ``limit`` tasks matching ``filters`` whose id is below ``before``."""
    # Each a single index probe: MIN and MAX of the primary key, one per subquery.
    bounds = sa.select(sa.select(sa.func.min(c.id)).scalar_subquery(),
                       sa.select(sa.func.max(c.id)).scalar_subquery(),
                       store.dialect.now())  # fmt: skip
    # The end of each error (a traceback's last line is the exception), cut by the database.
    error = clipped(store.dialect, c.error, CELL_CHARS, "error", end=True)
    with store.db.unit(read_only=True) as conn:
        lowest, highest, now = conn.execute(bounds).one()
        now = as_utc(now)
        if highest is None:
            return TaskPage([], None, None, before, now)
        upper = highest + 1 if before is None else min(before, highest + 1)
        stmt = sa.select(*LIST_COLUMNS, *error).where(c.id < upper, *filters.terms())
        floor = None
        if filters.any:
            floor = upper - WINDOW
            stmt = stmt.where(c.id >= floor)
        stmt = stmt.order_by(c.id.desc()).limit(limit + 1)
        rows = conn.execute(stmt).all()
    if len(rows) > limit:
        return TaskPage(rows[:limit], rows[limit - 1].id, None, before, now)
    if floor is not None and floor > lowest:
        return TaskPage(rows, floor, floor, before, now)
    return TaskPage(rows, None, None, before, now)


@dataclass(frozen=True)
class Throughput:
    """Tasks finished per minute over the last hour, per queue: ``done[queue][i]`` and
    ``failed[queue][i]`` for the minute ending ``i`` minutes before ``now`` (the
    database's clock), i = 0 .. MINUTES - 1."""

    now: datetime
    done: dict[str, list[int]]
    failed: dict[str, list[int]]

    def queues(self) -> list[str]:
        """Every queue that finished a task in the hour, by name."""
        return sorted(set(self.done) | set(self.failed))

    def total(self, which: str) -> list[int]:
        """Per minute, the ``which`` (done or failed) counts of every queue summed."""
        series = self.done if which == Status.DONE.value else self.failed
        return [sum(counts[i] for counts in series.values()) for i in range(MINUTES)]


def throughput(store: Store) -> Throughput:
    """Per queue and minute of the last hour, how many tasks finished done and failed."""
    done: dict[str, list[int]] = {}
    failed: dict[str, list[int]] = {}
    with store.db.unit(read_only=True) as conn:
        now = as_utc(conn.execute(sa.select(store.dialect.now())).scalar_one())
        assert now is not None
        for queue, status, i, n in conn.execute(_throughput_statement(now)):
            series = done if status == Status.DONE.value else failed
            series.setdefault(queue, [0] * MINUTES)[int(i)] += n
    for queue in set(done) | set(failed):
        done.setdefault(queue, [0] * MINUTES)
        failed.setdefault(queue, [0] * MINUTES)
    return Throughput(now, done, failed)


def _throughput_statement(now: datetime) -> sa.Select[Any]:
    """Rows finished in the hour before ``now`` (the database's clock, read first) counted
    by queue, status and minute.

    The minutes' boundaries are bound as times, not computed by the database as now()
    minus an interval: PostgreSQL evaluated each of those expressions again for every row
    (6 per row, with the CASE's binary search), 115 ms for the 60,000 rows of an hour
    against 39 ms (benchmarks/dashboard_pages.py, 10M rows).
    """

    def minute(first: int, end: int) -> sa.ColumnElement[int]:
        """The minute (first <= i < end) of a row known to have ended in one of them: a
        binary search, so that each row is compared with 6 boundaries, not up to 60."""
        if end - first == 1:
            return sa.literal_column(str(first), sa.Integer)
        middle = (first + end) // 2
        newer = c.finished_at >= now - timedelta(minutes=middle)
        return sa.case((newer, minute(first, middle)), else_=minute(middle, end))

    ended = sa.or_(status_is(Status.DONE), status_is(Status.FAILED))
    # Grouped outside a subquery: PostgreSQL would not match a CASE of bound parameters in
    # GROUP BY with the one in the select list.
    finished = (
        sa.select(
            c.queue_id.label("queue"), c.status.label("status"), minute(0, MINUTES).label("minute")
        )
        .where(c.finished_at >= now - timedelta(minutes=MINUTES), ended)
        .subquery("finished")
    )
    f = finished.c
    return sa.select(f.queue, f.status, f.minute, sa.func.count()).group_by(
        f.queue, f.status, f.minute
    )


def busy_slots(store: Store) -> dict[str, int]:
    """How many tasks each worker id runs now (in_progress rows by locked_by)."""
    running = sa.and_(
        store.dialect.within("jobq_tasks_lease_expiry"), status_is(Status.IN_PROGRESS)
    )
    stmt = sa.select(c.locked_by, sa.func.count()).where(running).group_by(c.locked_by)
    with store.db.unit(read_only=True) as conn:
        return {worker or "": n for worker, n in conn.execute(stmt)}


def database_now(store: Store) -> datetime:
    """The database's clock, aware UTC: what pages measure ages against."""
    with store.db.unit(read_only=True) as conn:
        now = as_utc(conn.execute(sa.select(store.dialect.now())).scalar_one())
    assert now is not None
    return now


@dataclass(frozen=True)
class UpkeepLease:
    """The ``jobq upkeep`` lease: the worker doing the upkeep (its id, which names its
    host already), since when, and until when unrenewed; ``held`` while unexpired."""

    worker_id: str | None
    since: datetime | None
    expires: datetime | None
    held: bool


def upkeep_lease(store: Store) -> UpkeepLease | None:
    """The upkeep lease's row (jobq.upkeep), or None when no worker took it yet."""
    held = locks.c.expires_at >= store.dialect.now()
    stmt = sa.select(
        locks.c.owner, locks.c.acquired_at, locks.c.expires_at, sa.case((held, 1), else_=0)
    ).where(locks.c.name == UPKEEP_LOCK, locks.c.kind == Lease.kind)
    with store.db.unit(read_only=True) as conn:
        row = conn.execute(stmt).first()
    if row is None:
        return None
    owner, since, expires, unexpired = row
    return UpkeepLease(owner, as_utc(since), as_utc(expires), bool(unexpired))
