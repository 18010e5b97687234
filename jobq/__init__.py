"""jobq: a job queue whose whole state lives in SQL rows.

The locks are in ``jobq.locks`` (Mutex, TimeoutLock, Lease, AdvisoryLock), given a Store.
"""

from jobq.app import App, TaskFunction
from jobq.app.store import Store
from jobq.core.retry import Backoff, ExponentialBackoff, FixedBackoff
from jobq.cron.periodic import Schedule, ScheduleState
from jobq.cron.runs import ScheduleRun
from jobq.cron.schedule import Cron
from jobq.db.errors import (
    Cancelled,
    DatabaseNotFound,
    DatabaseUnavailable,
    InvalidAppPath,
    InvalidDatabaseURL,
    InvalidOption,
    InvalidTaskArguments,
    InvalidWorkflow,
    JobqError,
    LockKindMismatch,
    LockNotAcquired,
    MissingExtra,
    NeedsSession,
    PayloadTooLarge,
    RequiresPostgreSQL,
    ResultTimeout,
    SchemaConflict,
    SchemaNotMigrated,
    SchemaTooNew,
    TaskCancelled,
    TaskFailed,
    TaskNotFound,
    UnknownSchedule,
    UnknownStatus,
    UnknownTask,
    WorkflowNotFound,
)
from jobq.db.tasks import Status, Task, Undecodable
from jobq.lifecycle.handles import TaskHandle
from jobq.lifecycle.in_task import Snooze, check_cancelled, current_task, set_progress
from jobq.locks import AdvisoryLock, Lease, Mutex, TimeoutLock
from jobq.worker.executor import Retry
from jobq.workflows import (
    Signature,
    Workflow,
    WorkflowHandle,
    chain,
    chord,
    group,
    parent_results,
)

__all__ = [
    "AdvisoryLock",
    "App",
    "Backoff",
    "Cancelled",
    "Cron",
    "DatabaseNotFound",
    "DatabaseUnavailable",
    "ExponentialBackoff",
    "FixedBackoff",
    "InvalidAppPath",
    "InvalidDatabaseURL",
    "InvalidOption",
    "InvalidTaskArguments",
    "InvalidWorkflow",
    "JobqError",
    "Lease",
    "LockKindMismatch",
    "LockNotAcquired",
    "MissingExtra",
    "Mutex",
    "NeedsSession",
    "PayloadTooLarge",
    "RequiresPostgreSQL",
    "ResultTimeout",
    "Retry",
    "Schedule",
    "ScheduleRun",
    "ScheduleState",
    "SchemaConflict",
    "SchemaNotMigrated",
    "SchemaTooNew",
    "Signature",
    "Snooze",
    "Status",
    "Store",
    "Task",
    "TaskCancelled",
    "TaskFailed",
    "TaskFunction",
    "TaskHandle",
    "TaskNotFound",
    "TimeoutLock",
    "Undecodable",
    "UnknownSchedule",
    "UnknownStatus",
    "UnknownTask",
    "Workflow",
    "WorkflowHandle",
    "WorkflowNotFound",
    "chain",
    "check_cancelled",
    "chord",
    "current_task",
    "group",
    "parent_results",
    "set_progress",
]
