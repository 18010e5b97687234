"""Limits in SQL (``store.queue_limits``): define them, and enforce them inside capture.

Every capture statement leaves limited queues out (``queue_id NOT IN jobq_limits``), so
an unlimited queue's capture pays one anti-join with a small table and nothing more: no
extra statement, no lock. A limited queue is captured by its limiter. The sql limiter does
it in a transaction of its own that locks the queue's jobq_limits row first, so captures
of one limited queue run one at a time on every database, then counts what runs and
what started, and captures at most what is left.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobq.db.tasks import Leases, Status, Task
from jobq.db.validation import check_key
from jobq.dialects.schema import limit_starts, limits, status_is, tasks, waiting
from jobq.limits import FairShare, Limit, LimitedQueues, Rate, parse_rate
from jobq.limits.fair_capture import FairCapture

if TYPE_CHECKING:
    from jobq.core.store import TaskStore
    from jobq.limits import Limiter

c = tasks.c
lc = limits.c
sc = limit_starts.c

#: When jobq_limits was read, its limits, paused queues and fair queues (see Limits).
_Cached = tuple[float, dict[str, Limit], frozenset[str], dict[str, FairShare]]

#: Seconds a Store trusts its copy of jobq_limits before reading it again. A queue limited
#: meanwhile is already left out of every capture (the statement reads the table itself);
#: until then it is simply not captured by this Store.
LIMITS_REFRESH = 1.0


class Limits:
    """Per-queue limits (``store.queue_limits``): set, clear and read them; capture
    limited queues within them. What ``app.set_limit`` and `jobq limits` use.

    Made on a TaskStore (``store.capability(Limits)``), it is the store's capture filter
    (jobq.core.hooks.CaptureFilter): captures leave limited and paused queues to it.
    Limits are rows of jobq_limits, so every worker on every host obeys a change within
    a second, without a restart.

    Example:
        ```python
        import jobq

        store = jobq.Store()
        store.migrate()
        store.queue_limits.set_limit("smtp", concurrency=2, rate="30/1m")
        assert str(store.queue_limits.limits()["smtp"]) == "concurrency 2, rate 30/1m"
        assert store.queue_limits.limit_usage()["smtp"] == (0, 0)  # running, started
        assert store.queue_limits.clear_limit("smtp")
        ```
    """

    def __init__(self, store: TaskStore) -> None:
        self.store = store
        self.db = store.db
        self.dialect = store.dialect
        #: When jobq_limits was read, its limits (of paused queues too), the paused queues,
        #: and the fair queues' shares.
        self._limits_cache: _Cached | None = None
        #: The captures of fair queues (jobq.limits.fair_capture).
        self.fair_capture = FairCapture(store)
        #: Seconds the limits read may be relied on, when not LIMITS_REFRESH: an idle worker
        #: sets more for its looks (jobq.worker.pacing.IDLE_LIMITS_AGE).
        self.limits_max_age: float | None = None
        store.hooks.capture_filter = self

    def forget(self) -> None:
        """Read jobq_limits afresh at the next capture: a limit or a pause changed."""
        self._limits_cache = None

    # --- the capture filter (jobq.core.hooks) -----------------------------------------

    def filtered(self, names: Sequence[str] | None) -> Mapping[str, Any]:
        """The hook capture_filter's first part: limited_queues(names), and the fair queues
        among ``names`` that are neither limited nor paused (their FairShare)."""
        filtered: dict[str, Limit | FairShare] = dict(self.limited_queues(names))
        _, _, paused, fair = self._cached_limits()
        for name in fair if names is None else [name for name in names if name in fair]:
            if name not in paused and name not in filtered:
                filtered[name] = fair[name]
        return filtered

    def withheld(self, names: Sequence[str]) -> bool:
        """The hook capture_filter's second part: withheld_queues(names)."""
        return self.withheld_queues(names)

    def capture_filtered(
        self,
        filtered: Mapping[str, Any],
        limit: int,
        *,
        limiter: Limiter | None,
        worker_id: str,
        lease: float | Leases | None,
    ) -> list[Task]:
        """The hook capture_filter's capture: the ``filtered`` queues' tasks, at most
        ``limit``, as ``limiter`` allows (None: the database's own limits); then those of
        fair queues without a limit."""
        limited = {queue: got for queue, got in filtered.items() if isinstance(got, Limit)}
        captured = (
            (limiter or SQL_LIMITER).capture(self, limited, limit, worker_id=worker_id, lease=lease)
            if limited
            else []
        )
        for queue, got in filtered.items():
            if isinstance(got, FairShare) and len(captured) < limit:
                wanted = limit - len(captured)
                captured += self.capture_within_limit(
                    queue, wanted, worker_id=worker_id, lease=lease
                )
        return captured

    # --- definitions ---------------------------------------------------------------

    def set_limit(
        self, queue: str, *, concurrency: int | None = None, rate: str | Rate | None = None
    ) -> Limit:
        """Limit ``queue`` to ``concurrency`` tasks at once and/or ``rate`` starts per period.

        Replaces the queue's previous limit; running tasks are never stopped, so lowering
        a limit takes effect as they end.

        Args:
            queue: the queue's name.
            concurrency: the most tasks of ``queue`` running at once (1 or more).
            rate: the most starts in any window of a period: a jobq.limits.Rate or text
                such as ``"10/2s"``, ``"100/1m"``, ``"5/s"``.

        Returns:
            The Limit stored (``str(limit)``: ``"concurrency 2, rate 30/1m"``).

        Raises:
            InvalidOption: an empty queue name; neither ``concurrency`` nor ``rate``; a
                count below 1; a rate that does not parse.
        """
        check_key("queue", queue, required=True)
        parsed = Limit(
            queue, concurrency, None if rate is None else parse_rate(rate),
            generation=secrets.randbits(62) + 1,
        )  # fmt: skip
        values = {
            "concurrency": parsed.concurrency,
            "rate_count": parsed.rate.count if parsed.rate else None,
            "rate_period": parsed.rate.period if parsed.rate else None,
            "generation": parsed.generation,
            "updated_at": self.dialect.now(),
        }
        upsert = self.dialect.upsert_statement(limits, lc.queue, {"queue": queue, **values})

        def upsert_and_wake(conn: Connection) -> None:
            conn.execute(upsert)
            self.dialect.wake_for_limits(conn, queue)

        self.db.write(upsert_and_wake, atomic=True)
        self._limits_cache = None
        return parsed

    def clear_limit(self, queue: str) -> bool:
        """Remove ``queue``'s limit (it becomes unlimited; a pause stays); False if it had
        none. InvalidOption for an empty queue name."""
        check_key("queue", queue, required=True)

        def clear(conn: Connection) -> int:
            ours = sa.and_(lc.queue == queue, _has_limit())
            alone = sa.not_(sa.or_(lc.paused, lc.fair))
            cleared = conn.execute(sa.delete(limits).where(ours, alone)).rowcount
            if not cleared:  # a paused or fair queue keeps its row, for the pause or fairness
                cleared = conn.execute(
                    sa.update(limits)
                    .where(ours, lc.paused)
                    .values(
                        concurrency=None,
                        rate_count=None,
                        rate_period=None,
                        generation=secrets.randbits(62) + 1,
                        updated_at=self.dialect.now(),
                    )
                ).rowcount
            conn.execute(sa.delete(limit_starts).where(sc.queue == queue))
            self.dialect.wake_for_limits(conn, queue)
            return cleared

        cleared = self.db.write(clear, atomic=True)
        self._limits_cache = None
        return bool(cleared)

    def limits(self) -> dict[str, Limit]:
        """Every queue's limit, by queue name (a paused queue's too, if it has one)."""
        return self._limit_rows()[0]

    def _limit_rows(
        self, connection: Connection | None = None
    ) -> tuple[dict[str, Limit], frozenset[str], dict[str, FairShare]]:
        """jobq_limits as read now (on ``connection``, in its transaction, if given): the
        limits by queue, the paused queues, the fair ones."""
        stmt = sa.select(limits).order_by(lc.queue)
        if connection is not None:
            rows = connection.execute(stmt).all()
        else:
            with self.db.unit(read_only=True) as conn:
                rows = conn.execute(stmt).all()
        found = {row.queue: _limit_of(row) for row in rows if _limited(row)}
        fair = {row.queue: share_of(row) for row in rows if row.fair}
        return found, frozenset(row.queue for row in rows if row.paused), fair

    def limit_usage(self) -> dict[str, tuple[int, int]]:
        """For each limited (or paused) queue: (tasks running now, starts within its rate
        period; 0 without a rate), as `jobq limits show` shows them."""
        now = self.dialect.now()
        running = (
            sa.select(sa.func.count())
            .where(
                self.dialect.within("jobq_tasks_lease_expiry"),
                c.queue_id == lc.queue,
                _running(now),
            )
            .scalar_subquery()
        )
        started = (
            sa.select(sa.func.count())
            .where(sc.queue == lc.queue, sc.started_at > self.dialect.now_plus(-lc.rate_period))
            .scalar_subquery()
        )
        stmt = sa.select(lc.queue, running, sa.case((lc.rate_count.is_(None), 0), else_=started))
        with self.db.unit(read_only=True) as conn:
            return {queue: (run, start) for queue, run, start in conn.execute(stmt)}

    def limited_queues(self, names: Sequence[str] | None = None) -> dict[str, Limit]:
        """The limits of ``names`` (None: every queue) that are not paused: what limiters
        capture from, as read at most LIMITS_REFRESH s ago."""
        _, found, paused, _ = self._cached_limits()
        wanted = found if names is None else [name for name in names if name in found]
        return {name: found[name] for name in wanted if name not in paused}

    def withheld_queues(self, names: Sequence[str]) -> bool:
        """Whether every queue of ``names`` is limited or paused (as read at most
        LIMITS_REFRESH s ago): then no capture of unlimited queues can take anything."""
        _, found, paused, fair = self._cached_limits()
        return all(name in found or name in paused or name in fair for name in names)

    def fair_shares(self, connection: Connection | None = None) -> dict[str, FairShare]:
        """The fair queues' shares, as read at most LIMITS_REFRESH s ago (if read now, on
        ``connection``: an enqueue's, in its caller's transaction)."""
        return self._cached_limits(connection)[3]

    def stale(self) -> bool:
        """Whether the next read of this Store's copy of jobq_limits reads the table."""
        cached = self._limits_cache
        max_age = self.limits_max_age or LIMITS_REFRESH
        return cached is None or time.monotonic() - cached[0] > max_age

    def _cached_limits(self, connection: Connection | None = None) -> _Cached:
        cached = self._limits_cache
        if cached is None or self.stale():
            cached = self._limits_cache = (time.monotonic(), *self._limit_rows(connection))
        return cached

    def limited_waiting(self, names: Sequence[str] | None = None) -> bool:
        """Whether a limited queue among ``names`` (None: any) has a task due but held back."""
        limited = self.limited_queues(names)
        if not limited:
            return False
        stmt = (
            sa.select(c.id)
            .where(
                self.dialect.within("jobq_tasks_capture"),
                c.queue_id.in_(list(limited)),
                waiting(c),
                c.run_at <= self.dialect.now(),
            )
            .limit(1)
        )
        with self.db.unit(read_only=True) as conn:
            return conn.execute(stmt).first() is not None

    # --- capture ---------------------------------------------------------------------

    def capture_within_limit(
        self, queue: str, wanted: int, *, worker_id: str, lease: float | Leases | None
    ) -> list[Task]:
        """Capture at most ``wanted`` tasks of ``queue`` that its stored limit allows now.

        One transaction, holding the queue's jobq_limits row locked: no concurrent capture
        of the queue can see the same free room. Nothing if the limit was cleared meanwhile
        (the queue is then captured as an unlimited one) or the queue paused.
        """

        def capture(conn: Connection) -> list[Task]:
            row = self._locked_row(conn, queue)
            if row is None or row.paused or not (_limited(row) or row.fair):
                return []
            if not _limited(row):  # a fair queue without a limit
                return self._take(conn, row, wanted, worker_id, lease)
            limit = _limit_of(row)
            # The time after the lock was granted: a transaction's now() on PostgreSQL is
            # when it began, which may be long before, while it waited for the lock.
            clock = self.dialect.clock()
            room = wanted
            if limit.concurrency is not None:
                running = conn.execute(
                    sa.select(sa.func.count()).where(
                        self.dialect.within("jobq_tasks_lease_expiry"),
                        c.queue_id == queue,
                        _running(clock),
                    )
                ).scalar_one()
                room = min(room, limit.concurrency - running)
            if limit.rate is not None and room > 0:
                room = min(room, self._rate_room(conn, queue, limit.rate, clock))
            if room <= 0:
                return []
            captured = self._take(conn, row, room, worker_id, lease)
            if limit.rate is not None and captured:
                # One start per captured row, at its start time (the clock, after the lock).
                starts = sa.select(sa.literal(queue, sa.String), c.started_at).where(
                    c.id.in_([task.id for task in captured])
                )
                conn.execute(sa.insert(limit_starts).from_select(["queue", "started_at"], starts))
            return captured

        return self.db.write(capture, atomic=True)

    def _locked_row(self, conn: Connection, queue: str) -> Any:
        """``queue``'s jobq_limits row, locked until the transaction ends (None: no row);
        prepared SQL, for every capture of a limited or fair queue starts with it."""
        found = self.dialect.run_prepared(conn, "limits row locked", _row_locked, {"queue": queue})
        return found.first()

    def _rate_room(self, conn: Connection, queue: str, rate: Rate, clock: Any) -> int:
        """How many more starts ``rate`` allows now; forgets the starts it no longer counts."""
        window_start = self.dialect.clock_plus(-rate.period)
        conn.execute(
            sa.delete(limit_starts).where(sc.queue == queue, sc.started_at <= window_start)
        )
        started = conn.execute(
            sa.select(sa.func.count()).where(sc.queue == queue, sc.started_at > window_start)
        ).scalar_one()
        return rate.count - started

    def capture_from_limited_queue(
        self, queue: str, wanted: int, *, worker_id: str, lease: float | Leases | None
    ) -> list[Task]:
        """Capture at most ``wanted`` tasks of ``queue`` whether or not it is limited.

        For a limiter that enforces the limit elsewhere and has granted ``wanted`` runs.
        Nothing from a paused queue, however recently paused. A fair queue's are captured
        key by key, its jobq_limits row locked.
        """
        if queue not in self.fair_shares():
            return self.store.capturer.take(
                None, wanted, [queue], worker_id, lease, unlimited_only=False
            )

        def capture(conn: Connection) -> list[Task]:
            row = self._locked_row(conn, queue)
            if row is None or row.paused:
                return []
            return self._take(conn, row, wanted, worker_id, lease)

        return self.db.write(capture, atomic=True)

    def _take(
        self, conn: Connection, row: Any, room: int, worker_id: str, lease: float | Leases | None
    ) -> list[Task]:
        """Capture at most ``room`` tasks of ``row``'s queue in ``conn``'s transaction, which
        holds the row locked: visiting its keys in turn if the queue is fair."""
        if row.fair:
            cursor = (row.fair_cursor, row.fair_cursor_taken)
            return self.fair_capture.take(conn, share_of(row), room, cursor, worker_id, lease)
        return self.store.capturer.take(
            conn, room, [row.queue], worker_id, lease, unlimited_only=False
        )


