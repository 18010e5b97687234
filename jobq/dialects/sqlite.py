"""SQLite: BEGIN IMMEDIATE, UPDATE ... WHERE id IN (SELECT ... LIMIT n) RETURNING, WAL."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Connection, Engine

from jobq.db.errors import DatabaseNotFound
from jobq.db.prepared import RowReader
from jobq.dialects.base import (
    READ_ONLY,
    Dialect,
)
from jobq.dialects.schema import tasks
from jobq.dialects.sqlite_fair import FirstRowFairKeys

c = tasks.c

# The text format SQLAlchemy stores DateTime in, to millisecond precision, so that the
# database's clock and Python-supplied times compare correctly as strings.
_TIME_FORMAT = "%Y-%m-%d %H:%M:%f"


def _decode_text(value: bytes) -> str:
    # A row written by hand, or by an older jobq, may hold bytes that are not UTF-8:
    # read them escaped (\\xff) rather than fail the whole statement.
    return value.decode("utf-8", "backslashreplace")


def _utc_moment(value: Any) -> datetime | None:
    """A DATETIME column's text as jobq and SQLAlchemy store it (``2026-11-24 20:41:00.123``,
    UTC, no offset) as an aware UTC datetime, at a tenth of SQLAlchemy's processor and a
    timezone replaced; None for a value in another form (the general path reads it)."""
    try:
        return datetime.fromisoformat(value + "+00:00")
    except (TypeError, ValueError):  # an offset of its own, bytes, not a date at all
        return None


def _database_file(filename: str, uri: bool) -> str | None:
    """The file ``sqlite3.connect(filename, uri=uri)`` opens; None for a database in memory."""
    # SQLite reads a filename as a URI only when asked to and when it starts with file:
    # (https://sqlite.org/uri.html); its path is percent-encoded and its query may put the
    # database in memory.
    if uri and filename.startswith("file:"):
        parts = urlsplit(filename)
        query = parse_qs(parts.query)
        if "memory" in query.get("mode", []) or "memdb" in query.get("vfs", []):
            return None
        filename = unquote(parts.path)
    # "" is a private temporary database, which SQLite deletes when it is closed.
    return None if filename in ("", ":memory:") else filename


def _without_creating(filename: str, uri: bool) -> str | None:
    """The SQLite URI that opens ``filename`` (read as ``sqlite3.connect`` reads it) only
    if it exists (mode=rw, https://sqlite.org/uri.html); None where no file is opened
    (memory) or the URI names a mode of its own."""
    if _database_file(filename, uri) is None:
        return None
    if not (uri and filename.startswith("file:")):
        return f"file:{quote(os.path.abspath(filename))}?mode=rw"
    parts = urlsplit(filename)
    if "mode" in parse_qs(parts.query):
        return None
    return parts._replace(query="&".join(filter(None, [parts.query, "mode=rw"]))).geturl()


def _connect_existing(dialect: Any, _record: Any, cargs: list[Any], cparams: dict[str, Any]) -> Any:
    """do_connect: a connection to the database file only if it exists; else DatabaseNotFound.

    sqlite3.connect creates a missing file, empty: a worker or an enqueue on a mistyped
    path, or before `jobq migrate`, would leave one behind. Only migrate creates it
    (SQLiteDialect.create_missing).
    """
    filename, uri = str(cargs[0]), bool(cparams.get("uri"))
    existing = _without_creating(filename, uri)
    if existing is None:
        return None  # SQLAlchemy connects as it would have
    dbapi = dialect.loaded_dbapi
    try:
        return dbapi.connect(existing, *cargs[1:], **{**cparams, "uri": True})
    except dbapi.OperationalError:
        path = _database_file(filename, uri)
        if path is not None and not os.path.exists(path):
            raise DatabaseNotFound(path=os.path.abspath(path)) from None
        raise


def _on_connect(dbapi_connection: Any, _record: Any) -> None:
    # Stop the sqlite3 module from issuing its own BEGIN; _on_begin issues ours.
    dbapi_connection.isolation_level = None
    dbapi_connection.text_factory = _decode_text
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA busy_timeout=30000")
        _use_wal(cursor)
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


def _use_wal(cursor: Any) -> None:
    """Put the file in WAL mode, waiting up to the busy timeout for other connections.

    Two processes turning a new file to WAL at once each hold a read lock and want the
    write lock, so SQLite answers "database is locked" at once instead of calling the busy
    handler (which could deadlock): try again until the file is in WAL mode.
    """
    deadline = time.monotonic() + 30
    pause = 0.001
    while True:
        try:
            cursor.execute("PRAGMA journal_mode")
            if str(cursor.fetchone()[0]).lower() == "wal":
                return
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def _on_begin(conn: Connection) -> None:
    # IMMEDIATE takes the write lock up front: a deferred transaction that reads and
    # then writes fails with SQLITE_BUSY instead of waiting when another writer is active.
    if conn.get_execution_options().get(READ_ONLY):
        conn.exec_driver_sql("BEGIN")
    else:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


class SQLiteDialect(FirstRowFairKeys, Dialect):
    name = "sqlite"
    upsert_insert = staticmethod(sqlite.insert)

    def engine_options(self, url: sa.URL) -> dict[str, Any]:
        return {"connect_args": {"timeout": 30}}

    def configure_own_engine(self, engine: Engine) -> None:
        # Only on engines jobq made: an application's own engine creating its file is its
        # own business (it may create its tables before jobq's).
        if not event.contains(engine, "do_connect", _connect_existing):
            event.listen(engine, "do_connect", _connect_existing)

    def configure_engine(self, engine: Engine) -> None:
        if not event.contains(engine, "connect", _on_connect):
            event.listen(engine, "connect", _on_connect)
        if not event.contains(engine, "begin", _on_begin):
            event.listen(engine, "begin", _on_begin)

    def missing_file(self, engine: Engine) -> str | None:
        # Ask the engine's own driver dialect what it will open: it resolves relative
        # paths, ?uri=true and the defaults exactly as its connections will.
        args, options = engine.dialect.create_connect_args(engine.url)
        path = _database_file(str(args[0]), bool(options.get("uri")))
        if path is None or os.path.exists(path):
            return None
        return os.path.abspath(path)

    def create_missing(self, engine: Engine) -> None:
        args, options = engine.dialect.create_connect_args(engine.url)
        if self.missing_file(engine) is not None:
            # A connection of the driver's own, not the engine's: those never create one.
            engine.dialect.loaded_dbapi.connect(*args, **options).close()

    def raw_connections_ok(self, engine: Engine) -> bool:
        # An in-memory database lives in its one pooled connection; never take it away.
        return engine.url.database not in (None, "", ":memory:")

    def row_reader(
        self, columns: Sequence[sa.ColumnElement[Any]], engine: Engine
    ) -> Callable[[Sequence[Any]], Sequence[Any]]:
        return RowReader(columns, engine.dialect, read_moment=_utc_moment)

    def raw_begin(self, cursor: Any) -> None:
        cursor.execute("BEGIN IMMEDIATE")  # see _on_begin

    def now(self) -> sa.ColumnElement[Any]:
        return sa.func.strftime(_TIME_FORMAT, "now", type_=sa.DateTime(timezone=True))

    def now_plus(self, seconds: sa.ColumnElement[Any] | float) -> sa.ColumnElement[Any]:
        # 'now' is stable within one statement, so every use in a statement agrees.
        modifier = sa.func.printf("%+.6f seconds", seconds)
        return sa.func.strftime(_TIME_FORMAT, "now", modifier, type_=sa.DateTime(timezone=True))

    def json_array_rows(
        self, array: sa.BindParameter[str]
    ) -> tuple[sa.ColumnElement[Any], sa.ColumnElement[Any]]:
        rows = sa.func.json_each(array).table_valued("key", "value")
        return rows.c.value, rows.c.key

    def id_among(self, ids: sa.Select[Any]) -> sa.ColumnElement[bool]:
        # The UPDATE joins the records on the rowid already. With an IN (SELECT ...) of
        # them as well, SQLite looks the rows up by it and then scans every record for each
        # row (json_each has no index): a batch of 100 ends cost 100 times 100 records read,
        # 75 us a task. Without it, it walks the records once, each row found by rowid.
        return sa.true()

    def json_records(
        self, array: sa.BindParameter[str], fields: Sequence[tuple[str, Any]]
    ) -> sa.FromClause:
        each = sa.func.json_each(array).table_valued("value")
        columns = [
            sa.func.json_extract(each.c.value, f"$.{name}", type_=type_).label(name)
            for name, type_ in fields
        ]
        return sa.select(*columns).select_from(each).subquery("record")

    def capture_statement(
        self, queue_count: int | None, named_leases: int | None, unlimited_only: bool = True
    ) -> sa.Executable:
        # The engine's BEGIN IMMEDIATE already serialises writers, so one UPDATE with a
        # LIMIT subquery is atomic.
        now = self.now()
        picked = self.capturable_ids(now, queue_count, unlimited_only)
        stmt = (
            sa.update(tasks)
            .where(c.id.in_(picked))
            .values(**self.capture_values(named_leases=named_leases, now=now))
            .returning(*tasks.c)
        )
        return stmt

    def is_missing_schema(self, error: sa.exc.DBAPIError) -> bool:
        message = str(error.orig)
        return message.startswith(("no such table: jobq_", "no such column"))

    def is_lock_key_conflict(self, error: sa.exc.DBAPIError) -> bool:
        # Writers are serialised, so capture never races here; kept for completeness.
        return str(error.orig) == "UNIQUE constraint failed: jobq_tasks.lock_key"

    def migration_lock(self, conn: Connection) -> AbstractContextManager[None]:
        # Nothing to add: the upgrade's transaction begins with BEGIN IMMEDIATE (_on_begin),
        # which takes the database's one write lock before Alembic reads the revision and
        # holds it until the commit (SQLite's DDL is transactional); other migrations wait
        # for it (busy_timeout), then read the revision this one committed.
        return nullcontext()
