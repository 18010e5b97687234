"""The exceptions jobq raises; each class's docstring is its default message."""

from __future__ import annotations


def first_line(error: BaseException) -> str:
    """The first line of ``error``'s message (its driver error's, for SQLAlchemy's), or
    its type's name when it says nothing."""
    text = str(getattr(error, "orig", None) or error).strip()
    return text.splitlines()[0] if text else type(error).__name__


class JobqError(Exception):
    """jobq failed."""

    def __init__(self, message: str | None = None, **context: object) -> None:
        self.context = context
        super().__init__(message or (self.__doc__ or "").strip().format(**context))


class InvalidDatabaseURL(JobqError, ValueError):
    """The database URL {url!r} is not valid: {reason}"""


class DatabaseUnavailable(JobqError):
    """Cannot connect to database {database!r} on {host}: {reason}"""

    #: Whether the write that failed certainly wrote nothing: it never reached the server,
    #: or its transaction never committed (jobq.db.patience tries only those again).
    nothing_written = False


class DatabaseNotFound(JobqError):
    """Database file {path!r} does not exist; check its URL, or run `jobq migrate` to create it."""


class SchemaNotMigrated(JobqError):
    """The jobq tables are missing or out of date in database {database!r}; run `jobq migrate`."""


class SchemaTooNew(JobqError):
    """Database {database!r} has jobq revision {revision!r}, unknown to this jobq; upgrade jobq."""


class SchemaConflict(JobqError):
    """Database {database!r} has table(s) {tables} but no jobq revision; drop or rename them."""


class InvalidTaskArguments(JobqError, TypeError):
    """Argument {argument!r} of task {task!r} is not JSON-serialisable: {reason}"""


class InvalidOption(JobqError, ValueError):
    """Option {option!r} is invalid: {reason}"""


class UnknownStatus(JobqError, ValueError):
    """Unknown status {status!r}; expected one of: {expected}"""


class UnknownTask(JobqError, LookupError):
    """No task named {name!r} is registered in this app (registered: {registered})."""


class InvalidAppPath(JobqError, ValueError):
    """Cannot load the app {path!r}: {reason}"""


class RequiresPostgreSQL(JobqError):
    """{feature} requires PostgreSQL; this database is {database}."""


class NeedsSession(JobqError):
    """{what} needs a session of its own; a transaction pooler (jobq_pooler) keeps none: {advice}"""


class LockNotAcquired(JobqError):
    """Could not acquire {kind} {name!r} within {wait:g} s: another holder has it."""


class LockKindMismatch(JobqError, ValueError):
    """Lock {name!r} is a {existing}, not a {requested}; a lock name belongs to one kind."""


class UnknownSchedule(JobqError, LookupError):
    """No schedule named {name!r} (see `jobq cron list`)."""


class MissingExtra(JobqError, ImportError):
    """{feature} needs the {extra!r} extra: pip install 'jobq[{extra}]'"""


class TigerBeetleUnavailable(JobqError):
    """TigerBeetle cluster {cluster} at {addresses} did not answer within {seconds:g} s"""


class UnknownLimit(JobqError, LookupError):
    """Queue {queue!r} has no limit (see `jobq limits show`)."""


class PayloadTooLarge(InvalidTaskArguments):
    """{what} take {size:,} bytes, more than this database takes in one statement ({why})"""


class TaskNotFound(JobqError, LookupError):
    """There is no task {id} (it never existed, or it was pruned or purged)."""


class InvalidWorkflow(JobqError, ValueError):
    """Invalid workflow: {reason}"""


class WorkflowNotFound(JobqError, LookupError):
    """There is no workflow {id} (it never existed, or its nodes were pruned)."""


class TaskFailed(JobqError):
    """Task {id} failed: {summary}"""

    def __init__(self, message: str | None = None, **context: object) -> None:
        super().__init__(message, **context)
        #: The error stored with the task, its traceback included.
        self.error: str | None = context.get("error")  # type: ignore[assignment]
        self.task_id = context.get("id")


class TaskCancelled(JobqError):
    """Task {id} was cancelled: {summary}"""

    def __init__(self, message: str | None = None, **context: object) -> None:
        super().__init__(message, **context)
        #: What the row says of the cancel ("cancelled on request", or a run's error).
        self.error: str | None = context.get("error")  # type: ignore[assignment]
        self.task_id = context.get("id")


class ResultTimeout(JobqError, TimeoutError):
    """Task {id} did not finish within {timeout:g} s (it is {status} now)."""


class Cancelled(JobqError):
    """Task {id} was cancelled while it ran (jobq.check_cancelled saw the request)."""
