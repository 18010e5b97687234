"""jobq: a job queue whose whole state lives in SQL rows."""

from jobq.errors import (
    DatabaseUnavailable,
    InvalidDatabaseURL,
    InvalidOption,
    InvalidTaskArguments,
    JobqError,
    SchemaNotMigrated,
    UnknownStatus,
)
from jobq.retry import Backoff, ExponentialBackoff, FixedBackoff
from jobq.store import Store
from jobq.tasks import Status, Task

__all__ = [
    "Backoff",
    "DatabaseUnavailable",
    "ExponentialBackoff",
    "FixedBackoff",
    "InvalidDatabaseURL",
    "InvalidOption",
    "InvalidTaskArguments",
    "JobqError",
    "SchemaNotMigrated",
    "Status",
    "Store",
    "Task",
    "UnknownStatus",
]
