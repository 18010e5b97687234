"""The statements of a fair queue's capture (jobq.limits.fair); a part of Dialect.

A fair queue's capture reads the keys it visits from jobq_fair_keys, in key order, then each
key's next rows along jobq_tasks_fair, in capture order, locking them, captures those ids and
writes where it stopped in the queue's jobq_limits row.
The portable statements are here; a dialect changes how the keys' rows are read (fair_rows:
PostgreSQL joins LATERAL, MariaDB and MySQL walk them with a recursive CTE, SQLite takes a
UNION ALL of a subquery per key) and how a list of ids is captured (capture_ids).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobq.db.prepared import Prepared
from jobq.db.tasks import Status
from jobq.dialects.fair_deal import Dealt, FairKey, FairPage, deal_order, stop_of
from jobq.dialects.leases import lease_of
from jobq.dialects.schema import (
    FAIR_INDEX,
    FAIR_RUNNING_INDEX,
    fair_keys,
    limits,
    status_is,
    tasks,
    waiting,
)
from jobq.dialects.upserts import UpsertKey

c = tasks.c
k = fair_keys.c

#: What a capture reads of a key: its name, weight (None: the queue's) and version.
KEY_COLUMNS = (k.fair_key, k.weight, k.version)


def picked_ids(ids: Sequence[int]) -> tuple[int, dict[str, int]]:
    """``ids`` as the parameters of an IN list of a few fixed widths (picked_params), padded
    with the last id: a handful of statement shapes for any number of ids."""
    width = 1 << (len(ids) - 1).bit_length()
    return width, {f"picked_{i}": ids[min(i, len(ids) - 1)] for i in range(width)}


def picked_params(width: int) -> list[sa.BindParameter[int]]:
    """The parameters ``picked_0``... of an IN list of ``width`` ids."""
    return [sa.bindparam(f"picked_{i}", type_=sa.BigInteger) for i in range(width)]


def _param(name: str, type_: Any = sa.String) -> sa.BindParameter[Any]:
    return sa.bindparam(name, type_=type_)


class FairStatements:
    """The statements of a fair queue's capture (see the module's docstring)."""

    # Provided by Dialect.
    def memo(self, key: Any, build: Any) -> Any:
        raise NotImplementedError

    def within(self, index: str, columns: Any = c) -> sa.ColumnElement[bool]:
        raise NotImplementedError

    def capturable_waiting(self, now: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
        raise NotImplementedError

    def capturable_expired(self, now: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
        raise NotImplementedError

    def now(self) -> sa.ColumnElement[Any]:
        raise NotImplementedError

    def clock(self) -> sa.ColumnElement[Any]:
        raise NotImplementedError

    def capture_values(
        self, *, named_leases: int | None, now: sa.ColumnElement[Any]
    ) -> dict[str, Any]:
        raise NotImplementedError

    def json_records(
        self, array: sa.BindParameter[str], fields: Sequence[tuple[str, Any]]
    ) -> sa.FromClause:
        raise NotImplementedError

    def clock_plus(self, seconds: sa.ColumnElement[Any] | float) -> sa.ColumnElement[Any]:
        raise NotImplementedError

    def upsert_statement(
        self,
        table: sa.Table,
        key: UpsertKey,
        values: dict[str, Any],
        update: dict[str, Any] | None = None,
        where: sa.ColumnElement[bool] | None = None,
    ) -> sa.Insert:
        raise NotImplementedError

    # --- the keys ---------------------------------------------------------------------

    def fair_keys_between(self, lower: bool | None, upper: bool | None) -> sa.Select[Any]:
        """The keys of ``f_queue`` not idle, in key order, at most ``limit``: those after key
        ``lower_key`` (``lower``: the key itself too; None: from the first key) and before
        ``upper_key`` (``upper``: the key itself too; None: to the last). The database
        compares the keys, in the order of the primary key."""

        def build() -> sa.Select[Any]:
            stmt = sa.select(*KEY_COLUMNS).where(k.queue == _param("f_queue"), k.idle == sa.false())
            if lower is not None:
                low = _param("lower_key")
                stmt = stmt.where(k.fair_key >= low if lower else k.fair_key > low)
            if upper is not None:
                high = _param("upper_key")
                stmt = stmt.where(k.fair_key <= high if upper else k.fair_key < high)
            return stmt.order_by(k.fair_key).limit(_param("limit", sa.Integer))

        return self.memo(("fair keys between", lower, upper), build)

    def read_fair_keys(
        self, conn: Connection, lower: bool | None, upper: bool | None, params: dict[str, Any]
    ) -> list[FairKey]:
        """The keys fair_keys_between(lower, upper) reads with ``params`` (and
        ``default_weight``, the weight of a key without one of its own)."""
        rows = conn.execute(self.fair_keys_between(lower, upper), params).all()
        weight = params["default_weight"]
        return [FairKey(name, w or weight, version) for name, w, version in rows]

    def write_fair_cursor(self, conn: Connection, queue: str, cursor: tuple[str, int]) -> None:
        """Fair queue ``queue``'s captures stopped at ``cursor`` (set_fair_cursor)."""
        values = {"f_queue": queue, "cursor": cursor[0], "taken": cursor[1]}
        conn.execute(self.set_fair_cursor(), values)

    def set_fair_cursor(self) -> sa.Update:
        """Where the last capture of fair queue ``f_queue`` stopped: key ``cursor``, and
        ``taken`` rows of a visit it cut short (0: the visit ended)."""
        return self.memo(
            "fair set cursor",
            lambda: (
                sa.update(limits)
                .where(limits.c.queue == _param("f_queue"))
                .values(fair_cursor=_param("cursor"), fair_cursor_taken=_param("taken", sa.Integer))
            ),
        )

    def running_by_key(self, count: int) -> sa.Select[Any]:
        """(key, runs) of the ``count`` keys ``key_0``... of ``f_queue`` that have runs (in
        progress, whether or not their lease holds: what counts against a key's cap)."""

        def build() -> sa.Select[Any]:
            keys = [_param(f"key_{i}") for i in range(count)]
            return (
                sa.select(c.fair_key, sa.func.count())
                .where(
                    self.within(FAIR_RUNNING_INDEX),
                    c.queue_id == _param("f_queue"),
                    c.fair_key.in_(keys),
                    c.fair_key.is_not(None),
                    status_is(Status.IN_PROGRESS),
                )
                .group_by(c.fair_key)
            )

        return self.memo(("fair running by key", count), build)

    def wake_fair_key(self) -> sa.Insert:
        """Make key ``f_key`` of ``f_queue`` wait for captures to visit it, in the transaction
        of the enqueue that gives it a row: its row made if new, woken if idle, and its
        version moved on either way."""

        def build() -> sa.Insert:
            values = {"queue": _param("f_queue"), "fair_key": _param("f_key")}
            # No bound parameter past VALUES: PyMySQL's executemany would not fill it in.
            update = {
                "idle": sa.false(),
                "version": k.version + sa.literal_column("1", sa.BigInteger),
            }
            return self.upsert_statement(fair_keys, [k.queue, k.fair_key], values, update)

        return self.memo("fair wake key", build)

    def idle_fair_key(self) -> sa.Update:
        """Idle key ``f_key`` of ``f_queue`` if it is still at ``f_version`` and nothing of it
        waits or runs: an enqueue racing this statement either committed its row before it
        (then seen) or moves the version on (then the key is left as it is)."""

        def build() -> sa.Update:
            queue, key = _param("f_queue"), _param("f_key")
            of_key = (c.queue_id == queue, c.fair_key == key, c.fair_key.is_not(None))
            waits = sa.exists().where(self.within(FAIR_INDEX), *of_key, waiting(c))
            runs = sa.exists().where(
                self.within(FAIR_RUNNING_INDEX), *of_key, status_is(Status.IN_PROGRESS)
            )
            return (
                sa.update(fair_keys)
                .where(
                    k.queue == queue,
                    k.fair_key == key,
                    k.version == _param("f_version", sa.BigInteger),
                    sa.not_(waits),
                    sa.not_(runs),
                )
                .values(idle=True)
            )

        return self.memo("fair idle key", build)

    # --- the rows -------------------------------------------------------------------

    def capturable_of_key(self, fair_key: Any) -> sa.ColumnElement[bool]:
        """Rows of ``f_queue`` of key ``fair_key`` (a parameter or a column) that a capture
        may take now, along jobq_tasks_fair: what every dialect's fair_rows reads."""
        return sa.and_(
            self.within(FAIR_INDEX),
            c.queue_id == _param("f_queue"),
            c.fair_key == fair_key,
            c.fair_key.is_not(None),
            self.capturable_waiting(self.now()),
        )

    def fair_key_rows(self, position: int) -> sa.Select[Any]:
        """The next capturable rows of key ``key_<position>`` of ``f_queue``, in capture
        order, at most ``want_<position>``: (position, id)."""
        return (
            sa.select(sa.literal(position, sa.Integer).label("position"), c.id)
            .where(self.capturable_of_key(_param(f"key_{position}")))
            .order_by(c.priority.desc(), c.run_at, c.id)
            .limit(_param(f"want_{position}", sa.Integer))
        )

    def fair_rows(
        self, conn: Connection, keys: Sequence[str], wants: Sequence[int], queue: str
    ) -> list[tuple[int, int]]:
        """The next capturable rows of each of ``keys`` of ``f_queue``, at most ``wants[i]``
        of ``keys[i]``, locked until the transaction ends: (position in keys, id), in
        capture order within each key."""
        count = len(keys)
        params: dict[str, Any] = {"f_queue": queue}
        for i, (key, want) in enumerate(zip(keys, wants, strict=True)):
            params[f"key_{i}"], params[f"want_{i}"] = key, want
        found: Sequence[Sequence[Any]] = self.run_prepared(
            conn,
            ("fair rows", count),
            # Each member a subquery: a member of a UNION may not have a LIMIT of its own.
            # Nothing is locked: SQLite's write transaction holds the whole database.
            lambda: sa.union_all(
                *(sa.select(*self.fair_key_rows(i).subquery(f"key_{i}").c) for i in range(count))
            ),
            params,
        ).all()
        return [(row[0], row[1]) for row in found]

    def capture_page(
        self,
        conn: Connection,
        queue: str,
        page: FairPage,
        named_leases: int | None,
        params: dict[str, Any],
        cursor: tuple[str | None, int],
    ) -> Dealt:
        """Capture the rows ``page`` deals (jobq.dialects.fair_deal), at most ``page.left``
        of them, in the transaction that holds ``queue``'s row locked, and write where the
        visits stopped if it took any and that is not ``cursor`` (the queue's cursor as
        stored). Parameters of the capture as capture_ids takes them. The portable way:
        each key's rows read by fair_rows (as many as the rounds that fill the capture
        take, then more of the keys that may have them if a key ran short), dealt here,
        captured by id."""
        wants = page.wants(bounded=True)
        rows: dict[int, list[int]] = {}
        for i, want in enumerate(wants):
            if (known := page.known_rows(i, want)) is not None:
                rows[i] = known
        missing = {i: want for i, want in enumerate(wants) if i not in rows}
        rows.update(self._page_rows(conn, queue, page, missing))
        order = deal_order(page, rows)
        more = {
            i: room
            for i, (want, room) in enumerate(zip(wants, page.rooms, strict=True))
            if len(rows[i]) == want < room
        }
        if page.every_key and len(order) < page.left and more:
            rows.update(self._page_rows(conn, queue, page, more))
            order = deal_order(page, rows)
        taken = order[: page.left]
        dealt = [(position, round_) for round_, position, _ in taken]
        cut = bool(taken) and len(order) > page.left and order[page.left][:2] == taken[-1][:2]
        stop = stop_of(page, dealt, cut)
        empty = [i for i, want in enumerate(wants) if want > 0 and not rows[i]]
        if not taken:
            return Dealt(empty=empty, stop=stop)
        ids = [id for _, _, id in taken]
        if stop == cursor:
            captured = self.capture_ids(conn, ids, named_leases, params)
        else:
            captured = self.capture_ids_moving(conn, ids, named_leases, params, queue, stop)
        return Dealt(captured, empty, stop)

    def capture_ids_moving(
        self,
        conn: Connection,
        ids: Sequence[int],
        named_leases: int | None,
        params: dict[str, Any],
        queue: str,
        cursor: tuple[str, int],
    ) -> Sequence[Sequence[Any]]:
        """capture_ids, and fair queue ``queue``'s cursor written (write_fair_cursor)."""
        self.write_fair_cursor(conn, queue, cursor)
        return self.capture_ids(conn, ids, named_leases, params)

    def _page_rows(
        self, conn: Connection, queue: str, page: FairPage, wants: dict[int, int]
    ) -> dict[int, list[int]]:
        """The next rows of ``page``'s keys by position, at most ``wants[position]``, in
        capture order, locked."""
        asked = [i for i, want in wants.items() if want > 0]
        rows: dict[int, list[int]] = {i: [] for i in wants}
        if asked:
            names, counts = [page.keys[i] for i in asked], [wants[i] for i in asked]
            for position, id in self.fair_rows(conn, names, counts, queue):
                rows[asked[position]].append(id)
        return rows

    def run_prepared(
        self, conn: Connection, key: Any, build: Any, params: dict[str, Any]
    ) -> sa.CursorResult[Any]:
        """Run the statement ``build()`` (compiled once, under ``key``) with ``params`` on
        ``conn`` as SQL for the driver: a large statement's cache key is not computed again
        for each run (for a UNION of 100 members, more than the statement itself costs)."""
        stmt = self.memo(("prepared", key), lambda: Prepared(build(), conn.dialect))
        return conn.exec_driver_sql(stmt.sql, stmt.parameters(params))

    def capture_ids(
        self,
        conn: Connection,
        ids: Sequence[int],
        named_leases: int | None,
        params: dict[str, Any],
    ) -> Sequence[Sequence[Any]]:
        """Capture the rows ``ids`` (locked by fair_rows in this transaction) on ``conn``;
        their every column, as the driver gives them. Parameters: ``worker_id`` and the
        leases' (see lease_of). Runs start at the clock, after the queue's lock."""
        width, picked = picked_ids(ids)
        stmt = self.memo(
            ("fair capture ids", named_leases, width),
            lambda: Prepared(
                sa.update(tasks)
                .where(c.id.in_(picked_params(width)))
                .values(**self.fair_capture_values(named_leases))
                .returning(*tasks.c),
                conn.dialect,
            ),
        )
        return conn.exec_driver_sql(stmt.sql, stmt.parameters({**params, **picked})).fetchall()

    def fair_capture_values(self, named_leases: int | None) -> dict[str, Any]:
        """A capture's SET clause with the run's start and its lease from the clock: the
        transaction may have waited for its queue's lock, and a lease counted from its
        start would be shorter by that wait."""
        values = self.capture_values(named_leases=named_leases, now=self.clock())
        values["locked_until"] = self.clock_plus(lease_of(named_leases))
        return values

    def fair_expired(self) -> sa.Select[Any]:
        """The runs of ``f_queue`` whose lease expired that a capture may take again (see
        capturable_expired), in capture order, at most ``limit``, locked: (id, fair_key).
        They were captured once by their key's turn; they run again first."""

        def build() -> sa.Select[Any]:
            now = self.now()
            return (
                sa.select(c.id, c.fair_key)
                .where(
                    self.within("jobq_tasks_lease_expiry"),
                    self.capturable_expired(now),
                    c.queue_id == _param("f_queue"),
                )
                .order_by(c.priority.desc(), c.run_at, c.id)
                .limit(_param("limit", sa.Integer))
                .with_for_update(skip_locked=True)
            )

        return self.memo("fair expired", build)
