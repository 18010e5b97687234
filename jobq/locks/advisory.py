"""AdvisoryLock: PostgreSQL's advisory locks, by a name's 64-bit key."""

from __future__ import annotations

from contextlib import suppress
from types import TracebackType

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobq.core.store import TaskStore
from jobq.db.errors import JobqError
from jobq.db.validation import check_seconds
from jobq.locks.base import (
    _Lock,
    advisory_key,
)


class AdvisoryLock(_Lock):
    """A PostgreSQL advisory lock on ``advisory_key(name)``; no table involved.

    By default transaction-scoped (``pg_try_advisory_xact_lock``): held until the
    transaction that took it ends. ``acquire(connection=conn)`` takes it in the caller's
    transaction, which frees it by committing or rolling back; otherwise the lock opens a
    connection and a transaction of its own (``lock.connection``: do the work it guards
    there), and ``release()`` commits them; a ``with`` block whose body raises rolls
    them back. With ``session=True`` it is a session lock (``pg_try_advisory_lock``),
    held by its connection until ``release()``. ``key`` is the 64-bit key, which other
    programs can compute (``jobq.locks.advisory_key``: the first 8 bytes of the
    name's SHA-256, big-endian, signed) to take the same lock. ``with`` raises
    jobq.LockNotAcquired when it is not taken within ``wait`` seconds.

    On PostgreSQL:

    ```text
    with app.advisory_lock("rebuild-index") as lock:
        lock.connection.execute(...)  # committed as the block ends, and the lock with it
    ```

    Raises:
        RequiresPostgreSQL: the database is SQLite or MySQL.
        NeedsSession: ``session=True`` through a transaction pooler.
        InvalidOption: an empty name or a negative ``wait``.

    Example:
        ```python
        import jobq

        app = jobq.App()  # SQLite here
        try:
            app.advisory_lock("rebuild-index")
        except jobq.RequiresPostgreSQL as error:
            assert str(error) == "AdvisoryLock requires PostgreSQL; this database is sqlite."
        ```
    """

    kind = "advisory lock"

    def __init__(
        self, store: TaskStore, name: str, *, session: bool = False, wait: float = 0.0
    ) -> None:
        super().__init__(store, name, wait)
        self.session = session
        self.key = advisory_key(name)
        self._take = store.dialect.advisory_lock_statement(session=session)
        #: The connection that holds the lock while it is held.
        self.connection: Connection | None = None
        self._own_connection = False

    def acquire(self, wait: float | None = None, *, connection: Connection | None = None) -> bool:
        """Take the lock, trying for up to ``wait`` seconds (default: the lock's own);
        whether it was taken. Given ``connection``, in that connection's transaction.
        JobqError if this object holds it already."""
        if wait is not None:
            check_seconds("wait", wait)
        if self.connection is not None:
            raise JobqError(f"advisory lock {self.name!r} is already held by this object")
        self._own_connection = connection is None
        if connection is None:
            engine = self.store.engine
            # A session lock lives as long as its connection; no transaction needed.
            if self.session:
                engine = engine.execution_options(isolation_level="AUTOCOMMIT")
            try:
                connection = engine.connect()
            except sa.exc.DBAPIError as error:
                raise self.store.db.unavailable(error) from None
            if not self.session:
                connection.begin()
        self.connection = connection
        try:
            taken = super().acquire(wait)
        except BaseException:
            self._let_go()
            raise
        if not taken:
            self._let_go()
        return taken

    def _try(self) -> bool:
        assert self.connection is not None
        with self.store.db.translated():
            return bool(self.connection.execute(self._take, {"key": self.key}).scalar())

    def release(self) -> bool:
        """Free the lock: commit its own transaction, or unlock the session lock; whether held.

        A transaction-scoped lock taken in the caller's transaction cannot be freed early;
        it ends with that transaction, and this returns False.
        """
        if self.connection is None:
            return False
        if not self.session and not self._own_connection:
            self.connection = None  # the caller's transaction holds it; we let go of it
            return False
        freed = True
        if self.session:
            unlock = self.store.dialect.advisory_unlock_statement()
            with self.store.db.translated():
                freed = bool(self.connection.execute(unlock, {"key": self.key}).scalar())
        self._let_go(commit=True)
        return freed

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if error is not None and not self.session and self._own_connection:
            self._let_go()  # the block failed: roll its work back, which frees the lock
            return
        super().__exit__(kind, error, traceback)

    def __del__(self) -> None:
        # Dropped while holding a lock on its own connection: close that connection rather
        # than let the pool hand it on with the lock still held.
        connection = getattr(self, "connection", None)
        if connection is not None and self._own_connection:
            with suppress(Exception):
                connection.invalidate()

    def _let_go(self, commit: bool = False) -> None:
        connection, self.connection = self.connection, None
        if connection is None or not self._own_connection:
            return
        try:
            if commit and connection.in_transaction():
                connection.commit()
        finally:
            connection.close()


# --- operators: list, release by name, purge ----------------------------------------------
