"""What MySQL's and MariaDB's errors mean to jobq, by the server's error numbers.

MySQLDialect takes the classification functions as its methods of the same names (see
error_kinds.py for what each promises); its lock claims read is_duplicate_key.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from jobq.dialects.liveness import readable
from jobq.dialects.schema import LOCK_KEY_HELD

# Server error numbers.
_CHECKREAD = 1020  # MariaDB: a row changed since a snapshot read (innodb_snapshot_isolation)
_BAD_FIELD = 1054
_DUPLICATE_KEY = 1062
_NO_SUCH_TABLE = 1146
_DEADLOCK = 1213
# Client error numbers: CR_SERVER_GONE_ERROR, the statement could not be written to the
# socket (a lost connection found while reading the answer is CR_SERVER_LOST, 2013).
_SERVER_GONE = 2006


def errno(error: sa.exc.DBAPIError) -> int | None:
    """The server's error number in ``error``, if the driver gave one."""
    args = getattr(error.orig, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def is_duplicate_key(error: sa.exc.DBAPIError) -> bool:
    """Whether ``error`` is a duplicate of a unique key (an INSERT found the key taken)."""
    return errno(error) == _DUPLICATE_KEY


def is_missing_schema(dialect: object, error: sa.exc.DBAPIError) -> bool:
    """Whether ``error`` says a jobq table or column does not exist."""
    return errno(error) in (_NO_SUCH_TABLE, _BAD_FIELD)


def is_too_large(dialect: object, error: sa.exc.DBAPIError) -> bool:
    """Whether ``error`` says a statement was larger than the server takes."""
    # ER_NET_PACKET_TOO_LARGE, ER_WARN_ALLOWED_PACKET_OVERFLOWED
    return errno(error) in (1153, 1301)


def is_lock_key_conflict(dialect: object, error: sa.exc.DBAPIError) -> bool:
    """Whether ``error`` is jobq_tasks_lock_key_held refusing a second running row of a key."""
    # MySQL 8 names the key table.key, MariaDB key alone.
    return errno(error) == _DUPLICATE_KEY and f"{LOCK_KEY_HELD}'" in str(error.orig)


def is_conflict(dialect: object, error: sa.exc.DBAPIError) -> bool:
    """Whether the server aborted the transaction to break a deadlock (or, on MariaDB, a
    snapshot conflict): the whole transaction was undone and may simply run again."""
    return errno(error) in (_DEADLOCK, _CHECKREAD)


def is_unsent(dialect: object, error: sa.exc.DBAPIError) -> bool:
    """Whether a lost connection's ``error`` says the statement was never sent: the driver
    could not write it (2006), or found its connection closed before writing (PyMySQL's
    InterfaceError (0, ''))."""
    args = getattr(error.orig, "args", ())
    return errno(error) == _SERVER_GONE or (
        isinstance(error, sa.exc.InterfaceError) and tuple(args) == (0, "")
    )


def heard_while_idle(dialect: object, raw: Any) -> bool:
    """Whether idle driver connection ``raw`` heard from the server (jobq.dialects.liveness):
    PyMySQL's socket, or mysqlclient's (fileno()); a closed PyMySQL connection has none."""
    if hasattr(raw, "_sock"):
        return raw._sock is None or readable(raw._sock.fileno())
    fileno = getattr(raw, "fileno", None)
    return fileno is not None and readable(fileno())
