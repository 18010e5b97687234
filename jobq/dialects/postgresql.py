"""PostgreSQL: CTE ... FOR UPDATE SKIP LOCKED, UPDATE ... FROM ... RETURNING, unnest inserts."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.engine import Connection, Engine

from jobq.db.errors import LockNotAcquired
from jobq.db.outage import Outage
from jobq.db.prepared import RowReader
from jobq.dialects import liveness
from jobq.dialects.base import Dialect
from jobq.dialects.leases import lease_of
from jobq.dialects.postgresql_fair import LateralFairRows
from jobq.dialects.postgresql_listen import CHANNEL, ENDED_CHANNEL, start_listening
from jobq.dialects.schema import LOCK_KEY_HELD, task_edges, tasks
from jobq.dialects.session_lock import MIGRATION_LOCK, release_session_lock
from jobq.dialects.vacuum import DeadRows, postgresql_dead_rows, postgresql_vacuum

c = tasks.c

# SQLSTATEs: undefined_table, undefined_column.
_MISSING_SCHEMA = {"42P01", "42703"}
_UNIQUE_VIOLATION = "23505"
# SQLSTATEs: deadlock_detected, serialization_failure.
_CONFLICTS = {"40P01", "40001"}
_LOCK_NOT_AVAILABLE = "55P03"
#: A placeholder of SQLAlchemy's psycopg dialect, %(name)s, or an escaped percent sign.
_PYFORMAT = re.compile(r"%%|%\(([^)]+)\)s")
#: The advisory lock key of jobq's migrations: jobq.locks.advisory_key("jobq migrate").
_MIGRATION_KEY = int.from_bytes(
    hashlib.sha256(MIGRATION_LOCK.encode()).digest()[:8], "big", signed=True
)


def _session_settings(dbapi_connection: Any, _record: Any) -> None:
    """See configure_own_engine."""
    _utc(dbapi_connection)
    version = dbapi_connection.info.server_version
    if version >= 110000:
        # A generic plan of capture is costed for a tenth of the waiting rows (it cannot
        # know LIMIT's value): past jit_above_cost, PostgreSQL compiled it at each run,
        # 45 ms a capture with 200,000 tasks waiting and 600 ms with a million, for a
        # statement that reads a few index pages. jobq's statements are all short.
        dbapi_connection.execute("SET jit = off")
    if version >= 120000:  # plan_cache_mode is new in 12
        dbapi_connection.execute("SET plan_cache_mode = force_generic_plan")
    dbapi_connection.commit()


def _utc(dbapi_connection: Any, _record: Any = None) -> None:
    """The session's time zone: UTC. Through a transaction pooler too: PgBouncer keeps a
    client's TimeZone (as the server reports it) and sets it on each server session the
    client gets, as it does for no other setting of configure_own_engine's."""
    # In UTC by name, psycopg gives times with datetime.UTC itself, which jobq's rows keep
    # as they are; in the server's zone (Etc/UTC here, say) each time would be converted.
    dbapi_connection.execute("SET TIME ZONE 'UTC'")
    dbapi_connection.commit()


