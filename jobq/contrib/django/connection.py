"""Django's database connection as the SQLAlchemy Connection jobq writes in: the same
driver connection, in Django's own transaction, with no second connection to the server.

A SQLAlchemy Engine per Django alias, of the App's dialect and driver, whose pool
(NullPool) "connects" by handing out a thin proxy of the driver connection Django holds
at that moment. The proxy's commit, rollback and close do nothing, so Django alone ends the
transaction; the engine has none of jobq's connect listeners (they set session options
and commit). Outside an ``atomic()`` block the statements run in
``transaction.atomic(using=alias, savepoint=False)``, one transaction committed at its end;
inside one they join it, and vanish with it if it rolls back.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils.connection import ConnectionProxy
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import NullPool
from sqlalchemy.types import NullType

from jobq.app.store import Store
from jobq.contrib.django.settings import database_url
from jobq.db.errors import InvalidOption
from jobq.db.tasks import as_utc
from jobq.dialects.schema import tasks

#: Django's vendor of each SQLAlchemy dialect jobq can share a connection on, and the
#: module of the driver connection it must hold (Django picks psycopg 3 when installed).
SHAREABLE = {
    "postgresql": ("postgresql", "psycopg"),
    "sqlite": ("sqlite", "sqlite3"),
    "mysql": ("mysql", "MySQLdb"),
}


class BorrowedConnection:
    """A driver connection lent by Django: SQLAlchemy runs statements on it, but its
    commit, rollback and close are Django's alone, and its SQLite functions stay Django's."""

    def __init__(self, driver_connection: Any) -> None:
        self._driver_connection = driver_connection

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        cursor = self._driver_connection.cursor(*args, **kwargs)
        loaders = getattr(cursor, "adapters", None)  # psycopg's
        if loaders is not None and _PLAIN_TIMESTAMPTZ is not None:
            # Django's loader may chop the zone off (USE_TZ = False, or changed since the
            # connection was made): jobq's statements read psycopg's own aware datetimes.
            loaders.register_loader("timestamptz", _PLAIN_TIMESTAMPTZ)
        return cursor

    def commit(self) -> None:
        """Django commits (the end of its atomic block, or autocommit)."""

    def rollback(self) -> None:
        """Django rolls back."""

    def close(self) -> None:
        """Django closes its connection."""

    def create_function(self, *args: Any, **kwargs: Any) -> None:
        """SQLAlchemy's SQLite dialect would replace Django's REGEXP: leave Django's."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._driver_connection, name)


#: The SQLAlchemy driver of a lent connection where Django's driver is not jobq's own:
#: Django's MySQL backend holds a mysqlclient (MySQLdb) connection, jobq connects with PyMySQL.
LENT_DRIVERS = {"mysql+pymysql": "mysql+mysqldb"}

#: psycopg's own loader of timestamptz (aware datetimes), if psycopg is installed.
_PLAIN_TIMESTAMPTZ: type | None
try:
    from psycopg.types.datetime import TimestamptzLoader as _PLAIN_TIMESTAMPTZ
except ImportError:  # no psycopg: nothing of Django's to undo
    _PLAIN_TIMESTAMPTZ = None

_LENT = threading.local()
_ENGINES: dict[tuple[str, str], Engine] = {}
_ENGINES_LOCK = threading.Lock()


def _lent() -> BorrowedConnection:
    return BorrowedConnection(_LENT.driver_connection)


def _engine(alias: str, drivername: str) -> Engine:
    """The Engine lending alias's driver connection to SQLAlchemy, one per alias and driver
    (SQLAlchemy learns the server's version once, on its first connection)."""
    key = (alias, drivername)
    with _ENGINES_LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            extra = {"use_native_hstore": False} if drivername.startswith("postgresql") else {}
            engine = _ENGINES[key] = sa.create_engine(
                sa.URL.create(drivername), creator=_lent, poolclass=NullPool,
                pool_reset_on_return=None, **extra,
            )  # fmt: skip
        return engine


