"""Database: an engine with its dialect, and the units of work that every SQL caller uses.

A unit of work is one statement (autocommit where the dialect allows it) or, when
``atomic``, one transaction; either way, driver errors that mean "never migrated" or
"cannot reach the server" come out as jobq's own exceptions.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from jobq.dialects import Dialect, dialect_named, supported
from jobq.dialects.base import READ_ONLY
from jobq.errors import DatabaseUnavailable, InvalidDatabaseURL, SchemaNotMigrated

DEFAULT_DATABASE_URL = "sqlite:///jobq.db"


def database_url(explicit: str | sa.URL | None = None) -> str | sa.URL:
    """The URL to use: ``explicit``, else $JOBQ_DATABASE_URL, else sqlite:///jobq.db."""
    return explicit or os.environ.get("JOBQ_DATABASE_URL") or DEFAULT_DATABASE_URL


class Database:
    """A SQLAlchemy engine configured for jobq, with its Dialect."""

    def __init__(self, url_or_engine: str | sa.URL | Engine | None = None) -> None:
        if isinstance(url_or_engine, Engine):
            engine = url_or_engine
            self.dialect = dialect_for(engine.url)
        else:
            url = parse_url(database_url(url_or_engine))
            self.dialect = dialect_for(url)
            url = self.dialect.normalize_url(url)
            try:
                engine = sa.create_engine(url, **self.dialect.engine_options(url))
            except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ImportError) as error:
                raise InvalidDatabaseURL(url=safe_url(url), reason=error) from None
        self.dialect.configure_engine(engine)
        self.engine: Engine = engine
        # Same pool; connections checked out through it run each statement in autocommit.
        self._one_statement_engine = (
            engine.execution_options(isolation_level="AUTOCOMMIT")
            if self.dialect.one_statement_autocommit
            else engine
        )

    def __repr__(self) -> str:
        return safe_url(self.engine.url)

    def dispose(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()

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
        try:
            conn = engine.connect()
        except sa.exc.DBAPIError as error:
            raise self.unavailable(error) from None
        with conn, self.translated():
            if engine is not self.engine:
                yield conn
                return
            if read_only:
                conn.execution_options(**{READ_ONLY: True})
            with conn.begin():
                yield conn

    @contextmanager
    def translated(self) -> Iterator[None]:
        """Turn driver errors that mean 'not migrated' or 'cannot reach' into jobq's."""
        try:
            yield
        except sa.exc.DBAPIError as error:
            if self.dialect.is_missing_schema(error):
                raise SchemaNotMigrated(database=self.engine.url.database) from None
            if error.connection_invalidated:
                raise self.unavailable(error) from None
            raise

    def unavailable(self, error: sa.exc.DBAPIError) -> DatabaseUnavailable:
        """DatabaseUnavailable for ``error``, naming host and database, never the password."""
        url = self.engine.url
        reason = str(error.orig).strip().splitlines()[0] if error.orig else str(error)
        if url.password:
            reason = reason.replace(str(url.password), "***")
        host = f"{url.host}:{url.port}" if url.port else url.host or "this machine"
        return DatabaseUnavailable(database=url.database, host=host, reason=reason)


def parse_url(url: str | sa.URL) -> sa.URL:
    """``url`` parsed, or InvalidDatabaseURL."""
    try:
        return sa.make_url(url)
    except sa.exc.ArgumentError:
        raise InvalidDatabaseURL(
            url=safe_url(url), reason="expected dialect://user:password@host:port/database"
        ) from None


def safe_url(url: str | sa.URL) -> str:
    """The URL with its password masked."""
    if isinstance(url, sa.URL):
        return url.render_as_string(hide_password=True)
    try:
        return sa.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        # Unparseable: mask anything between ':' and '@' of the authority.
        head, sep, tail = url.partition("@")
        return (head.rsplit(":", 1)[0] + ":***@" + tail) if sep and ":" in head else url


def dialect_for(url: sa.URL) -> Dialect:
    """The Dialect for ``url``'s database, or InvalidDatabaseURL naming those supported."""
    dialect = dialect_named(url.get_backend_name())
    if dialect is None:
        raise InvalidDatabaseURL(
            url=safe_url(url),
            reason=f"jobq does not run on {url.get_backend_name()!r}; "
            f"supported: {', '.join(supported())}",
        )
    return dialect
