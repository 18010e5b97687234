"""What a database error means to jobq, and the defaults of the classification.

Dialect takes these functions as its methods of the same names; each database overrides
them with its own error codes (postgresql.py, sqlite.py, mysql_errors.py). Database reads
them to translate errors and to run a transaction again after a conflict.
"""

from __future__ import annotations

import sqlalchemy as sa


def is_missing_schema(dialect: object, error: sa.exc.DBAPIError) -> bool:
    """Whether ``error`` says a jobq table or column does not exist."""
    raise NotImplementedError


def is_too_large(dialect: object, error: sa.exc.DBAPIError) -> bool:
    """Whether ``error`` says a statement was larger than the database takes."""
    return False


def is_lock_key_conflict(dialect: object, error: sa.exc.DBAPIError) -> bool:
    """Whether ``error`` is jobq_tasks_lock_key_held refusing a second running row of a key."""
    raise NotImplementedError


def is_conflict(dialect: object, error: sa.exc.DBAPIError) -> bool:
    """Whether the database aborted the transaction to break a deadlock (or a
    serialization conflict): the whole transaction was undone and may simply run again."""
    return False


def is_unsent(dialect: object, error: sa.exc.DBAPIError) -> bool:
    """Whether ``error``, a lost connection, says the statement never reached the server
    (it could not be sent): it certainly ran nowhere, and may be sent again elsewhere."""
    return False
