"""What every dialect provides: the clock, bulk insert, capture, and error classification.

The portable parts of the statements (which rows are capturable, in predicates.py; what
a capture or an enqueue writes, in row_values.py) are built once; a dialect only supplies
the shape its database needs around them. Dialect is the interface every database
implements; what its methods do by default lives in modules of their own: leases.py,
row_values.py, upserts.py, session_lock.py, notify.py (LISTEN / NOTIFY) and
error_kinds.py (what an error means).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from jobq.db.errors import InvalidDatabaseURL, JobqError, NeedsSession, RequiresPostgreSQL
from jobq.db.payload import encode_args_array
from jobq.db.prepared import Prepared, RowReader
from jobq.db.room import GIGABYTE, Room
from jobq.dialects import error_kinds, health, liveness, notify, row_values, upserts
from jobq.dialects.fair import FairStatements
from jobq.dialects.leases import lease_of as lease_of
from jobq.dialects.predicates import CapturePredicates
from jobq.dialects.row_values import NEW_ROW_PARAMETERS as NEW_ROW_PARAMETERS
from jobq.dialects.schema import HOLDS_UNIQUE_KEY, locks, tasks
from jobq.dialects.session_lock import MIGRATION_LOCK as MIGRATION_LOCK
from jobq.dialects.session_lock import release_session_lock as release_session_lock
from jobq.dialects.session_lock import session_lock
from jobq.dialects.vacuum import DeadRows

c = tasks.c

#: Execution option marking a unit of work that only reads, for dialects that can begin
#: such a transaction more cheaply.
READ_ONLY = "jobq_read_only"


class Dialect(CapturePredicates, FairStatements):
    """One database's way of running jobq's statements. Subclasses register by ``name``."""

    name: ClassVar[str]
    registry: ClassVar[dict[str, type[Dialect]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for alias in getattr(cls, "aliases", (cls.name,)):
            Dialect.registry[alias] = cls

    #: Whether one statement may run in autocommit mode. A lone statement is atomic on
    #: its own, and skipping BEGIN and COMMIT saves two round trips per call.
    one_statement_autocommit: ClassVar[bool] = False
    #: Whether dead row versions stay until a vacuum clears them (dead_rows, vacuum.py).
    keeps_dead_rows: ClassVar[bool] = False

    #: Seconds a migration waits for another one to finish before it gives up.
    migration_lock_wait: ClassVar[float] = 3600.0

    #: Tasks one transaction enqueues before jobq refreshes the planner's statistics of the
    #: tasks table (refresh_statistics), and again at each tenfold; None where the database
    #: plans jobq's statements well whatever its statistics say.
    bulk_load_rows: ClassVar[int | None] = None

    def __init__(self) -> None:
        self._statements: dict[Any, Any] = {}
        #: How jobq's connections reach the server: None (directly), or through a pooler
        #: of this kind ("transaction": each transaction may get another server session).
        self.pooler: str | None = None
        #: Where to LISTEN, when not on the engine's own URL: a direct connection beside
        #: a pooled one (jobq worker --listen-url).
        self.listen_url: sa.URL | None = None

    def through_pooler(self, pooler: str, url: str) -> None:
        """Work through a ``pooler`` (jobq_pooler= of ``url``, as shown), or refuse."""
        raise InvalidDatabaseURL(
            url=url, reason=f"jobq_pooler is for PostgreSQL; this database is {self.name}"
        )

    def refuse_without_session(self, what: str, advice: str) -> None:
        """Raise NeedsSession for ``what`` if this database is reached through a pooler."""
        if self.pooler is not None:
            raise NeedsSession(what=what, advice=advice)

    def memo(self, key: Any, build: Any) -> Any:
        """The statement cached under ``key``, built by ``build()`` on first use.

        Statements are built once per shape with bind parameters, so SQLAlchemy neither
        rebuilds them nor recomputes their cache keys on every call.
        """
        try:
            return self._statements[key]
        except KeyError:
            stmt = self._statements[key] = build()
            return stmt

    # --- engine ---------------------------------------------------------------------

    def normalize_url(self, url: sa.URL) -> sa.URL:
        """The URL with this database's default driver filled in."""
        return url

    def missing_driver(self, url: sa.URL) -> JobqError | None:
        """The error to raise when ``url``'s driver cannot be imported, if jobq's extra has it."""
        return None

    def engine_options(self, url: sa.URL) -> dict[str, Any]:
        """Keyword arguments for create_engine when jobq creates the engine itself."""
        return {}

    def configure_engine(self, engine: Engine) -> None:
        """Install whatever per-connection setup jobq relies on (idempotent)."""

    def configure_own_engine(self, engine: Engine) -> None:
        """Set up an engine jobq created itself from a URL: session settings that would
        not be jobq's to change on an engine the application passed in."""

    def room(self, engine: Engine) -> Room:
        """How many bytes one statement's parameters may take on ``engine``'s database."""
        return GIGABYTE

    def batch_bytes(self, batch: Any, room: Room, row_bytes: int) -> int:
        """Bytes an encoded batch of enqueue_many takes, rows of ``row_bytes`` more each."""
        return room.size(batch)

    def create_missing(self, engine: Engine) -> None:
        """Create the database connecting to ``engine`` opens, if it does not exist yet and
        this database is a file (SQLite): only migrations create one, and connections never
        do. A server's database is never created: this does nothing."""

    def missing_file(self, engine: Engine) -> str | None:
        """The file connecting to ``engine`` would create because it does not exist yet.

        None when connecting creates nothing: a server never creates a database when a
        client connects (SQLite, which does, says which file).
        """
        return None

    def raw_connections_ok(self, engine: Engine) -> bool:
        """Whether driver connections may be detached from ``engine``'s pool and reused."""
        return True

    #: Database.run borrows its driver connections from the engine's pool and gives them
    #: back (instead of keeping detached ones of its own): where setting a connection up
    #: for it and back costs no round trip, so that a worker holds one connection for
    #: all its statements (PostgreSQL).
    raw_from_pool: ClassVar[bool] = False

    def prepare_raw(self, raw: Any) -> None:
        """Set up a driver connection that Database.run will own (autocommit, say)."""

    def unprepare_raw(self, raw: Any) -> None:
        """Undo prepare_raw on a connection going back to the engine's pool (raw_from_pool)."""

    def native_statement(self, sql: str) -> tuple[str, tuple[str, ...]] | None:
        """``sql``, compiled in the driver's paramstyle, in the server's own placeholders
        with the bind names in their order, for raw_cursor; None where there is none."""
        return None

    def raw_cursor(self, raw: Any) -> Any:
        """A cursor of driver connection ``raw`` that sends native_statement's SQL as it is."""
        raise NotImplementedError(f"{self.name} has no native statements")

    def raw_begin(self, cursor: Any) -> None:
        """Start the transaction around one statement run on a raw driver cursor, if any."""

    def raw_commit(self, raw: Any) -> None:
        """End the transaction raw_begin started (a no-op where the statement committed itself)."""
        raw.commit()

    def row_reader(
        self, columns: Sequence[sa.ColumnElement[Any]], engine: Engine
    ) -> Callable[[Sequence[Any]], Sequence[Any]]:
        """A function turning the driver's rows of ``columns`` into final Python values."""
        return RowReader(columns, engine.dialect)

    # --- clock ----------------------------------------------------------------------

    def now(self) -> sa.ColumnElement[Any]:
        """The database's current time."""
        raise NotImplementedError

    def now_plus(self, seconds: sa.ColumnElement[Any] | float) -> sa.ColumnElement[Any]:
        """The database's current time plus ``seconds`` (a number or a numeric column)."""
        raise NotImplementedError

    def clock(self) -> sa.ColumnElement[Any]:
        """The database's time when the expression is evaluated, even late in a transaction
        (``now`` may be fixed when the transaction or statement began)."""
        return self.now()

    def clock_plus(self, seconds: sa.ColumnElement[Any] | float) -> sa.ColumnElement[Any]:
        """clock() plus ``seconds``."""
        return self.now_plus(seconds)

    # --- writes ---------------------------------------------------------------------

    def capture_values(
        self, *, named_leases: int | None, now: sa.ColumnElement[Any]
    ) -> dict[str, Any]:
        """The SET clause of a capture: new attempt, owner, lease; a retry costs one retry.

        Parameters: ``worker_id``, and the leases (see lease_of).
        """
        return row_values.capture_values(self, named_leases=named_leases, now=now)

    def new_row_values(self, timing: str, extra: tuple[str, ...] = ()) -> dict[str, Any]:
        """The column values of a new task: ``new_<column>`` parameters, constants, clock.

        ``timing`` says where run_at comes from: 'at' (``new_run_at``), 'delay'
        (``new_delay`` seconds after the database's now) or 'now'. ``extra``: the optional
        columns the row binds too (row_values.OPTIONAL_ROW_PARAMETERS).
        """
        return row_values.new_row_values(self, timing, extra)

    def insert_statement(self, timing: str, extra: tuple[str, ...] = ()) -> sa.Executable:
        """INSERT of one task (parameters of new_row_values, plus ``new_args``) returning its id."""
        return row_values.insert_one(self.new_row_values(timing, extra))

    def insert_many_statement(self, timing: str, extra: tuple[str, ...] = ()) -> sa.Executable:
        """INSERT of one task per element of the JSON array parameter ``args_array``.

        The rows share the parameters of new_row_values and come back as their ids, in
        array order once sorted. One statement whatever the batch size: the database
        unrolls the array (measured on PostgreSQL: 4x faster than unnest of a text[],
        close to COPY).
        """
        common = self.new_row_values(timing, extra)
        rows = self.json_array_rows(sa.bindparam("args_array", type_=sa.Text))
        return row_values.insert_many(common, rows)

    def inserted_ids(self, cursor: Any) -> list[int]:
        """The ids of the rows an insert statement (insert_statement, insert_many_statement)
        just wrote, from its driver cursor (or CursorResult)."""
        return [row[0] for row in cursor.fetchall()]

    def encode_batch(
        self, task: str, args_list: Sequence[Mapping[str, Any] | None], room: Room, first: int
    ) -> Any:
        """One batch of insert_many_statement's arguments, encoded (each checked as JSON,
        and refused when too large: see payload.encode_args_array, for ``first``)."""
        return encode_args_array(task, args_list, room, first)

    def bind_batch(
        self, insert: Prepared, params: dict[str, Any], batch: Any
    ) -> tuple[Prepared, dict[str, Any]]:
        """The statement and parameters inserting ``batch`` (from encode_batch) with ``params``."""
        return insert, {**params, "args_array": batch}

    def json_array_rows(
        self, array: sa.BindParameter[str]
    ) -> tuple[sa.ColumnElement[Any], sa.ColumnElement[Any]]:
        """The elements of a JSON array parameter as rows: (element, position) columns."""
        raise NotImplementedError

    def json_records(
        self, array: sa.BindParameter[str], fields: Sequence[tuple[str, Any]]
    ) -> sa.FromClause:
        """The objects of a JSON array parameter as rows, one typed column per (name, type).

        Set-based writes read their batch this way: one statement and one parameter,
        whatever the batch size.
        """
        raise NotImplementedError

    def among_ids(self, column: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
        """``column`` is one of the ids in the list parameter ``ids``."""
        return column.in_(sa.bindparam("ids", expanding=True))

    def id_among(self, ids: sa.Select[Any]) -> sa.ColumnElement[bool]:
        """Task id is one of ``ids`` (a one-column SELECT), looked up by primary key."""
        return c.id.in_(ids)

    def json_from_text(self, text: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        """``text``, a JSON document as a string, as a value for a JSON column."""
        return text

    #: The dialect's INSERT with ON CONFLICT support (PostgreSQL's and SQLite's share a
    #: signature); a dialect without one overrides insert_unique instead.
    upsert_insert: ClassVar[Any] = None

    def insert_unique(
        self, conn: Connection, timing: str, params: dict[str, Any], extra: tuple[str, ...] = ()
    ) -> int | None:
        """Insert unless a row holds ``new_unique_key``; the new id, or None on conflict.

        The partial unique index decides, not a read before the write, so it is race-free.
        """
        stmt = self.memo(
            ("insert unique", timing, extra),
            lambda: upserts.insert_unique_statement(
                self.upsert_insert, self.new_row_values(timing, extra)
            ),
        )
        return conn.execute(stmt, params).scalar()

    def upsert_statement(
        self,
        table: sa.Table,
        key: upserts.UpsertKey,
        values: dict[str, Any],
        update: dict[str, Any] | None = None,
        where: sa.ColumnElement[bool] | None = None,
    ) -> sa.Insert:
        """Insert a row of ``values`` into ``table``, or, where a row has the same ``key``
        (a column or several; and ``where`` holds for it), update it with ``update``
        (default: ``values``).

        One atomic statement: concurrent callers, and a delete in between, never make it
        fail on the key.
        """
        return upserts.upsert(self.upsert_insert, table, key, values, update, where)

    def holder_of(self, conn: Connection, unique_key: str) -> int | None:
        """The id of the row that holds ``unique_key`` now, if any."""
        return conn.execute(
            sa.select(c.id).where(c.unique_key == unique_key, HOLDS_UNIQUE_KEY)
        ).scalar()

    def capture_statement(
        self, queue_count: int | None, named_leases: int | None, unlimited_only: bool = True
    ) -> sa.Executable:
        """The one statement that captures and returns every column of the captured rows.

        Parameters: ``limit``, ``worker_id``, ``queue_0``... (see queue_filter), and the
        leases' (see lease_of). It leaves limited queues alone unless
        ``unlimited_only`` is False.
        """
        raise NotImplementedError

    #: Whether capture_statement is one statement; otherwise capture_rows captures in steps.
    capture_is_one_statement: ClassVar[bool] = True

    def capture_rows(
        self,
        conn: Connection,
        queue_count: int | None,
        named_leases: int | None,
        unlimited_only: bool,
        params: dict[str, Any],
    ) -> Sequence[Sequence[Any]]:
        """Where capture takes several statements: capture on ``conn``, inside its
        transaction, and return the captured rows as the driver gives them (every column of
        the tasks table). Parameters as capture_statement's."""
        raise NotImplementedError

    def complete_and_capture_statement(
        self, record: sa.Update, queue_count: int | None, named_leases: int | None
    ) -> sa.Executable | None:
        """``record`` (run_end.record_statement) and a capture as one statement, or None.

        Its rows: the number of ends that applied, then a captured task's columns (all
        NULL when it captured nothing). Parameters: those of both statements. None where
        the database cannot; the Store then runs the two in one transaction.
        """
        return None

    def refresh_statistics(self, conn: Connection) -> None:
        """Bring the planner's statistics of the tasks table up to date, on ``conn`` and in
        its transaction, after a bulk load (see bulk_load_rows)."""

    def update_returning_ids(
        self, conn: Connection, stmt: sa.Update, params: dict[str, Any]
    ) -> set[int]:
        """Run ``stmt`` (an UPDATE of tasks, memoised by the caller) and return the ids of the
        rows it changed."""
        returning = self.memo(("returning ids", stmt), lambda: stmt.returning(c.id))
        return set(conn.execute(returning, params).scalars())

    # --- wake-up --------------------------------------------------------------------

    # The defaults of a database that cannot notify (see notify.py).
    wake_workers = notify.wake_workers
    wake_for_limits = notify.wake_for_limits
    listen = notify.listen
    why_polling = notify.why_polling
    listen_for_ends = notify.listen_for_ends

    # --- errors ---------------------------------------------------------------------

    # The classification every database overrides in part (see error_kinds.py).
    is_missing_schema = error_kinds.is_missing_schema
    is_too_large = error_kinds.is_too_large
    is_lock_key_conflict = error_kinds.is_lock_key_conflict
    is_conflict = error_kinds.is_conflict
    is_unsent = error_kinds.is_unsent
    heard_while_idle = liveness.heard_while_idle

    # --- locks (jobq.locks) -----------------------------------------------------------

    def claim_lock_statement(
        self,
        values: dict[str, Any],
        takeover: dict[str, Any],
        when: sa.ColumnElement[bool],
    ) -> sa.Executable:
        """Insert a jobq_locks row of ``values``, or, where its name exists and ``when`` holds
        for that row, update it with ``takeover``; one row comes back exactly if it did either.

        One atomic statement: no window between finding a row missing and creating it.
        """
        upsert = self.upsert_statement(locks, locks.c.name, values, update=takeover, where=when)
        return upsert.returning(locks.c.name)

    def claim_lock(self, conn: Connection, claim: Any, params: dict[str, Any]) -> bool:
        """Run ``claim`` (claim_lock_statement's); whether it inserted or took over the row."""
        return conn.execute(claim, params).first() is not None

    def advisory_lock_statement(self, *, session: bool) -> sa.Executable:
        """SELECT of one boolean: whether the advisory lock ``key`` was taken (no waiting)."""
        raise RequiresPostgreSQL(feature="AdvisoryLock", database=self.name)

    def advisory_unlock_statement(self) -> sa.Executable:
        """SELECT of one boolean: whether the session advisory lock ``key`` was held and freed."""
        raise RequiresPostgreSQL(feature="AdvisoryLock", database=self.name)

    # --- migrations -------------------------------------------------------------------

    def migration_lock(self, conn: Connection) -> AbstractContextManager[None]:
        """Hold, for the block, the lock that lets one migration at a time change the
        database; waiting up to ``migration_lock_wait`` seconds, else LockNotAcquired.

        The lock is taken on ``conn`` with no transaction left open, before the block
        begins its own, so that the block reads the revision the previous holder
        committed; it is released when the block exits, however it exits.
        """
        take, release = self.migration_lock_statements()
        return session_lock(conn, take, release, self.migration_lock_wait)

    def migration_lock_statements(self) -> tuple[str, str]:
        """SQL taking a session-level lock that serialises jobq's migrations, waiting up
        to ``%(wait)s`` seconds (one row: 1 when taken), and SQL releasing it."""
        raise NotImplementedError

    def dead_rows(self, conn: Connection) -> DeadRows | None:
        """jobq_tasks' dead row versions, where jobq vacuums them (see vacuum.py); None."""
        return None

    def vacuum_tasks(self, conn: Connection) -> None:
        """VACUUM jobq_tasks, where dead_rows reads them (see vacuum.py)."""
        raise NotImplementedError

    def health_readings(
        self, conn: Connection, tables: Sequence[str], index_bytes: int
    ) -> health.Readings:
        """What `jobq doctor` judges of this database and of jobq's ``tables`` (see health.py)."""
        return health.read(self.name, conn, tables, index_bytes)
