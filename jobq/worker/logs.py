"""Worker logging: plain text lines or JSON lines, one per event, and their wording.

Task lines carry their fields (task_id, task, queue, attempt, status, ...) as ``extra``
attributes of the record; the JSON format writes them as keys of their own, so log
pipelines need not parse the message.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TextIO

from jobq.db.durations import format_duration

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

#: The extra attributes that JSON lines copy from a record when it has them. A failed
#: run's end has ``max_attempts`` and ``final``, and unless final ``retry_in`` (seconds)
#: and ``retry_at`` (UTC); the worker's "stopped" line has ``worker_id`` and ``counts``.
FIELDS = (
    "task_id", "task", "queue", "attempt", "status", "duration_ms", "error",
    "max_attempts", "final", "retry_in", "retry_at", "worker_id", "counts",
)  # fmt: skip
#: How the "stopped" line names a worker's counts (Worker.stats), in this order; any
#: other count is named by its key.
_COUNTS = {
    "done": "done", "failed": "failed", "cancelled": "cancelled", "snoozed": "snoozed",
    "released": "released to the queue", "timed_out": "timed out",
    "lost": "lost their leases", "stale": "recorded too late (stale)",
    "unrecorded": "left unrecorded", "rescued": "rescued after their leases expired",
}  # fmt: skip


#: Lines a LineBuffer holds at most before it writes them.
_BUFFERED_LINES = 512
#: Seconds a buffered line waits at most before it is written.
_BUFFERED_SECONDS = 0.05


class TextFormatter(logging.Formatter):
    """TEXT_FORMAT lines, with the second's local time formatted once per second.

    logging.Formatter formats the time anew for every record (localtime and strftime), a
    third of a task line's cost; the text is the same: ``2026-11-24 18:02:03,417``.
    """

    #: logging.Formatter's own, declared a str: Formatter allows None (no milliseconds),
    #: and formatTime below always writes them.
    default_msec_format: str = "%s,%03d"

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)
        self._second: int | None = None
        self._second_text = ""

    def format(self, record: logging.LogRecord) -> str:
        if record.exc_info or record.exc_text or record.stack_info:
            return super().format(record)
        # TEXT_FORMAT, written out: Formatter.format's general path costs twice as much.
        record.message = record.getMessage()
        record.asctime = self.formatTime(record)
        return f"{record.asctime} {record.levelname} {record.name}: {record.message}"

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        second = int(record.created)
        if second != self._second:
            # A race between threads here only formats the same second twice.
            self._second_text = time.strftime(self.default_time_format, self.converter(second))
            self._second = second
        return self.default_msec_format % (self._second_text, record.msecs)


class RecordMaker:
    """Makes the records of one call site's lines as Logger.log would, at half its cost: a
    worker logs two lines per task, at tens of thousands a second.

    Logger.log looks for its caller by walking the stack, and LogRecord's constructor asks
    for the thread, the process and their names anew each time; here those attributes are
    taken once per thread (from a record made the usual way, its pathname, lineno and
    funcName those of the first call) and copied. The records are plain LogRecords with
    every attribute, handled by the logger as any other: its level, filters and handlers
    apply. A record factory set with logging.setLogRecordFactory is used whenever one is.
    """

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        # The attributes that do not change between records, by (pid, thread id, level).
        self._templates: dict[tuple[int, int, int], dict[str, Any]] = {}

    def log(self, level: int, msg: str, args: tuple[Any, ...], extra: Mapping[str, Any]) -> None:
        """logger.log(level, msg, *args, extra=extra), from the caller's line."""
        logger = self.logger
        if not logger.isEnabledFor(level):
            return
        key = (os.getpid(), threading.get_ident(), level)
        template = self._templates.get(key)
        if template is None or logging.getLogRecordFactory() is not logging.LogRecord:
            caller = sys._getframe(1)
            path, line, func = caller.f_code.co_filename, caller.f_lineno, caller.f_code.co_name
            if logging.getLogRecordFactory() is not logging.LogRecord:
                record = logger.makeRecord(
                    logger.name, level, path, line, msg, args, None, func, extra
                )
                logger.handle(record)
                return
            first = logging.LogRecord(logger.name, level, path, line, "", (), None, func)
            template = {k: v for k, v in first.__dict__.items() if k not in _PER_RECORD}
            self._templates[key] = template
        now = time.time()
        values = {**template, **extra}
        values.update(
            msg=msg, args=args, created=now, msecs=int((now - int(now)) * 1000) + 0.0,
            relativeCreated=(now - _START) * 1000,
        )  # fmt: skip
        record = logging.LogRecord.__new__(logging.LogRecord)
        record.__dict__ = values
        logger.handle(record)