class PostgresDialect(LateralFairRows, Dialect):
    name = "postgresql"
    #: postgres:// is what many hosting platforms hand out (Heroku's DATABASE_URL, say);
    #: SQLAlchemy stopped reading it as PostgreSQL in 1.4.
    aliases = ("postgresql", "postgres")
    one_statement_autocommit = True
    keeps_dead_rows = True
    upsert_insert = staticmethod(pg.insert)

    def normalize_url(self, url: sa.URL) -> sa.URL:
        backend, plus, driver = url.drivername.partition("+")
        if backend == "postgres":
            url = url.set(drivername=f"postgresql{plus}{driver}")
        # psycopg 3 is the driver jobq ships with; plain postgresql:// means it.
        if url.drivername == "postgresql":
            return url.set(drivername="postgresql+psycopg")
        return url

    def through_pooler(self, pooler: str, url: str) -> None:
        self.pooler = pooler

    def engine_options(self, url: sa.URL) -> dict[str, Any]:
        if self.pooler is None:
            return {}
        # psycopg prepares a statement it has run 5 times, in the server session it ran
        # on; through a transaction pooler the next run may get another session, where
        # that statement does not exist (PgBouncer keeps them from 1.21, with
        # max_prepared_statements; Debian 12's is 1.18). Each statement is planned anew.
        return {"connect_args": {"prepare_threshold": None}}

    def configure_own_engine(self, engine: Engine) -> None:
        if self.pooler is not None:
            # jit and plan_cache_mode would stay set on whichever server session ran the
            # SET, for other clients, and be missing from the next one: not set at all
            # (with nothing prepared there are no generic plans to cost anyway).
            event.listen(engine, "connect", _utc)
            return
        # psycopg prepares a statement it has run 5 times; PostgreSQL then plans it once
        # for any parameters (a generic plan) only if that plan's estimate is no worse
        # than the plans it made for the values given. A generic plan cannot know a
        # LIMIT's value and costs capture for a tenth of the table, so PostgreSQL kept
        # planning a worker's turn anew, 2.4 ms of its 6. jobq's statements are planned
        # generically well (tests/dialects/test_capture_plan.py checks capture's generic
        # plans), so its own connections always use them (PostgreSQL 12 and later).
        event.listen(engine, "connect", _session_settings)

    # Setting psycopg's autocommit on an idle connection sends nothing to the server, and
    # the pool's rollback at check-in sends nothing either when no transaction is open.
    raw_from_pool = True

    def prepare_raw(self, raw: Any) -> None:
        raw.autocommit = True  # each statement Database.run sends is atomic on its own

    def unprepare_raw(self, raw: Any) -> None:
        raw.autocommit = False  # as SQLAlchemy's own units expect it

    def native_statement(self, sql: str) -> tuple[str, tuple[str, ...]] | None:
        # SQLAlchemy's psycopg dialect compiles to %(name)s, with a literal % as %%.
        numbers: dict[str, int] = {}  # bind name -> its $n, in order of first use

        def placeholder(match: re.Match[str]) -> str:
            name = match.group(1)
            if name is None:
                return "%"
            return f"${numbers.setdefault(name, len(numbers) + 1)}"

        return _PYFORMAT.sub(placeholder, sql), tuple(numbers)

    def raw_cursor(self, raw: Any) -> Any:
        import psycopg

        return psycopg.RawCursor(raw)

    def row_reader(
        self, columns: Sequence[sa.ColumnElement[Any]], engine: Engine
    ) -> Callable[[Sequence[Any]], Sequence[Any]]:
        # psycopg returns final values for every type jobq stores (json as Python objects,
        # timestamptz as aware datetimes); SQLAlchemy's processors would need its type codes.
        return RowReader(columns, engine.dialect, final=True)

    def now(self) -> sa.ColumnElement[Any]:
        return sa.func.now(type_=sa.DateTime(timezone=True))

    def now_plus(self, seconds: sa.ColumnElement[Any] | float) -> sa.ColumnElement[Any]:
        return _plus(self.now(), seconds)

    def clock(self) -> sa.ColumnElement[Any]:
        return sa.func.clock_timestamp(type_=sa.DateTime(timezone=True))

    def clock_plus(self, seconds: sa.ColumnElement[Any] | float) -> sa.ColumnElement[Any]:
        return _plus(self.clock(), seconds)

    def json_array_rows(
        self, array: sa.BindParameter[str]
    ) -> tuple[sa.ColumnElement[Any], sa.ColumnElement[Any]]:
        rows = (
            sa.func.json_array_elements(sa.cast(array, pg.JSON))
            .table_valued("value", with_ordinality="position")
            .render_derived()
        )
        return rows.c.value, rows.c.position

    def json_records(
        self, array: sa.BindParameter[str], fields: Sequence[tuple[str, Any]]
    ) -> sa.FromClause:
        columns = [sa.column(name, type_) for name, type_ in fields]
        return (
            sa.func.json_to_recordset(sa.cast(array, pg.JSON))
            .table_valued(*columns, name="record")
            .render_derived(with_types=True)
        )

    def among_ids(self, column: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
        # One array parameter: one prepared statement whatever the list's length, and a
        # generic plan that still looks the ids up by index (an IN list of n parameters
        # is a statement per n, and its generic plan may scan the table).
        return column == sa.any_(sa.bindparam("ids", type_=pg.ARRAY(sa.BigInteger)))

    def id_among(self, ids: sa.Select[Any]) -> sa.ColumnElement[bool]:
        # IN (SELECT ...) may become a join that, misjudging the table's statistics, hashes
        # a scan of many rows; ANY(ARRAY(...)) is always a primary-key index scan.
        return c.id == sa.any_(sa.func.array(ids.scalar_subquery()))

    def json_from_text(self, text: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        return sa.cast(text, pg.JSON)

    def capture_branch(self, rows: sa.Select[Any], name: str) -> sa.Select[Any]:
        # FOR UPDATE is not allowed in a member of a UNION, but is in a CTE; each CTE is
        # run once, so neither can lock more than its LIMIT.
        locked = rows.with_for_update(skip_locked=True).cte(name)
        return sa.select(locked.c.id, locked.c.priority, locked.c.run_at)

    def capture_statement(
        self, queue_count: int | None, named_leases: int | None, unlimited_only: bool = True
    ) -> sa.Executable:
        return self._capture_update(queue_count, named_leases, unlimited_only).returning(*tasks.c)

    def _capture_update(
        self,
        queue_count: int | None,
        named_leases: int | None,
        unlimited_only: bool,
        skip: sa.ColumnElement[bool] | None = None,
    ) -> sa.Update:
        """capture_statement without its RETURNING; ``skip`` excludes more rows."""
        now = self.now()
        # A CTE, so the planner cannot re-run the LIMIT subquery per row and claim more
        # than ``limit``.
        picked = self.capturable_ids(now, queue_count, unlimited_only, skip).cte("picked")
        # id = ANY(ARRAY(...)) rather than UPDATE ... FROM picked: once the statement is
        # prepared, a generic plan cannot see the LIMIT, guesses hundreds of rows and
        # hash-joins them against a sequential scan of the whole table. ANY(ARRAY) is
        # always a primary-key index scan.
        picked_ids = sa.func.array(sa.select(picked.c.id).scalar_subquery())
        # A limiter captures in a transaction that may have waited for its queue's lock,
        # and counts rate starts by the clock after it: so do the runs' start times.
        started = now if unlimited_only else self.clock()
        values = self.capture_values(named_leases=named_leases, now=started)
        # The lease counts from the run's start: from the transaction's start, a limiter
        # that waited for its queue's lock would hand out a lease shorter by that wait.
        values["locked_until"] = _plus(started, lease_of(named_leases))
        return sa.update(tasks).where(c.id == sa.any_(picked_ids)).values(**values)

    # Right after a bulk load the planner has no statistics of the new rows (autovacuum
    # analyses some time later, if at all), or statistics from before that say nothing
    # waits. It then believes a handful of rows are capturable and plans capture as a
    # bitmap scan of every waiting row and a sort of them all (350 ms a capture after a
    # load of a million: benchmarks/unanalysed_drain.py), and may record ends by scanning a
    # capture index rather than looking the ids up. No statement shape takes that choice
    # away: a LIMIT over an ordered index walk is weighed against a bitmap and a sort by the
    # estimated number of matching rows alone, and PostgreSQL takes no plan hints. So after
    # a bulk load jobq brings the statistics up to date itself (Enqueuer.loaded): ANALYZE
    # samples at most 30,000 rows, whatever the table's size (0.15 s for a million here).
    bulk_load_rows = 10_000

    def refresh_statistics(self, conn: Connection) -> None:
        # In a caller's loading transaction ANALYZE samples the rows it wrote, uncommitted,
        # and the statistics commit (or roll back) with them; after a Store's own loads it
        # runs on its own. SKIP_LOCKED: should another ANALYZE or a VACUUM of the table be
        # under way, skip rather than wait, which would hold up the load (and could
        # deadlock with it). A role that does not own the table is only warned, and
        # analyses nothing.
        if (conn.dialect.server_version_info or (0,)) < (12,):
            return  # no SKIP_LOCKED before PostgreSQL 12: such a server keeps to autovacuum
        # The edges too: a workflow's load fills both (jobq.workflows).
        tables = ", ".join(
            conn.dialect.identifier_preparer.format_table(table) for table in (tasks, task_edges)
        )
        conn.exec_driver_sql(f"ANALYZE (SKIP_LOCKED) {tables}")

    def complete_and_capture_statement(
        self, record: sa.Update, queue_count: int | None, named_leases: int | None
    ) -> sa.Executable:
        # Both writes in one statement: one round trip and one commit per worker turn.
        recorded = record.returning(c.id).cte("recorded")
        # A run recorded here may also look capturable (its lease expired, unrescued);
        # one statement must not update a row twice, so the capture leaves it alone.
        skip = c.id.in_(sa.select(recorded.c.id))
        captured = self._capture_update(queue_count, named_leases, True, skip)
        captured_rows = captured.returning(*tasks.c).cte("captured")
        applied = sa.select(sa.func.count()).select_from(recorded).scalar_subquery()
        one = sa.select(sa.literal(1).label("one")).subquery("one")
        return sa.select(applied.label("applied"), *captured_rows.c).select_from(
            one.outerjoin(captured_rows, sa.true())
        )

    def wake_workers(self, conn: Connection, ids: Sequence[int]) -> None:
        # The payload of revision 0003's trigger: the distinct queues, capped below 8,000.
        def build() -> sa.Select[Any]:
            queues = sa.func.coalesce(sa.func.string_agg(sa.distinct(c.queue_id), ","), "")
            return sa.select(sa.func.pg_notify(CHANNEL, sa.func.left(queues, 7900))).where(
                self.among_ids(c.id)
            )

        conn.execute(self.memo(("wake workers",), build), {"ids": list(ids)})

    def wake_for_limits(self, conn: Connection, queue: str) -> None:
        # A wake-up naming the queue, on the enqueue channel: a worker serving it looks
        # again at once, and a look after a wake-up reads the limits afresh.
        conn.execute(sa.select(sa.func.pg_notify(CHANNEL, queue)))

    def listen(
        self,
        engine: Engine,
        on_enqueued: Callable[[set[str] | None], None],
        stop: Any,
        outage: Outage | None = None,
    ) -> bool:
        url = self._listen_url(engine)
        if url is None:
            return False

        def on_payload(payload: str | None) -> None:
            on_enqueued(None if payload is None else {q for q in payload.split(",") if q})

        start_listening(url, CHANNEL, on_payload, stop, outage, "jobq-listen")
        return True

    def why_polling(self) -> str | None:
        if self.pooler is None or self.listen_url is not None:
            return None
        return (
            "LISTEN cannot go through a transaction pooler; give --listen-url (the server's "
            "own URL) to be woken on enqueue"
        )

    def _listen_url(self, engine: Engine) -> sa.URL | None:
        """Where to LISTEN: the listen URL given, else the engine's own unless that goes
        through a transaction pooler (which would hand the LISTEN's session to others)."""
        if self.listen_url is not None:
            return self.listen_url
        return engine.url if self.pooler is None else None

    def listen_for_ends(
        self,
        engine: Engine,
        on_ended: Callable[[int | None], None],
        stop: Any,
        outage: Outage | None = None,
    ) -> bool:
        def on_payload(payload: str | None) -> None:
            if payload is None:
                on_ended(None)
                return
            try:
                task_id = int(payload)
            except ValueError:
                return  # not revision 0009's trigger: someone else's NOTIFY on the channel
            on_ended(task_id)

        url = self._listen_url(engine)
        if url is None:
            return False
        start_listening(url, ENDED_CHANNEL, on_payload, stop, outage, "jobq-listen-ends")
        return True

    def dead_rows(self, conn: Connection) -> DeadRows | None:
        return postgresql_dead_rows(conn)

    def vacuum_tasks(self, conn: Connection) -> None:
        postgresql_vacuum(conn)

    def is_missing_schema(self, error: sa.exc.DBAPIError) -> bool:
        return getattr(error.orig, "sqlstate", None) in _MISSING_SCHEMA

    def is_lock_key_conflict(self, error: sa.exc.DBAPIError) -> bool:
        diag = getattr(error.orig, "diag", None)
        return (
            getattr(error.orig, "sqlstate", None) == _UNIQUE_VIOLATION
            and getattr(diag, "constraint_name", None) == LOCK_KEY_HELD
        )

    def is_conflict(self, error: sa.exc.DBAPIError) -> bool:
        return getattr(error.orig, "sqlstate", None) in _CONFLICTS

    # is_unsent: no error of a statement tells; 57P01 (admin_shutdown) answers a statement
    # sent before the session ended (a restart) as well as one it ended mid-way
    # (pg_terminate_backend). heard_while_idle tells the first before anything is sent.

    def heard_while_idle(self, raw: Any) -> bool:
        # psycopg (3 and 2) say closed, and give their socket; a driver that does not
        # (pg8000) is never suspected.
        if getattr(raw, "closed", False):
            return True
        fileno = getattr(raw, "fileno", None)
        return fileno is not None and liveness.readable(fileno())

    def advisory_lock_statement(self, *, session: bool) -> sa.Executable:
        if session:
            self.refuse_without_session(
                "A session advisory lock (AdvisoryLock(session=True))",
                "take it without session=True (held by its own transaction), or use a "
                "Mutex or Lease, or give the lock a Store on the server's own URL",
            )
        key = sa.bindparam("key", type_=sa.BigInteger)
        take = sa.func.pg_try_advisory_lock if session else sa.func.pg_try_advisory_xact_lock
        return sa.select(take(key, type_=sa.Boolean))

    def advisory_unlock_statement(self) -> sa.Executable:
        key = sa.bindparam("key", type_=sa.BigInteger)
        return sa.select(sa.func.pg_advisory_unlock(key, type_=sa.Boolean))

    @contextmanager
    def migration_lock(self, conn: Connection) -> Iterator[None]:
        # Session-level, not pg_advisory_xact_lock, to behave as the other dialects do:
        # held from before the upgrade's transaction begins until after it commits.
        # pg_advisory_lock waits without end; lock_timeout, for this transaction, bounds it.
        self.refuse_without_session(
            "A migration (its lock)", "run `jobq migrate` with the server's own URL"
        )
        timeout_ms = round(self.migration_lock_wait * 1000)
        conn.exec_driver_sql(f"SET LOCAL lock_timeout = {timeout_ms}")
        try:
            conn.exec_driver_sql(f"SELECT pg_advisory_lock({_MIGRATION_KEY})")
        except sa.exc.OperationalError as error:
            if getattr(error.orig, "sqlstate", None) != _LOCK_NOT_AVAILABLE:
                raise
            conn.rollback()
            wait = self.migration_lock_wait
            raise LockNotAcquired(kind="lock", name=MIGRATION_LOCK, wait=wait) from None
        conn.commit()  # the lock outlives the transaction, and lock_timeout ends with it
        try:
            yield
        finally:
            release_session_lock(conn, f"SELECT pg_advisory_unlock({_MIGRATION_KEY})")


def _plus(moment: sa.ColumnElement[Any], seconds: Any) -> sa.ColumnElement[Any]:
    interval = sa.func.make_interval(0, 0, 0, 0, 0, 0, seconds)
    return sa.type_coerce(moment + interval, sa.DateTime(timezone=True))
