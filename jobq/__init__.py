"""jobq: a job queue whose whole state lives in SQL rows."""

from jobq.app import App, TaskFunction
from jobq.errors import (
    DatabaseUnavailable,
    InvalidAppPath,
    InvalidDatabaseURL,
    InvalidOption,
    InvalidTaskArguments,
    JobqError,
    SchemaNotMigrated,
    UnknownStatus,
    UnknownTask,
)
from jobq.executor import Retry
from jobq.retry import Backoff, ExponentialBackoff, FixedBackoff
from jobq.store import Store
from jobq.tasks import Status, Task

__all__ = [
    "App",
    "Backoff",
    "DatabaseUnavailable",
    "ExponentialBackoff",
    "FixedBackoff",
    "InvalidAppPath",
    "InvalidDatabaseURL",
    "InvalidOption",
    "InvalidTaskArguments",
    "JobqError",
    "Retry",
    "SchemaNotMigrated",
    "Status",
    "Store",
    "Task",
    "TaskFunction",
    "UnknownStatus",
    "UnknownTask",
]
