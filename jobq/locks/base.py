"""What every lock shares: waiting to acquire, the context manager, row claims."""

from __future__ import annotations

import hashlib
import logging
import os
import random
import socket
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobq.core.store import TaskStore
from jobq.db.errors import LockKindMismatch, LockNotAcquired
from jobq.db.validation import check_key, check_seconds
from jobq.dialects.schema import locks

l = locks.c  # noqa: E741
log = logging.getLogger("jobq.locks")

#: The first pause between two tries of a waiting acquire, and the longest.
_FIRST_PAUSE = 0.01
_LONGEST_PAUSE = 0.5


def advisory_key(name: str) -> int:
    """The advisory lock key of ``name``: a signed 64-bit integer, the same everywhere.

    It is the first 8 bytes of the SHA-256 digest of the name's UTF-8 bytes, read as a
    big-endian signed integer: ``int.from_bytes(sha256(name.encode()).digest()[:8], "big",
    signed=True)``. Other programs can compute it to take the same lock.
    """
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


def retry_until(attempt: Callable[[], bool], wait: float) -> bool:
    """``attempt()`` until it returns True or ``wait`` seconds have passed; its last answer.

    Pauses between tries start at 10 ms and double up to 0.5 s, with jitter, so waiting
    callers never hammer the database or wake in step.
    """
    deadline = time.monotonic() + wait
    pause = _FIRST_PAUSE
    while True:
        if attempt():
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(left, pause * random.uniform(0.5, 1.0)))
        pause = min(pause * 2, _LONGEST_PAUSE)


def _holder(owner: str | None = None) -> str:
    """locked_by: host:pid, and the owner when there is one."""
    holder = f"{socket.gethostname()}:{os.getpid()}"
    return holder if owner is None else f"{holder}:{owner}"


class _Lock:
    """What every lock shares: its name, the context manager, and waiting."""

    kind: str

    def __init__(self, store: TaskStore, name: str, wait: float) -> None:
        check_key("name", name, required=True)
        check_seconds("wait", wait)
        self.store = store
        self.name = name
        self.wait = wait

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"

    def acquire(self, wait: float | None = None) -> bool:
        """Take the lock, trying for up to ``wait`` seconds (default: the lock's own); whether."""
        if wait is not None:
            check_seconds("wait", wait)
        return retry_until(self._try, self.wait if wait is None else wait)

    def _try(self) -> bool:
        raise NotImplementedError

    def release(self) -> bool:
        raise NotImplementedError

    def __enter__(self) -> _Lock:
        if not self.acquire():
            raise LockNotAcquired(kind=self.kind, name=self.name, wait=self.wait)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self.release():
            log.warning("%s %r was no longer held when its block ended", self.kind, self.name)


class _RowLock(_Lock):
    """A lock that is a jobq_locks row."""

    def _claim(
        self, values: dict[str, Any], takeover: dict[str, Any], when: sa.ColumnElement[bool]
    ) -> bool:
        """Insert the row, or take it over where ``when`` holds; whether either happened."""
        dialect = self.store.dialect
        stmt = dialect.memo(
            ("claim lock", self.kind),
            lambda: dialect.claim_lock_statement(
                {"name": _NAME, "kind": self.kind, **values},
                takeover,
                sa.and_(l.kind == self.kind, when),
            ),
        )

        def claim(conn: Connection) -> bool:
            claimed = dialect.claim_lock(conn, stmt, self._parameters())
            if not claimed:
                self._check_kind(conn)
            return claimed

        return self.store.db.write(claim)

    def _parameters(self) -> dict[str, Any]:
        """The statements' parameters; none is named like a column, or SQLAlchemy would
        read it as a value to SET."""
        return {"lock_name": self.name}

    def _check_kind(self, conn: Connection) -> None:
        """LockKindMismatch if the name belongs to another kind of lock."""
        existing = conn.execute(sa.select(l.kind).where(l.name == self.name)).scalar()
        if existing is not None and existing != self.kind:
            raise LockKindMismatch(name=self.name, existing=existing, requested=self.kind)

    def _update(self, stmt: sa.Executable, parameters: dict[str, Any] | None = None) -> bool:
        """Run ``stmt`` (default parameters: the lock's own); whether it changed one row."""
        parameters = parameters or self._parameters()
        return self.store.db.write(lambda conn: conn.execute(stmt, parameters).rowcount == 1)


_NAME = sa.bindparam("lock_name", type_=sa.String)
_OWNER = sa.bindparam("lock_owner", type_=sa.String)
_SECONDS = sa.bindparam("lock_seconds", type_=sa.Float)
