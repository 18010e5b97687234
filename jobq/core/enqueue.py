"""Enqueuer: adding tasks, one or in bulk, inside the caller's transaction if it asks.

A part of Store (mixed in); it runs on the Store's database.
"""

from __future__ import annotations

import logging
import sys
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobq.core import tracing
from jobq.core.enqueue_keys import fair_key_of, with_fair_settings
from jobq.core.enqueue_wait import seconds_to_wait, waiting
from jobq.core.hooks import Hooks
from jobq.db.errors import InvalidOption, JobqError, PayloadTooLarge, first_line
from jobq.db.payload import check_args, encode_args
from jobq.db.prepared import Prepared
from jobq.db.tasks import as_utc
from jobq.db.validation import INT32, check_datetime, check_int, check_key, check_seconds
from jobq.dialects.base import Dialect
from jobq.dialects.row_values import optional_columns
from jobq.engine.database import Database

log = logging.getLogger("jobq.enqueue")

# enqueue_many sends at most this many rows per statement.
_BATCH = 5000
# Bytes a row of a bulk insert takes besides its arguments and names, at most.
_ROW_BYTES = 512


@dataclass
class _Load:
    """Tasks counted towards a bulk load, and the count at which statistics are refreshed next."""

    rows: int
    refresh_at: int
    #: time.monotonic() when tasks were last counted.
    last: float


# Per caller's transaction, and per Database for what a Store enqueued on its own; weakly:
# a transaction that ended takes its count with it.
_LOADS: weakref.WeakKeyDictionary[Any, _Load] = weakref.WeakKeyDictionary()
# Seconds without a bulk enqueue after which a Store's own next one begins a new load.
_LOAD_GAP = 60.0