def created_at(conn: Connection, task_id: int) -> datetime:
    """When task ``task_id``, just written in ``conn``'s transaction, was enqueued: its
    row's ``created_at`` (the database's clock), aware, in UTC. Read as the driver gives it:
    Django's SQLite converters already parse datetimes (jobq's are UTC)."""
    raw = conn.execute(
        sa.select(sa.type_coerce(tasks.c.created_at, NullType())).where(tasks.c.id == task_id)
    ).scalar_one()
    return as_utc(raw if isinstance(raw, datetime) else datetime.fromisoformat(str(raw)))


def wrapper_of(given: object) -> BaseDatabaseWrapper | None:
    """The Django connection ``given`` is (or proxies: ``django.db.connection``), else None."""
    if isinstance(given, ConnectionProxy):
        given = connections[given._alias]  # the one of this thread, as Django would use
    return given if isinstance(given, BaseDatabaseWrapper) else None


def adapt(given: object, store: Store) -> AbstractContextManager[Connection] | None:
    """The adapter jobq.app.connections calls: Django's connections become SQLAlchemy's,
    checked to be of the database the Store writes to; other objects are not ours (None)."""
    wrapper = wrapper_of(given)
    if wrapper is None:
        return None
    return shared(wrapper, store)


@contextmanager
def shared(wrapper: BaseDatabaseWrapper, store: Store) -> Iterator[Connection]:
    """A SQLAlchemy Connection on ``wrapper``'s driver connection, in Django's transaction
    (a new one, committed at the end, outside an atomic block). InvalidOption when it
    cannot be: another kind of database, another driver, or not the Store's database."""
    url = store.db.engine.url
    check_shareable(wrapper, url)
    with transaction.atomic(using=wrapper.alias, savepoint=False):
        wrapper.ensure_connection()
        _LENT.driver_connection = wrapper.connection
        try:
            with _engine(
                wrapper.alias, LENT_DRIVERS.get(url.drivername, url.drivername)
            ).connect() as connection:
                yield connection
        finally:
            _LENT.driver_connection = None


def check_shareable(wrapper: BaseDatabaseWrapper, url: sa.URL) -> None:
    """InvalidOption unless ``wrapper`` connects with the driver of ``url``, to its database."""
    dialect = url.get_backend_name()
    vendor, module = SHAREABLE.get(dialect, (None, None))
    if vendor is None:
        raise InvalidOption(
            option="_connection",
            reason=f"jobq cannot write in Django's transaction on {dialect} (only on "
            "PostgreSQL with psycopg 3, MySQL and MariaDB with mysqlclient, and SQLite): "
            "enqueue without _connection, or give "
            "the TASKS backend OPTIONS DATABASE_URL to enqueue in transactions of its own",
        )
    if wrapper.vendor != vendor:
        raise InvalidOption(
            option="_connection",
            reason=f"Django's {wrapper.alias!r} is {wrapper.vendor}; jobq's database is {dialect}",
        )
    wrapper.ensure_connection()
    driver = type(wrapper.connection).__module__.split(".")[0]
    if driver != module:
        raise InvalidOption(
            option="_connection",
            reason=f"Django's {wrapper.alias!r} connects with {driver}; jobq needs {module} "
            f"(pip install 'psycopg[binary]' so that Django uses it too, or mysqlclient)",
        )
    charset = wrapper.connection.character_set_name() if vendor == "mysql" else "utf8mb4"
    if charset != "utf8mb4":
        raise InvalidOption(
            option="_connection",
            reason=f"Django's {wrapper.alias!r} talks {charset} to the server; jobq's rows need "
            "utf8mb4 (Django's default: drop OPTIONS charset, or set it to utf8mb4)",
        )
    if not _same_database(wrapper, url):
        raise InvalidOption(
            option="_connection",
            reason=f"Django's {wrapper.alias!r} is not the database of this jobq App; pass "
            "the connection of the alias jobq uses (TASKS OPTIONS DATABASE)",
        )


def _same_database(wrapper: BaseDatabaseWrapper, url: sa.URL) -> bool:
    mine = database_url(wrapper.alias)
    return (mine.host, mine.port, mine.database) == (url.host, url.port, url.database)
