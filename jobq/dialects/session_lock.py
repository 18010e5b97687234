"""Session-level locks held around a block: the one that serialises migrations.

Each dialect supplies the SQL taking and releasing its lock (Dialect.migration_lock_statements);
holding it, and giving it back whatever happens, is the same everywhere.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobq.db.errors import LockNotAcquired

#: The name of the lock that serialises migrations (see Dialect.migration_lock).
MIGRATION_LOCK = "jobq migrate"


@contextmanager
def session_lock(conn: Connection, take: str, release: str, wait: float) -> Iterator[None]:
    """Hold a session-level lock taken by ``take`` (one row: 1 once taken) while the block runs."""
    taken = conn.exec_driver_sql(take, {"wait": wait}).scalar()
    conn.commit()  # a session's lock outlives its transaction; the block begins its own
    if taken != 1:
        raise LockNotAcquired(kind="lock", name=MIGRATION_LOCK, wait=wait)
    try:
        yield
    finally:
        release_session_lock(conn, release)


def release_session_lock(conn: Connection, release: str) -> None:
    """Run ``release``; should that fail, close the session instead, which frees its locks.

    Never raises: whatever the block that held the lock did stands, and a pooled
    connection must never go back to the pool still holding the lock.
    """
    try:
        conn.exec_driver_sql(release)
        conn.commit()
    except sa.exc.DBAPIError:
        conn.invalidate()
