"""Database: an engine with its dialect, and the units of work that every SQL caller uses.

A unit of work is one statement (autocommit where the dialect allows it) or, when
``atomic``, one transaction; either way, driver errors that mean "never migrated" or
"cannot reach the server" come out as jobq's own exceptions.
"""

from __future__ import annotations

import itertools
import os
import random
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from jobq.db.errors import (
    DatabaseNotFound,
    DatabaseUnavailable,
    InvalidDatabaseURL,
    PayloadTooLarge,
    SchemaNotMigrated,
    first_line,
)
from jobq.db.patience import is_patient, outlasting, writing
from jobq.db.prepared import Prepared
from jobq.db.room import Room
from jobq.db.urls import POOLER_PARAMETER, parse_url, safe_url, scrub, shown_url, take_pooler
from jobq.dialects.base import READ_ONLY, Dialect
from jobq.dialects.named import dialect_named, supported
from jobq.engine.driver_runs import STALE_TRIES, DriverRuns, ping_when_idle_long

if TYPE_CHECKING:
    # Type-only: SQLAlchemy's DB-API protocols are not part of every 2.0 release.
    from sqlalchemy.engine.interfaces import DBAPIModule

DEFAULT_DATABASE_URL = "sqlite:///jobq.db"
# How often a unit aborted by a deadlock is tried in all, and the first pause after one.
_CONFLICT_TRIES = 10
_FIRST_CONFLICT_PAUSE = 0.002

_T = TypeVar("_T")


def database_url(explicit: str | sa.URL | None = None) -> str | sa.URL:
    """The URL to use: ``explicit``, else $JOBQ_DATABASE_URL, else sqlite:///jobq.db."""
    return explicit or os.environ.get("JOBQ_DATABASE_URL") or DEFAULT_DATABASE_URL