#: LogRecord attributes that differ from record to record.
_PER_RECORD = frozenset(("msg", "args", "created", "msecs", "relativeCreated"))
#: When logging was imported: the origin of a record's relativeCreated.
_START: float = logging._startTime  # type: ignore[attr-defined]


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, message, fields."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for field in FIELDS:
            if field in record.__dict__:
                line[field] = record.__dict__[field]
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class LineBuffer(logging.StreamHandler[TextIO]):
    """A StreamHandler that writes its lines in batches: a worker logs two lines per task,
    and one write and flush per line cost as much as making the line.

    A line waits at most ``_BUFFERED_SECONDS`` (a thread of the handler writes it), and a
    warning or worse is written at once with the lines before it. logging.shutdown, run at
    exit, writes what is left; a process killed with SIGKILL loses the last moment's lines.

    Lines are made and queued without the handler's lock, which only writing takes: the
    slot threads of a worker log at once, and a lock held across formatting made them
    queue up behind one another (and behind the thread scheduler).
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        super().__init__(stream)
        # deque: appends and pops from different threads lose nothing, without a lock.
        self._lines: deque[str] = deque()
        self._pending = threading.Event()
        self._writer: threading.Thread | None = None
        self._writer_pid = 0

    def handle(self, record: logging.LogRecord) -> bool:
        rv = self.filter(record)
        if rv:
            self.emit(record)
        return bool(rv)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:
            self.handleError(record)
            return
        self._lines.append(line + self.terminator)
        if record.levelno >= logging.WARNING or len(self._lines) >= _BUFFERED_LINES:
            self.flush()
        elif not self._pending.is_set():
            self._wake_writer()

    def flush(self) -> None:
        with self.lock:  # type: ignore[union-attr]
            self._write()

    def _write(self) -> None:
        """Write the lines queued (with the lock held: one writer at a time)."""
        lines = []
        try:
            while True:
                lines.append(self._lines.popleft())
        except IndexError:
            pass
        if not lines:
            return
        text = "".join(lines)
        try:
            self.stream.write(text)
            self.stream.flush()
        except Exception:
            self.handleError(logging.makeLogRecord({"msg": text}))

    def _wake_writer(self) -> None:
        # A forked child has no thread of its parent's: it starts its own.
        if self._writer is None or self._writer_pid != os.getpid():
            with self.lock:  # type: ignore[union-attr]
                if self._writer is None or self._writer_pid != os.getpid():
                    self._writer_pid = os.getpid()
                    self._writer = threading.Thread(
                        target=self._write_pending, name="jobq-log-writer", daemon=True
                    )
                    self._writer.start()
        self._pending.set()

    def _write_pending(self) -> None:
        while True:
            self._pending.wait()
            time.sleep(_BUFFERED_SECONDS)  # let the lines of this moment gather
            # Cleared before the lines are taken: a line queued after this sets it again.
            self._pending.clear()
            self.flush()


def lost_connection_reset(record: logging.LogRecord) -> bool:
    """Whether ``record`` is SQLAlchemy's pool saying (with a traceback) that it could not
    reset a connection returned to it because the connection was lost: the pool drops that
    connection by itself, and a worker has said once that its database is unreachable
    (jobq.db.outage), so the record is noise, and a traceback in the worker's log."""
    if not record.name.startswith("sqlalchemy.pool") or record.exc_info is None:
        return False
    error = record.exc_info[1]
    lost = isinstance(error, OSError) or type(error).__name__ == "OperationalError"
    return record.getMessage() == "Exception during reset or similar" and lost


def configure(level: str, log_format: str) -> None:
    """Send the root logger's records to stderr at ``level``, as 'text' or 'json' lines."""
    handler = LineBuffer(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    handler.addFilter(lambda record: not lost_connection_reset(record))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # A worker only reads the schema's revision; Alembic announces its plugins at INFO
    # when it is imported for that, which is noise in a worker's log.
    logging.getLogger("alembic").setLevel(logging.WARNING)


def seconds(delay: float) -> str:
    """A delay for people: ``8.0s`` under a minute, else ``2m 5s``, ``3h``, ``1d 4h``."""
    return f"{delay:.1f}s" if delay < 60 else format_duration(delay)


def in_and_at(delay: float, now: float | None = None) -> str:
    """``in 8.0s at 10:32:05``: a delay from ``now`` (time.time()), and the local time it
    ends at, as the text log's timestamps show time (with the date if not today)."""
    start = time.time() if now is None else now
    at = datetime.fromtimestamp(start + delay)
    today = datetime.fromtimestamp(start).date()
    shown = at.strftime("%H:%M:%S" if at.date() == today else "%Y-%m-%d %H:%M:%S")
    return f"in {seconds(delay)} at {shown}"


def stopped_summary(counts: Mapping[str, int]) -> str:
    """A worker's counts as a sentence: ``captured 10 tasks (8 done, 2 failed)``."""
    captured = counts.get("captured", 0)
    parts = [f"{counts[key]} {name}" for key, name in _COUNTS.items() if counts.get(key)]
    parts += [
        f"{key.replace('_', ' ')}: {n}"
        for key, n in sorted(counts.items())
        if n and key != "captured" and key not in _COUNTS
    ]
    text = f"captured {captured} task{'' if captured == 1 else 's'}"
    return f"{text} ({', '.join(parts)})" if parts else text
