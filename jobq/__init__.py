"""jobq: a job queue whose whole state lives in SQL rows.

The locks are in ``jobq.locks`` (Mutex, TimeoutLock, Lease, AdvisoryLock), given a Store.
"""

from jobq.app import App, TaskFunction
from jobq.errors import (
    DatabaseNotFound,
    DatabaseUnavailable,
    InvalidAppPath,
    InvalidDatabaseURL,
    InvalidOption,
    InvalidTaskArguments,
    JobqError,
    LockKindMismatch,
    LockNotAcquired,
    MissingExtra,
    PayloadTooLarge,
    RequiresPostgreSQL,
    SchemaNotMigrated,
    SchemaTooNew,
    UnknownSchedule,
    UnknownStatus,
    UnknownTask,
)
from jobq.executor import Retry, current_task
from jobq.locks import AdvisoryLock, Lease, Mutex, TimeoutLock
from jobq.periodic import Schedule, ScheduleState
from jobq.retry import Backoff, ExponentialBackoff, FixedBackoff
from jobq.schedule import Cron
from jobq.schedule_runs import ScheduleRun
from jobq.store import Store
from jobq.tasks import Status, Task, Undecodable

__all__ = [
    "AdvisoryLock",
    "App",
    "Backoff",
    "Cron",
    "DatabaseNotFound",
    "DatabaseUnavailable",
    "ExponentialBackoff",
    "FixedBackoff",
    "InvalidAppPath",
    "InvalidDatabaseURL",
    "InvalidOption",
    "InvalidTaskArguments",
    "JobqError",
    "Lease",
    "LockKindMismatch",
    "LockNotAcquired",
    "MissingExtra",
    "Mutex",
    "PayloadTooLarge",
    "RequiresPostgreSQL",
    "Retry",
    "Schedule",
    "ScheduleRun",
    "ScheduleState",
    "SchemaNotMigrated",
    "SchemaTooNew",
    "Status",
    "Store",
    "Task",
    "TaskFunction",
    "TimeoutLock",
    "Undecodable",
    "UnknownSchedule",
    "UnknownStatus",
    "UnknownTask",
    "current_task",
]
