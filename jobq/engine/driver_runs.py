"""DriverRuns: the part of Database that runs one statement on a driver connection.

Database.run's own way, past SQLAlchemy's Connection: a statement and its commit in
one round trip where the dialect allows it, on driver connections reused across calls
(detached ones of its own, or the engine's pool's where raw_from_pool), replaced when
the server has closed them: pinged after a long idle time, dropped on the error of a
lost one. In a waiting_to_write() block (an enqueue), a connection is first looked at
for a sign that the server ended its session while it sat idle (Dialect.heard_while_idle:
one poll of its socket), and pinged if so, or after a failure of the block: a dead one is
replaced before anything is sent on it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Any, TypeVar, cast

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from jobq.db.patience import writing
from jobq.dialects.base import Dialect

if TYPE_CHECKING:
    # Type-only: SQLAlchemy's DB-API protocols are not part of every 2.0 release.
    from sqlalchemy.engine.interfaces import DBAPIModule

    from jobq.db.errors import DatabaseUnavailable

# Driver connections run() keeps for reuse; more are closed after use.
_MAX_IDLE = 8
#: Seconds after which an idle driver connection is pinged before it is used again: servers
#: close idle sessions (MySQL after wait_timeout, 8 hours by default; firewalls sooner).
PING_AFTER = 30.0
#: Connections a write looks at in a row (waiting_to_write) before it gives up: enough for
#: a pool whose every connection a restart ended.
STALE_TRIES = 64

_T = TypeVar("_T")


class DriverRuns:
    """Statements run on driver connections; a part of Database (its attributes below)."""

    engine: Engine
    dialect: Dialect
    # Driver connections owned by run(), each with when it was last put back.
    _idle: list[tuple[Any, float]]
    _driver_error: type[DBAPIModule.Error]

    if TYPE_CHECKING:

        def translate(self, error: sa.exc.DBAPIError) -> Exception: ...

        def unavailable(self, error: Exception, *, unsent: bool = False) -> DatabaseUnavailable: ...

    def _run_raw(self, sql: str, params: Any, read: Callable[[Any], _T]) -> _T:
        """Run one statement on a driver connection of our own, reused across calls."""
        if self.dialect.raw_from_pool:
            return self._run_pooled_raw(sql, params, read)
        raw = self._raw_connection()
        cursor = None
        try:
            cursor = raw.cursor()
            self.dialect.raw_begin(cursor)
            cursor.execute(sql, params)
            outcome = read(cursor)
            self.dialect.raw_commit(raw)
            cursor.close()
        except self._driver_error as error:
            lost = self.engine.dialect.is_disconnect(error, raw, cursor)
            if lost:
                _close_quietly(raw)
                # The server, or the way to it, went away: the idle connections most likely
                # went with it, and each would fail one more call once it is back.
                self._close_idle()
            else:
                _rollback_quietly(raw)
                self._idle.append((raw, time.monotonic()))
            raise self._driver_failure(sql, params, error, lost) from None
        except BaseException:
            _close_quietly(raw)  # interrupted mid-statement: its state is unknown
            raise
        if len(self._idle) < _MAX_IDLE:
            self._idle.append((raw, time.monotonic()))
        else:
            _close_quietly(raw)
        return outcome

    def _run_pooled_raw(
        self, sql: str, params: Any, read: Callable[[Any], _T], *, native: bool = False
    ) -> _T:
        """_run_raw on a driver connection borrowed from the engine's pool and given back,
        so that one thread's statements, raw or not, hold one connection between them;
        ``native``: ``sql`` is a Prepared's native_sql, for the dialect's raw_cursor."""
        pooled = self._pooled_raw()
        cursor = None
        try:
            self.dialect.prepare_raw(pooled.dbapi_connection)
            cursor = self.dialect.raw_cursor(pooled.dbapi_connection) if native else pooled.cursor()
            cursor.execute(sql, params)
            outcome = read(cursor)
            cursor.close()
        except self._driver_error as error:
            lost = self.engine.dialect.is_disconnect(error, pooled.dbapi_connection, cursor)
            if lost:
                pooled.invalidate()
            raise self._driver_failure(sql, params, error, lost) from None
        except BaseException:
            pooled.invalidate()  # interrupted mid-statement: its state is unknown
            raise
        finally:
            if pooled.is_valid:
                self.dialect.unprepare_raw(pooled.dbapi_connection)
                pooled.close()  # back to the pool, idle
        return outcome

    def _pooled_raw(self) -> Any:
        """A driver connection of the engine's pool (a _ConnectionFairy); in a
        waiting_to_write() block, one not found dead (see above)."""
        for _ in range(STALE_TRIES):
            try:
                pooled = self.engine.raw_connection()
            except (sa.exc.DBAPIError, self._driver_error) as error:
                raise self.unavailable(error, unsent=True) from None
            if not self._suspect(pooled.dbapi_connection) or self._alive(pooled.dbapi_connection):
                return pooled
            pooled.invalidate()  # dead before anything was sent: take another
        raise self.unavailable(self._all_stale(), unsent=True)

    def _suspect(self, raw: Any) -> bool:
        """Whether a write waiting out an outage should ping ``raw`` before it sends
        anything: the server spoke while it sat idle, or the write failed once already."""
        patience = writing()
        if patience is None:
            return False
        return patience.failed or self.dialect.heard_while_idle(raw)

    def _all_stale(self) -> Exception:
        return ConnectionError(f"{STALE_TRIES} connections in a row were found closed")

    def _driver_failure(
        self, sql: str, params: Any, error: DBAPIModule.Error, lost: bool
    ) -> Exception:
        """What a driver's ``error`` on a raw statement becomes (see translate)."""
        wrapped = sa.exc.DBAPIError.instance(
            sql, params, error, self._driver_error,
            connection_invalidated=lost, dialect=self.engine.dialect,
        )  # fmt: skip
        # ``error`` is an instance of the driver's Error, the base passed along: instance()
        # wraps such an error in a DBAPIError (a StatementError only for errors outside it).
        return self.translate(cast(sa.exc.DBAPIError, wrapped))

    def _forget_idle_connections(self) -> None:
        """In a forked child: drop the parent's connections, unclosed (they are its)."""
        self._idle = []
        self.engine.dispose(close=False)

    def _close_idle(self) -> None:
        """Close the idle driver connections (other threads may take some meanwhile)."""
        while True:
            try:
                raw, _ = self._idle.pop()
            except IndexError:
                return
            _close_quietly(raw)

    def _raw_connection(self) -> Any:
        """A driver connection of our own: an idle one (pinged first if it has been idle
        long enough for the server to have closed it), else a new one."""
        while True:
            try:
                raw, since = self._idle.pop()
            except IndexError:
                break
            fresh = time.monotonic() - since < PING_AFTER and not self._suspect(raw)
            if fresh or self._alive(raw):
                return raw
            _close_quietly(raw)
        pooled = None
        try:
            pooled = self.engine.raw_connection()
            # A round trip on MySQL: the pool's connection may be one the server has ended.
            self.dialect.prepare_raw(pooled.dbapi_connection)
        except (sa.exc.DBAPIError, self._driver_error) as error:
            if pooled is not None:
                pooled.invalidate()
            raise self.unavailable(error, unsent=True) from None
        raw = pooled.dbapi_connection
        pooled.detach()
        return raw

    def _alive(self, raw: Any) -> bool:
        try:
            self.engine.dialect.do_ping(raw)
        except Exception:
            return False
        return True


def _close_quietly(raw: Any) -> None:
    with suppress(Exception):
        raw.close()


def _rollback_quietly(raw: Any) -> None:
    with suppress(Exception):
        raw.rollback()


def ping_when_idle_long(engine: Engine) -> None:
    """Ping a pooled connection idle for PING_AFTER s before it is used, and replace it if
    the server closed it meanwhile (a restart, a timeout): as run() does for its own."""

    def checkin(_dbapi_connection: Any, record: Any) -> None:
        record.info["jobq_idle_since"] = time.monotonic()

    def checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("jobq_idle_since")
        if since is None or time.monotonic() - since < PING_AFTER:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception:
            raise sa.exc.DisconnectionError() from None  # the pool connects anew

    if not sa.event.contains(engine, "checkout", checkout):
        sa.event.listen(engine, "checkin", checkin)
        sa.event.listen(engine, "checkout", checkout)