class Enqueuer:
    """enqueue and enqueue_many."""

    def __init__(
        self, db: Database, dialect: Dialect, wait: float | None = None, hooks: Hooks | None = None
    ) -> None:
        self.db = db
        self.dialect = dialect
        self._wait = seconds_to_wait(wait)
        self.hooks = hooks or Hooks()

    @property
    def wait(self) -> float:
        """Seconds an enqueue of its own waits for an unreachable database (see
        jobq.core.enqueue_wait); 0: refused at once."""
        return self._wait

    @wait.setter
    def wait(self, seconds: float) -> None:
        self._wait = seconds_to_wait(seconds)

    def waiting(self, connection: Connection | None) -> AbstractContextManager[None]:
        """The block an enqueue writes in (a workflow's, `jobq enqueue --file`'s): waiting
        up to ``wait`` seconds for the database, unless in the caller's ``connection``
        (jobq.core.enqueue_wait.waiting)."""
        return waiting(self._wait, connection)

    def enqueue(
        self,
        name: str,
        args: Mapping[str, Any] | None = None,
        *,
        queue: str = "default",
        priority: int = 0,
        run_at: datetime | None = None,
        delay: float | None = None,
        retries: int = 3,
        timeout: float | None = None,
        lease: float | None = None,
        unique_key: str | None = None,
        lock_key: str | None = None,
        fair_key: str | None = None,
        connection: Connection | None = None,
    ) -> int:
        """Add one task and return its id; with ``unique_key``, the id of the task holding it.

        The low-level call under App.enqueue: no registry, no signature check (the
        arguments are only checked for JSON). Given ``connection``, the row is written in
        the caller's transaction and commits or rolls back with it, and counts towards a
        bulk load in it (see enqueue_many).

        Args:
            name: the task's name, as the worker's app registers it.
            args: its keyword arguments: a mapping of JSON values.
            queue: the queue it waits in.
            priority: higher runs first (a 32-bit int).
            run_at: when it may run first (naive: UTC); or ``delay``, seconds from now on
                the database's clock. Not both.
            retries: how many failures it may retry after.
            timeout: seconds a run may take (None: the worker's definition says).
            lease: seconds a worker holds a run unrenewed (None: as the worker's
                definition says).
            unique_key: at most one pending (waiting or running) task per key.
            lock_key: no two runs of one key at once.
            fair_key: the key a fair queue shares its captures by (jobq.limits.fair).
            connection: a SQLAlchemy connection whose transaction the row is written in.

        Raises:
            InvalidTaskArguments: ``args`` is not a mapping of JSON values.
            PayloadTooLarge: the arguments take more than the database takes in one
                statement.
            InvalidOption: an empty name or queue, a negative delay or retries count,
                ``run_at`` with ``delay``...
        """
        checked = check_args(name, args)
        timing, params = self._new_row(
            name, queue, priority, run_at, delay, retries, timeout, lease, unique_key, lock_key
        )
        params["new_args"] = checked
        check_key("fair_key", fair_key)
        with waiting(self._wait, connection):
            room = self.db.room()
            text = encode_args(name, checked, room)
            if not room.fits(text):
                what = f"The arguments of task {name!r}"
                raise PayloadTooLarge(what=what, size=room.size(text), why=room.why)

            def write(conn: Connection | None) -> int:
                wake = fair_key_of(self.hooks, params, queue, fair_key, conn)
                if tracing.MODULE in sys.modules:  # the application traces (jobq[otel])
                    with tracing.enqueue_span(name, queue) as span:
                        task_id = self._insert(
                            timing, params, unique_key, conn, span.trace_context, wake
                        )
                        span.enqueued([task_id])
                        return task_id
                return self._insert(timing, params, unique_key, conn, None, wake)

            return with_fair_settings(self.hooks, connection, write)

    def _insert(
        self,
        timing: str,
        params: dict[str, Any],
        unique_key: str | None,
        connection: Connection | None,
        trace_context: dict[str, str] | None,
        wake: Callable[[Connection], None] | None,
    ) -> int:
        """Write the row of enqueue() and return its id; with ``unique_key``, the holder's;
        ``wake``, in the same transaction (a fair queue's key)."""
        if trace_context is not None:
            params["new_trace_context"] = trace_context
        extra = optional_columns(params)
        insert = self.db.prepare(
            ("insert", timing, extra), lambda: self.dialect.insert_statement(timing, extra)
        )
        if unique_key is None and wake is None:
            task_id = self.db.insert(insert, params, connection=connection)[0]
            if connection is not None:
                self.loaded(connection, 1)
            return task_id

        def insert_or_find(conn: Connection) -> int:
            if unique_key is None:
                task_id = self.db.insert(insert, params, connection=conn)[0]
            else:
                task_id = self._insert_unique(conn, timing, params, extra, unique_key)
            if wake is not None:
                wake(conn)
            return task_id

        task_id = self.db.write(insert_or_find, connection, atomic=wake is not None)
        if connection is not None:
            self.loaded(connection, 1)
        return task_id

    def _insert_unique(
        self,
        conn: Connection,
        timing: str,
        params: dict[str, Any],
        extra: tuple[str, ...],
        unique_key: str,
    ) -> int:
        """Insert the row unless a row holds ``unique_key``; the new row's id or the holder's."""
        # Repeated in case the holder finishes between the insert and the look-up.
        for _ in range(100):
            task_id = self.dialect.insert_unique(conn, timing, params, extra)
            if task_id is None:
                task_id = self.dialect.holder_of(conn, unique_key)
            if task_id is not None:
                return task_id
        raise RuntimeError(f"unique_key {unique_key!r} kept changing hands; try again")

    def enqueue_many(
        self,
        name: str,
        args_list: Iterable[Mapping[str, Any] | None],
        *,
        queue: str = "default",
        priority: int = 0,
        run_at: datetime | None = None,
        delay: float | None = None,
        retries: int = 3,
        timeout: float | None = None,
        lease: float | None = None,
        unique_key: str | None = None,
        lock_key: str | None = None,
        fair_key: str | None = None,
        connection: Connection | None = None,
    ) -> list[int]:
        """Add one task per entry of ``args_list`` sharing the options; their ids, in order.

        The options and errors are enqueue()'s; every entry is checked before any row is
        written. Rows travel in one statement per batch of 5,000, in one transaction
        (or the caller's ``connection``). With ``unique_key``, all entries
        name the same task, so every id returned is that one task's.

        A bulk load also refreshes the database's statistics of the tasks table where its
        planner needs them (PostgreSQL), so that capture is planned for the tasks that wait
        and not for an empty table: once a caller's transaction has enqueued 10,000 tasks,
        in calls of either method given the same ``connection`` (as `jobq enqueue --file`
        does), in that transaction; once calls of this method without one have enqueued
        10,000 through this Store (with no pause of a minute or more), after them. Again
        each time the count has grown tenfold.
        """
        args_list = list(args_list)
        row_bytes = _ROW_BYTES + 2 * sum(len(str(v)) for v in (name, queue, lock_key))
        options = dict(
            queue=queue, priority=priority, run_at=run_at, delay=delay, retries=retries,
            timeout=timeout, lease=lease, lock_key=lock_key, fair_key=fair_key,
            connection=connection,
        )  # fmt: skip
        with waiting(self._wait, connection):
            batches = [
                batch
                for start in range(0, len(args_list), _BATCH)
                for batch in self._fitting(
                    name, args_list[start : start + _BATCH], start, row_bytes
                )
            ]
            if not args_list:
                return []
            if unique_key is not None:
                task_id = self.enqueue(name, args_list[0], unique_key=unique_key, **options)  # type: ignore[arg-type]
                return [task_id] * len(args_list)
            timing, params = self._new_row(
                name, queue, priority, run_at, delay, retries, timeout, lease, None, lock_key
            )

            def write(conn: Connection | None) -> list[int]:
                wake = fair_key_of(self.hooks, params, queue, fair_key, conn)
                if tracing.MODULE in sys.modules:  # the application traces (jobq[otel])
                    with tracing.enqueue_span(name, queue) as span:
                        ids = self._insert_many(
                            timing, params, batches, conn, span.trace_context, wake
                        )
                        span.enqueued(ids)
                        return ids
                return self._insert_many(timing, params, batches, conn, None, wake)

            ids = with_fair_settings(self.hooks, connection, write)
        self.loaded(connection, len(ids))  # after the block: not part of the enqueue
        return ids

    def _insert_many(
        self,
        timing: str,
        params: dict[str, Any],
        batches: list[Any],
        connection: Connection | None,
        trace_context: dict[str, str] | None,
        wake: Callable[[Connection], None] | None,
    ) -> list[int]:
        """Write the rows of enqueue_many(), one statement per batch, and ``wake`` (a fair
        queue's key) in the same transaction; their ids, in order."""
        if trace_context is not None:
            params["new_trace_context"] = trace_context
        extra = optional_columns(params)
        insert = self.db.prepare(
            ("insert many", timing, extra),
            lambda: self.dialect.insert_many_statement(timing, extra),
        )
        if len(batches) == 1 and connection is None and wake is None:
            return self._insert_batch(insert, params, batches[0])

        def write(conn: Connection) -> list[int]:
            ids = [
                task_id
                for batch in batches
                for task_id in self._insert_batch(insert, params, batch, conn)
            ]
            if wake is not None:
                wake(conn)
            return ids

        return self.db.write(write, connection, atomic=True)

    def loaded(self, connection: Connection | None, rows: int) -> None:
        """Count ``rows`` tasks just enqueued, in the caller's transaction (``connection``)
        or by this Store in bulk on its own (committed; a pause of _LOAD_GAP seconds starts
        that count again). Once either count reaches the dialect's bulk_load_rows, and
        again each time it has grown tenfold since, refresh the planner's statistics of
        the tasks table: in that transaction, whose rows they then include, or on their own.

        The first refresh already shows the planner that tasks wait; the later ones keep
        the statistics in step with a load that goes on growing, at a cost that stays a
        small part of the load's (each samples at most the same number of rows).
        """
        first = self.dialect.bulk_load_rows
        key = self.db if connection is None else connection.get_transaction()
        if first is None or key is None:
            return
        now = time.monotonic()
        load = _LOADS.get(key)
        if load is None or (connection is None and now - load.last > _LOAD_GAP):
            load = _LOADS[key] = _Load(0, first, now)
        load.rows += rows
        load.last = now
        if load.rows < load.refresh_at:
            return
        load.refresh_at = load.rows * 10
        # Only a help to the planner: the tasks are enqueued whether or not it works.
        try:
            if connection is None:
                self.db.write(self.dialect.refresh_statistics)
            else:
                with connection.begin_nested():  # a failure must not abort the caller's work
                    self.dialect.refresh_statistics(connection)
        except (sa.exc.DBAPIError, JobqError) as error:
            log.warning(
                "could not refresh the statistics of the tasks table: %s", first_line(error)
            )

    def _fitting(self, name: str, args_list: list[Any], offset: int, row_bytes: int) -> list[Any]:
        """``args_list`` encoded in as few batches as the database takes in one statement;
        PayloadTooLarge for one entry (at ``offset`` in the caller's list) too large alone."""
        room = self.db.room()
        batch = self.dialect.encode_batch(name, args_list, room, offset)
        size = self.dialect.batch_bytes(batch, room, row_bytes)
        if size <= room.limit:
            return [batch]
        if len(args_list) == 1:
            what = f"The arguments of task {name!r} (entry {offset} of the list)"
            raise PayloadTooLarge(what=what, size=size, why=room.why)
        half = len(args_list) // 2
        return self._fitting(name, args_list[:half], offset, row_bytes) + self._fitting(
            name, args_list[half:], offset + half, row_bytes
        )

    def _insert_batch(
        self,
        insert: Prepared,
        params: dict[str, Any],
        batch: Any,
        connection: Connection | None = None,
    ) -> list[int]:
        prepared, values = self.dialect.bind_batch(insert, params, batch)
        # Ids are assigned in argument order, so sorting them restores it.
        return sorted(self.db.insert(prepared, values, connection=connection))

    def _new_row(
        self,
        name: str,
        queue: str,
        priority: int,
        run_at: datetime | None,
        delay: float | None,
        retries: int,
        timeout: float | None,
        lease: float | None,
        unique_key: str | None,
        lock_key: str | None,
    ) -> tuple[str, dict[str, Any]]:
        """Validate a new task's options: its run_at timing and its ``new_*`` parameters.

        The timing is 'at' (``new_run_at``), 'delay' (``new_delay`` seconds from the
        database's now) or 'now'; see Dialect.new_row_values.
        """
        check_key("name", name, required=True)
        check_key("queue", queue, required=True)
        check_key("unique_key", unique_key)
        check_key("lock_key", lock_key)
        check_int("priority", priority, minimum=INT32[0], maximum=INT32[1])
        check_int("retries", retries, minimum=0, maximum=INT32[1])
        if lease is not None:
            check_seconds("lease", lease, positive=True)
        if timeout is not None:
            check_seconds("timeout", timeout, positive=True)
        params: dict[str, Any] = {
            "new_name": name,
            "new_queue_id": queue,
            "new_priority": priority,
            "new_retries_left": retries,
            "new_lease": None if lease is None else float(lease),
            "new_timeout": None if timeout is None else float(timeout),
            "new_unique_key": unique_key,
            "new_lock_key": lock_key,
        }
        if run_at is not None and delay is not None:
            raise InvalidOption(option="run_at", reason="give run_at or delay, not both")
        if run_at is not None:
            check_datetime("run_at", run_at)
            params["new_run_at"] = as_utc(run_at)
            return "at", params
        if delay is not None:
            check_seconds("delay", delay)
            params["new_delay"] = float(delay)
            return "delay", params
        return "now", params
