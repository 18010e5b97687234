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
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
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
        self._end = None if timeout is None else time.monotonic() + timeout

    def remaining(self) -> float | None:
        """Seconds left (never below 0), or None for a wait without end."""
        return None if self._end is None else max(self._end - time.monotonic(), 0.0)

    def passed(self) -> bool:
        return self._end is not None and time.monotonic() >= self._end


# The deadline of the innermost patiently() block around the running code, if any.
_patience: ContextVar[Deadline | None] = ContextVar("jobq_patience", default=None)


@contextmanager
def patiently(deadline: Deadline) -> Iterator[None]:
    """Units of work run in this block wait out an outage until ``deadline`` (see above)."""
    token = _patience.set(deadline)
    try:
        yield
    finally:
        _patience.reset(token)


def is_patient() -> bool:
    """Whether the running code is in a patiently() block."""
    return _patience.get() is not None


def outlasting(attempt: Callable[[], _T]) -> _T:
    """``attempt()``; in a patiently() block, tried again while it raises
    DatabaseUnavailable: at once, then after growing pauses until the deadline passes."""
    deadline = _patience.get()
    if deadline is None:
        return attempt()
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