class Database(DriverRuns):
    """A SQLAlchemy engine configured for jobq, with its Dialect."""

    def __init__(
        self,
        url_or_engine: str | sa.URL | Engine | None = None,
        *,
        listen_url: str | sa.URL | None = None,
    ) -> None:
        given: str | sa.URL
        if isinstance(url_or_engine, Engine):
            engine = url_or_engine
            given = engine.url
            self.dialect = dialect_for(engine.url)
        else:
            given = database_url(url_or_engine)
            url, pooler = take_pooler(parse_url(given), given)
            self.dialect = dialect_for(url, given)
            if pooler is not None:
                self.dialect.through_pooler(pooler, safe_url(given))
            url = self.dialect.normalize_url(url)
            try:
                engine = sa.create_engine(url, **self.dialect.engine_options(url))
            except ImportError as error:
                missing = self.dialect.missing_driver(url)
                reason = scrub(str(error), given)
                raise missing or InvalidDatabaseURL(url=safe_url(given), reason=reason) from None
            except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ValueError) as error:
                # ValueError: a query argument the driver's dialect cannot read (?timeout=x).
                reason = scrub(first_line(error), given)
                raise InvalidDatabaseURL(url=safe_url(given), reason=reason) from None
            self.dialect.configure_own_engine(engine)
        self.dialect.configure_engine(engine)
        self.engine: Engine = engine
        if listen_url is not None:
            self.listen_on(listen_url)
        # The URL as given: where it held a raw '@', its text shows what parsing lost.
        self._given = given
        # Same pool; connections checked out through it run each statement in autocommit.
        self._one_statement_engine = (
            engine.execution_options(isolation_level="AUTOCOMMIT")
            if self.dialect.one_statement_autocommit
            else engine
        )
        # Driver connections owned by run(), each with when it was last put back: taken
        # from the pool once and detached, so idle ones do not count against it.
        # list.pop and list.append are atomic.
        self._idle: list[tuple[Any, float]] = []
        # A forked child must not use its parent's sockets: it starts with none idle.
        forget = weakref.WeakMethod(self._forget_idle_connections)
        os.register_at_fork(after_in_child=lambda: (method := forget()) and method())
        self._driver_error: type[DBAPIModule.Error] = engine.dialect.loaded_dbapi.Error
        self._raw_ok = self.dialect.raw_connections_ok(engine)
        if self.dialect.raw_from_pool:
            ping_when_idle_long(engine)

    def __repr__(self) -> str:
        return safe_url(self._given)

    def listen_on(self, listen_url: str | sa.URL) -> None:
        """Listen for notifications on ``listen_url`` (the server's own, beside a pooled
        URL), not on the engine's; InvalidDatabaseURL if it is not the same kind of database."""
        url = parse_url(listen_url)
        if dialect_for(url, listen_url).name != self.dialect.name:
            raise InvalidDatabaseURL(
                url=safe_url(listen_url), reason=f"the listen URL is not {self.dialect.name}'s"
            )
        if url.query.get(POOLER_PARAMETER) is not None:
            raise InvalidDatabaseURL(
                url=safe_url(listen_url), reason="listening needs the server's own URL, no pooler"
            )
        self.dialect.listen_url = self.dialect.normalize_url(url)

    def dispose(self) -> None:
        """Close every pooled connection."""
        self._close_idle()
        self.engine.dispose()

    def require_existing(self) -> None:
        """Return if connecting will open a database that exists; else raise DatabaseNotFound.

        Connecting to a SQLite file that does not exist creates it, empty; what only reads
        calls this before its first connection, so that a mistyped path leaves nothing
        behind. A server's database is never created by connecting: this always returns.
        """
        missing = self.dialect.missing_file(self.engine)
        if missing is not None:
            raise DatabaseNotFound(path=missing)

    def room(self) -> Room:
        """How many bytes one statement's parameters may take on this database."""

        def ask() -> Room:
            try:
                return self.dialect.room(self.engine)
            except sa.exc.DBAPIError as error:  # it had to ask the server, which did not answer
                raise self.unavailable(error, unsent=True) from None

        try:
            return ask()  # known after the first time: nothing more on every enqueue's way
        except DatabaseUnavailable:
            patience = writing()
            if not is_patient() and (patience is None or patience.deadline.passed()):
                raise
        return outlasting(ask)  # a read: the first of an enqueue waits as the enqueue does

    def prepare(self, key: Any, build: Callable[[], sa.Executable]) -> Prepared:
        """The Prepared form of the statement ``build()`` makes, built once per ``key``."""
        return self.dialect.memo(("prepared", key), lambda: self._prepared(build()))

    def prepare_optional(
        self, key: Any, build: Callable[[], sa.Executable | None]
    ) -> Prepared | None:
        """prepare() for a statement the dialect may not have (``build()`` gives None)."""

        def prepared() -> Prepared | None:
            stmt = build()
            return None if stmt is None else self._prepared(stmt)

        return self.dialect.memo(("prepared", key), prepared)

    def _prepared(self, statement: sa.Executable) -> Prepared:
        return Prepared(statement, self.engine.dialect, native=self.dialect.native_statement)

    def run(
        self,
        prepared: Prepared,
        values: Mapping[str, Any],
        *,
        connection: Connection | None = None,
        fetch: bool = False,
    ) -> Any:
        """Run one statement: its rows (``fetch``) as the driver returns them, else its rowcount.

        Given ``connection``, it runs there, in the caller's transaction. Otherwise it runs
        alone on a driver connection of our own, as one statement the dialect commits, and
        again should the database abort it to break a deadlock.
        """
        return self._execute(prepared, values, connection, _all_rows if fetch else _rowcount)

    def insert(
        self, prepared: Prepared, values: Mapping[str, Any], *, connection: Connection | None = None
    ) -> list[int]:
        """Run one INSERT of tasks (as run() does); the ids of the rows it wrote."""
        return self._execute(prepared, values, connection, self.dialect.inserted_ids)

    def _execute(
        self,
        prepared: Prepared,
        values: Mapping[str, Any],
        connection: Connection | None,
        read: Callable[[Any], _T],
    ) -> _T:
        """Run ``prepared`` as run() says, and ``read`` its cursor (or CursorResult)."""
        if connection is not None or not self._raw_ok or self._observed():
            params = prepared.parameters(values)
            return self.write(
                lambda conn: read(conn.exec_driver_sql(prepared.sql, params)), connection
            )
        if self.dialect.raw_from_pool and prepared.native_sql is not None:
            # Sent as it is: psycopg parses a statement longer than 4 KB for its placeholders
            # on every execution (it caches shorter ones), 95 µs for a worker's turn.
            native_sql, native_params = prepared.native_sql, prepared.native_parameters(values)
            return self._retrying(
                lambda: self._run_pooled_raw(native_sql, native_params, read, native=True)
            )
        params = prepared.parameters(values)
        return self._retrying(lambda: self._run_raw(prepared.sql, params, read))

    def write(
        self,
        work: Callable[[Connection], _T],
        connection: Connection | None = None,
        *,
        atomic: bool = False,
    ) -> _T:
        """``work(conn)`` as one unit of work that writes (see unit); what it returns.

        Our own unit runs again from the start, up to a few times, when the database aborted
        it to break a deadlock: an aborted unit was undone whole, so ``work`` must only touch
        the database. In the caller's ``connection`` the caller's transaction was aborted,
        and the error is the caller's to handle.
        """
        if connection is not None:
            with self.unit(connection) as conn:
                return work(conn)

        def attempt() -> _T:
            with self.unit(atomic=atomic) as conn:
                return work(conn)

        return self._retrying(attempt)

    def _retrying(self, attempt: Callable[[], _T]) -> _T:
        """``attempt()``, tried again after a short random pause while it fails by a conflict,
        and in a patiently() block while it cannot reach the database (jobq.db.patience)."""
        return outlasting(lambda: self._resolving_conflicts(attempt))

    def _resolving_conflicts(self, attempt: Callable[[], _T]) -> _T:
        for tries in itertools.count(1):
            try:
                return attempt()
            except sa.exc.DBAPIError as error:
                if tries >= _CONFLICT_TRIES or not self.dialect.is_conflict(error):
                    raise
            # Random, growing pauses, so that the transactions that collided do not meet again.
            time.sleep(random.uniform(0, _FIRST_CONFLICT_PAUSE * 2 ** min(tries, 6)))
        raise AssertionError("unreachable")

    def _observed(self) -> bool:
        """Whether someone listens to the engine's cursor events (tracing, say).

        Statements then go through SQLAlchemy, so that every one of them is seen.
        """
        dispatch = self.engine.dispatch
        return bool(dispatch.before_cursor_execute or dispatch.after_cursor_execute)

    @contextmanager
    def unit(
        self, connection: Connection | None = None, *, atomic: bool = False, read_only: bool = False
    ) -> Iterator[Connection]:
        """A connection to run one unit of work on, committed when the block exits.

        The caller's ``connection`` is used as it is, in the caller's transaction. Otherwise
        a unit of one statement runs in autocommit where the dialect allows it (one round
        trip instead of three); ``atomic`` units of several statements get a transaction.
        """
        if connection is not None:
            with self.translated():
                yield connection
            return
        engine = self.engine if atomic else self._one_statement_engine
        conn = outlasting(lambda: self._connect(engine))
        with conn, self.translated():
            if engine is not self.engine:
                yield conn
                return
            if read_only:
                conn.execution_options(**{READ_ONLY: True})
            with conn.begin():
                if writing() is None:
                    yield conn
                    return
                try:
                    yield conn
                except (sa.exc.DBAPIError, DatabaseUnavailable) as error:
                    # Lost before its COMMIT was sent: the server rolled it back.
                    uncommitted = self._uncommitted(error)
                    if uncommitted is None:
                        raise
                    raise uncommitted from None

    def _connect(self, engine: Engine) -> Connection:
        """A connection of ``engine``; in a patiently() block, one that answered a ping (its
        block cannot be run again should the connection prove to be lost); in a
        waiting_to_write() block, one not found dead before anything is sent on it."""
        patience = writing()
        for _ in range(STALE_TRIES):
            conn = None
            try:
                conn = engine.connect()
                driver_connection = conn.connection.dbapi_connection
                # None only once the connection is closed or invalidated; this one is new.
                assert driver_connection is not None
                if is_patient() or self._suspect(driver_connection):
                    self.engine.dialect.do_ping(driver_connection)
                return conn
            except (sa.exc.DBAPIError, self._driver_error) as error:
                if conn is None or patience is None:
                    if conn is not None:
                        conn.invalidate()  # the pool connects anew
                        conn.close()
                    raise self.unavailable(error, unsent=True) from None
                conn.invalidate()  # dead before anything was sent: take another
                conn.close()
        raise self.unavailable(self._all_stale(), unsent=True)

    @contextmanager
    def translated(self) -> Iterator[None]:
        """Turn driver errors that mean 'not migrated' or 'cannot reach' into jobq's."""
        try:
            yield
        except sa.exc.DBAPIError as error:
            translated = self.translate(error)
            if translated is error:
                raise
            raise translated from None

    def translate(self, error: sa.exc.DBAPIError) -> Exception:
        """SchemaNotMigrated or DatabaseUnavailable when ``error`` means that, else ``error``."""
        if self.dialect.is_missing_schema(error):
            return SchemaNotMigrated(database=self.shown_database)
        if self.dialect.is_too_large(error):  # the server may have hung up: not an outage
            reason = first_line(error)
            return PayloadTooLarge(f"A statement was too large for this database: {reason}")
        if error.connection_invalidated:
            return self.unavailable(error, unsent=self.dialect.is_unsent(error))
        return error

    def unavailable(self, error: Exception, *, unsent: bool = False) -> DatabaseUnavailable:
        """DatabaseUnavailable for ``error``, naming host and database, never a credential.

        ``unsent``: what failed certainly wrote nothing (connecting failed, say). In a
        waiting_to_write() block, an error that is not says that what the block writes
        may or may not have been written (jobq.db.patience).
        """
        reason = scrub(scrub(first_line(error), self._given), self.engine.url)
        shown = shown_url(self._given)
        host = shown and (f"{shown.host}:{shown.port}" if shown.port else shown.host)
        context = {"database": self.shown_database, "host": host or "this machine"}
        patience = writing()
        if patience is not None and not unsent:
            return DatabaseUnavailable(
                f"Lost the connection to database {context['database']!r} on "
                f"{context['host']} while {patience.writes} was in flight: it may or may "
                f"not have been written ({reason})",
                **context,
                reason=reason,
            )
        unavailable = DatabaseUnavailable(**context, reason=reason)
        unavailable.nothing_written = unsent
        return unavailable

    def _uncommitted(self, error: Exception) -> DatabaseUnavailable | None:
        """DatabaseUnavailable (nothing written) for ``error`` raised in a transaction of
        our own before its COMMIT was sent, if it says the database was lost; else None."""
        if isinstance(error, sa.exc.DBAPIError):
            error = self.translate(error)
        if not isinstance(error, DatabaseUnavailable):
            return None
        uncommitted = DatabaseUnavailable(
            database=error.context.get("database"),
            host=error.context.get("host"),
            reason=error.context.get("reason"),
        )
        uncommitted.nothing_written = True
        return uncommitted

    @property
    def shown_database(self) -> str | None:
        """The database's name as messages show it: never a piece of the credentials."""
        shown = shown_url(self._given)
        return shown.database if shown else None


def _all_rows(cursor: Any) -> list[Any]:
    return cursor.fetchall()


def _rowcount(cursor: Any) -> int:
    return cursor.rowcount


def dialect_for(url: sa.URL, given: str | sa.URL | None = None) -> Dialect:
    """The Dialect for ``url``'s database (parsed from ``given``), or InvalidDatabaseURL
    naming those supported."""
    dialect = dialect_named(url.get_backend_name())
    if dialect is None:
        raise InvalidDatabaseURL(
            url=safe_url(url if given is None else given),
            reason=f"jobq does not run on {url.get_backend_name()!r}; "
            f"supported: {', '.join(supported())}",
        )
    return dialect