class SqlLimiter:
    """The default limiter: limits enforced by the database inside each capture."""

    def capture(
        self,
        store: LimitedQueues,
        limited: Mapping[str, Limit],
        wanted: int,
        *,
        worker_id: str,
        lease: float | Leases | None,
    ) -> list[Task]:
        """Capture from each limited queue in turn, as much as its limit leaves room for."""
        captured: list[Task] = []
        for queue in limited:
            if len(captured) >= wanted:
                break
            captured += store.capture_within_limit(
                queue, wanted - len(captured), worker_id=worker_id, lease=lease
            )
        return captured

    def release(self, fences: Iterable[tuple[int, int]]) -> None:
        """Nothing to free: a run's row is its slot."""

    def renew(self, runs: Iterable[tuple[tuple[int, int], float]]) -> None:
        """Nothing to renew: a run's lease is its slot's."""

    def close(self) -> None:
        """Nothing to close."""


#: The limiter a Store uses when not given one.
SQL_LIMITER: Limiter = SqlLimiter()


def _running(now: Any) -> sa.ColumnElement[bool]:
    """Runs holding a slot: in progress with a lease not yet expired."""
    return sa.and_(status_is(Status.IN_PROGRESS), c.locked_until >= now)


def _has_limit() -> sa.ColumnElement[bool]:
    """Rows of jobq_limits that limit their queue (a paused queue's may only pause it)."""
    return sa.or_(lc.concurrency.is_not(None), lc.rate_count.is_not(None))


def _row_locked() -> sa.Select[Any]:
    return sa.select(limits).where(lc.queue == sa.bindparam("queue")).with_for_update()


def _limited(row: Any) -> bool:
    return row.concurrency is not None or row.rate_count is not None


def share_of(row: Any) -> FairShare:
    """The FairShare of a fair queue's jobq_limits row."""
    return FairShare(row.queue, row.default_weight or 1, row.max_running_per_key)


def _limit_of(row: Any) -> Limit:
    rate = None if row.rate_count is None else Rate(row.rate_count, float(row.rate_period))
    return Limit(row.queue, row.concurrency, rate, generation=row.generation)
