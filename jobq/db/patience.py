"""Patience: callers that only read may wait out a short outage, up to a deadline of theirs.

A waiter for a result, a reading command of the CLI, a page of the dashboard: each says
so with ``patiently(deadline)``, and within that block (in this thread, and in the
threads and tasks started with its context: asyncio.to_thread, Starlette's threadpool)
every Database rides out a server that restarts or ends its sessions:

- a unit of work that cannot reach the database (connecting is refused, or its connection
  was lost: a restart, a killed session) is tried again on another connection, at once
  the first time (a stale pooled connection is replaced, as SQLAlchemy's pool_pre_ping
  would, without a round trip before each statement), then after growing pauses while
  the deadline allows; once it has passed, the last DatabaseUnavailable is raised;
- a connection handed to a block of several statements (Database.unit), which cannot be
  run again, is pinged first (one round trip, for patient callers only).

The caller promises that what it runs may run twice: reads, and writes that change
nothing the second time. Outside such a block (a worker's capture and ends) nothing
changes: one lost connection is one DatabaseUnavailable, for the worker's loop to judge
(jobq.db.outage), and no statement gains a ping.

A write that must not happen twice (an enqueue) waits differently, in a
``waiting_to_write(deadline, what)`` block: it is tried again only when it certainly
wrote nothing (DatabaseUnavailable.nothing_written: connecting failed, a pooled
connection proved dead before the statement was sent, or the transaction was lost before
its COMMIT was sent); a connection lost while the statement or its COMMIT was in flight
is raised at once, its message saying ``what`` may or may not have been written. When the
deadline passes, the last error is raised, saying how long it waited.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TypeVar

from jobq.db.errors import DatabaseUnavailable

#: Seconds before the second retry of a unit that could not reach the database (the
#: first is at once); each pause doubles...
FIRST_PAUSE = 0.05
#: ...up to this many seconds.
MAX_PAUSE = 1.0

_T = TypeVar("_T")


class Deadline:
    """When a wait of ``timeout`` seconds (None: no end) started counting down."""

    def __init__(self, timeout: float | None) -> None:
        self.timeout = timeout
        self.began = time.monotonic()
        self._end = None if timeout is None else self.began + timeout

    def remaining(self) -> float | None:
        """Seconds left (never below 0), or None for a wait without end."""
        return None if self._end is None else max(self._end - time.monotonic(), 0.0)

    def passed(self) -> bool:
        return self._end is not None and time.monotonic() >= self._end


@dataclass
class Patience:
    """What a block of patient code waits for: its ``deadline``; ``writes``: what the
    block writes (waiting_to_write), None for readers."""

    deadline: Deadline
    writes: str | None = None
    #: Whether a unit of the block failed to reach the database (a write then pings the
    #: connections it takes before it sends anything).
    failed: bool = False


# The patience of the innermost patiently() or waiting_to_write() block around the code.
_patience: ContextVar[Patience | None] = ContextVar("jobq_patience", default=None)
# Whether a write's retry loop (outlasting) runs around the code: inner ones try once.
_looping: ContextVar[bool] = ContextVar("jobq_write_looping", default=False)


@contextmanager
def patiently(deadline: Deadline) -> Iterator[None]:
    """Units of work run in this block wait out an outage until ``deadline`` (see above)."""
    token = _patience.set(Patience(deadline))
    try:
        yield
    finally:
        _patience.reset(token)


class waiting_to_write:
    """``with waiting_to_write(deadline, what):`` units of work run in the block write
    ``what`` ("the enqueue"): they wait out an outage until ``deadline``, tried again only
    when they certainly wrote nothing (see above). It replaces a reader's patience around
    it. A class, not a generator: it is on every enqueue's way."""

    __slots__ = ("_patience", "_token")

    def __init__(self, deadline: Deadline, what: str) -> None:
        self._patience = Patience(deadline, what)

    def __enter__(self) -> None:
        self._token = _patience.set(self._patience)

    def __exit__(self, *_: object) -> None:
        _patience.reset(self._token)


def is_patient() -> bool:
    """Whether the running code is in a patiently() block (a reader's)."""
    patience = _patience.get()
    return patience is not None and patience.writes is None


def writing() -> Patience | None:
    """The patience of the waiting_to_write() block around the running code, if any."""
    patience = _patience.get()
    return patience if patience is not None and patience.writes is not None else None


def outlasting(attempt: Callable[[], _T]) -> _T:
    """``attempt()``; in a patiently() block, tried again while it raises
    DatabaseUnavailable: at once, then after growing pauses until the deadline passes;
    in a waiting_to_write() block, likewise while what it raises wrote nothing."""
    patience = _patience.get()
    if patience is None:
        return attempt()
    if patience.writes is not None:
        return attempt() if _looping.get() else _outlasting_write(patience, attempt)
    deadline = patience.deadline
    pause = 0.0
    while True:
        try:
            return attempt()
        except DatabaseUnavailable:
            remaining = deadline.remaining()
            if pause > 0 and remaining == 0:
                raise
        time.sleep(pause if remaining is None else min(pause, remaining))
        pause = min(max(pause * 2, FIRST_PAUSE), MAX_PAUSE)


def _outlasting_write(patience: Patience, attempt: Callable[[], _T]) -> _T:
    """outlasting() in a waiting_to_write() block: the loop around every unit inside."""
    deadline = patience.deadline
    token = _looping.set(True)
    try:
        pause = 0.0
        while True:
            try:
                return attempt()
            except DatabaseUnavailable as error:
                if not error.nothing_written:
                    raise  # it may have been written: never twice
                remaining = deadline.remaining()
                if remaining == 0:
                    if not deadline.timeout:
                        raise  # no wait: refused at once
                    raise _gave_up(error, deadline) from None
            patience.failed = True
            time.sleep(pause if remaining is None else min(pause, remaining))
            pause = min(max(pause * 2, FIRST_PAUSE), MAX_PAUSE)
    finally:
        _looping.reset(token)


@contextmanager
def reading_for_a_write() -> Iterator[None]:
    """A read that a write of the waiting_to_write() block around it needs first (the
    settings it depends on): with a wait, it waits out an outage as a reader does, until
    the write's deadline; without, it is tried once, as the write would be (a pooled
    connection found dead before anything is sent is replaced). Should it fail, the error
    says that nothing was written. Outside such a block, nothing changes."""
    patience = writing()
    if patience is None:
        yield
        return
    deadline = patience.deadline
    token = _patience.set(Patience(deadline)) if deadline.timeout else None
    try:
        yield
    except DatabaseUnavailable as error:
        if deadline.timeout:
            raise _gave_up(error, deadline) from None
        raise _nothing_written(error, error.context.get("reason")) from None
    finally:
        if token is not None:
            _patience.reset(token)


def _gave_up(error: DatabaseUnavailable, deadline: Deadline) -> DatabaseUnavailable:
    """``error``, saying how long the write waited, and that nothing was written."""
    waited = time.monotonic() - deadline.began
    return _nothing_written(
        error, f"{error.context.get('reason')} (waited {waited:.1f} s; nothing was written)"
    )


def _nothing_written(error: DatabaseUnavailable, reason: object) -> DatabaseUnavailable:
    """A DatabaseUnavailable of ``error``'s database and host, for ``reason``, that says
    the write wrote nothing."""
    context = error.context
    unwritten = DatabaseUnavailable(
        database=context.get("database"), host=context.get("host"), reason=reason
    )
    unwritten.nothing_written = True
    return unwritten
