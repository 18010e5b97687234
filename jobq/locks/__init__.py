"""Locks for users' code: Mutex, TimeoutLock and Lease on jobq_locks rows, AdvisoryLock on
PostgreSQL's advisory locks.

Every row lock is one atomic statement against the database's clock: a claim inserts the
row under its unique name, or takes the existing row over only while a condition on it
holds (released, old enough, expired), so no two callers can both succeed. One name
belongs to one kind of lock. Each lock is also reachable from the app: ``app.mutex(name)``
and so on.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobq.core.store import Store
from jobq.db.errors import JobqError, LockKindMismatch, LockNotAcquired
from jobq.db.schema import locks
from jobq.db.tasks import as_utc
from jobq.db.validation import check_key, check_seconds

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

    def __init__(self, store: Store, name: str, wait: float) -> None:
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


class Mutex(_RowLock):
    """Held or free, until someone releases it (seed 002): it never expires.

    ``acquire()`` flips ``acquired`` from false to true with one conditional write;
    ``release()`` flips it back, whoever calls it (``jobq locks release NAME`` too).
    Suits work that must not start again until a person looks at why the last run stopped.
    A ``with`` block frees the mutex at its end only if it is still the one it took: if an
    operator freed it meanwhile and someone else holds it now, it stays held.
    """

    kind = "mutex"

    def __init__(self, store: Store, name: str, *, wait: float = 0.0) -> None:
        super().__init__(store, name, wait)
        # Tells this acquisition apart from a later one, for the with block's release.
        self._token = uuid.uuid4().hex

    def _try(self) -> bool:
        now = self.store.dialect.now()
        taken = {"acquired": True, "owner": _OWNER, "locked_by": _holder(), "acquired_at": now}
        held, self._token = self._token, uuid.uuid4().hex
        if self._claim(taken, taken, l.acquired == sa.false()):
            return True
        self._token = held  # a failed try must not disown a hold this object has
        return False

    def _parameters(self) -> dict[str, Any]:
        return {"lock_name": self.name, "lock_owner": self._token}

    def release(self) -> bool:
        """Free the mutex, whoever holds it; False if it was not held."""
        return self._free(own=False)

    def __exit__(self, *exc_info: Any) -> None:
        if not self._free(own=True):
            log.warning("mutex %r was released by someone else during its block", self.name)

    def _free(self, *, own: bool) -> bool:
        dialect = self.store.dialect

        def build() -> sa.Executable:
            held = sa.and_(l.name == _NAME, l.kind == self.kind, l.acquired == sa.true())
            if own:
                held = sa.and_(held, l.owner == _OWNER)
            return (
                sa.update(locks)
                .where(held)
                .values(acquired=False, owner=None, locked_by=None, acquired_at=None)
            )

        return self._update(dialect.memo(("release mutex", own), build))


class TimeoutLock(_RowLock):
    """At most once per ``timeout`` seconds (seed 002): nothing to release.

    ``acquire()`` succeeds only when the last successful acquisition of this name, by
    anyone, is more than ``timeout`` seconds old on the database's clock.
    """

    kind = "timeout"

    def __init__(self, store: Store, name: str, timeout: float, *, wait: float = 0.0) -> None:
        check_seconds("timeout", timeout, positive=True)
        super().__init__(store, name, wait)
        self.timeout = float(timeout)

    def _try(self) -> bool:
        dialect = self.store.dialect
        # expires_at only tells `jobq locks list` when this caller's period ends.
        taken = {
            "acquired_at": dialect.now(), "expires_at": dialect.now_plus(_SECONDS),
            "locked_by": _holder(),
        }  # fmt: skip
        return self._claim(taken, taken, l.acquired_at < dialect.now_plus(-_SECONDS))

    def _parameters(self) -> dict[str, Any]:
        return {"lock_name": self.name, "lock_seconds": self.timeout}

    def release(self) -> bool:
        """Nothing to release: the period runs out by itself. Always False."""
        return False

    def __exit__(self, *exc_info: Any) -> None:
        pass


class Lease(_RowLock):
    """Held by one owner until released or ``ttl`` seconds pass unrenewed (seeds 001, 004).

    Taken by inserting the row, or by taking over an expired one with a compare-and-swap on
    its expiry. ``renew()`` and ``release()`` apply only while the row still names this
    owner, so a holder whose lease expired and was taken over changes nothing. ``owner``
    defaults to a fresh random token; give a stable one to let a restarted process take
    back its unexpired lease.
    """

    kind = "lease"

    def __init__(
        self,
        store: Store,
        name: str,
        ttl: float,
        *,
        owner: str | None = None,
        wait: float = 0.0,
    ) -> None:
        check_seconds("ttl", ttl, positive=True)
        check_key("owner", owner)
        super().__init__(store, name, wait)
        self.ttl = float(ttl)
        self.owner = owner or uuid.uuid4().hex

    def _try(self) -> bool:
        dialect = self.store.dialect
        now = dialect.now()
        taken = {
            "owner": _OWNER,
            "locked_by": sa.bindparam("lock_holder", type_=sa.String),
            "acquired_at": now,
            "expires_at": dialect.now_plus(_SECONDS),
        }
        # Our own unexpired lease: extended, and held since it was first taken.
        still_ours = sa.and_(l.owner == _OWNER, l.expires_at >= now)
        takeover = {**taken, "acquired_at": sa.case((still_ours, l.acquired_at), else_=now)}
        return self._claim(taken, takeover, sa.or_(l.expires_at < now, l.owner == _OWNER))

    def _parameters(self) -> dict[str, Any]:
        return {
            "lock_name": self.name, "lock_owner": self.owner, "lock_seconds": self.ttl,
            "lock_holder": _holder(self.owner)[:255],
        }  # fmt: skip

    def renew(self, ttl: float | None = None) -> bool:
        """Extend the lease to ``ttl`` (default: its own) seconds from now; False if lost."""
        if ttl is not None:
            check_seconds("ttl", ttl, positive=True)
        dialect = self.store.dialect
        stmt = dialect.memo(
            "renew lease",
            lambda: (
                sa.update(locks)
                .where(l.name == _NAME, l.kind == self.kind, l.owner == _OWNER)
                .values(expires_at=dialect.now_plus(_SECONDS))
            ),
        )
        parameters = self._parameters()
        if ttl is not None:
            parameters["lock_seconds"] = float(ttl)
        renewed = self._update(stmt, parameters)
        if renewed and ttl is not None:
            self.ttl = float(ttl)  # later renewals keep to it
        return renewed

    def release(self) -> bool:
        """Give the lease up (delete its row); False if another owner holds it now."""
        stmt = self.store.dialect.memo(
            "release lease",
            lambda: sa.delete(locks).where(l.name == _NAME, l.kind == self.kind, l.owner == _OWNER),
        )
        return self._update(stmt)


class AdvisoryLock(_Lock):
    """A PostgreSQL advisory lock on ``advisory_key(name)`` (seed 003); no table involved.

    By default transaction-scoped (``pg_try_advisory_xact_lock``): held until the
    transaction that took it ends. ``acquire(connection=conn)`` takes it in the caller's
    transaction, which frees it by committing or rolling back; otherwise the lock opens a
    connection and a transaction of its own (``self.connection``: do the work it guards
    there), and ``release()`` commits them. With ``session=True`` it is a session lock
    (``pg_try_advisory_lock``), held by its connection until ``release()``. Other
    databases raise RequiresPostgreSQL.
    """

    kind = "advisory lock"

    def __init__(
        self, store: Store, name: str, *, session: bool = False, wait: float = 0.0
    ) -> None:
        super().__init__(store, name, wait)
        self.session = session
        self.key = advisory_key(name)
        self._take = store.dialect.advisory_lock_statement(session=session)
        #: The connection that holds the lock while it is held.
        self.connection: Connection | None = None
        self._own_connection = False

    def acquire(self, wait: float | None = None, *, connection: Connection | None = None) -> bool:
        """Take the lock, trying for up to ``wait`` seconds; whether it was taken."""
        if wait is not None:
            check_seconds("wait", wait)
        if self.connection is not None:
            raise JobqError(f"advisory lock {self.name!r} is already held by this object")
        self._own_connection = connection is None
        if connection is None:
            engine = self.store.engine
            # A session lock lives as long as its connection; no transaction needed.
            if self.session:
                engine = engine.execution_options(isolation_level="AUTOCOMMIT")
            try:
                connection = engine.connect()
            except sa.exc.DBAPIError as error:
                raise self.store.db.unavailable(error) from None
            if not self.session:
                connection.begin()
        self.connection = connection
        try:
            taken = super().acquire(wait)
        except BaseException:
            self._let_go()
            raise
        if not taken:
            self._let_go()
        return taken

    def _try(self) -> bool:
        assert self.connection is not None
        with self.store.db.translated():
            return bool(self.connection.execute(self._take, {"key": self.key}).scalar())

    def release(self) -> bool:
        """Free the lock: commit its own transaction, or unlock the session lock; whether held.

        A transaction-scoped lock taken in the caller's transaction cannot be freed early;
        it ends with that transaction, and this returns False.
        """
        if self.connection is None:
            return False
        if not self.session and not self._own_connection:
            self.connection = None  # the caller's transaction holds it; we let go of it
            return False
        freed = True
        if self.session:
            unlock = self.store.dialect.advisory_unlock_statement()
            with self.store.db.translated():
                freed = bool(self.connection.execute(unlock, {"key": self.key}).scalar())
        self._let_go(commit=True)
        return freed

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if error is not None and not self.session and self._own_connection:
            self._let_go()  # the block failed: roll its work back, which frees the lock
            return
        super().__exit__(kind, error, traceback)

    def __del__(self) -> None:
        # Dropped while holding a lock on its own connection: close that connection rather
        # than let the pool hand it on with the lock still held.
        connection = getattr(self, "connection", None)
        if connection is not None and self._own_connection:
            with suppress(Exception):
                connection.invalidate()

    def _let_go(self, commit: bool = False) -> None:
        connection, self.connection = self.connection, None
        if connection is None or not self._own_connection:
            return
        try:
            if commit and connection.in_transaction():
                connection.commit()
        finally:
            connection.close()


# --- operators: list, release by name, purge ----------------------------------------------


@dataclass(frozen=True)
class HeldLock:
    """A lock as ``jobq locks list`` shows it."""

    kind: str
    name: str
    holder: str | None
    since: datetime | None
    expires: datetime | None


def list_locks(store: Store) -> list[HeldLock]:
    """Every lock row (held mutexes, timeout locks, leases) and every running task's lock key."""
    with store.db.unit(read_only=True) as conn:
        rows = conn.execute(
            sa.select(l.kind, l.name, l.locked_by, l.acquired_at, l.expires_at, l.acquired)
            .where(sa.or_(l.kind != Mutex.kind, l.acquired == sa.true()))
            .order_by(l.name)
        ).all()
    found = [
        HeldLock(kind, name, holder, as_utc(since), as_utc(expires))
        for kind, name, holder, since, expires, _ in rows
    ]
    found += [
        HeldLock("task", key, holder, as_utc(since), as_utc(expires))
        for key, holder, since, expires in store.running_lock_keys()
    ]
    return found


def lease_owner(store: Store, name: str) -> str | None:
    """The owner of lease ``name`` while it is unexpired, else None."""
    stmt = store.dialect.memo(
        "lease owner",
        lambda: sa.select(l.owner).where(
            l.name == _NAME, l.kind == Lease.kind, l.expires_at >= store.dialect.now()
        ),
    )
    with store.db.unit(read_only=True) as conn:
        owner: str | None = conn.execute(stmt, {"lock_name": name}).scalar()
    return owner


def release(store: Store, name: str) -> bool:
    """Free lock ``name`` by hand, whoever holds it: a mutex, a lease, or a timeout lock's
    period. False if there is no such lock (a task's lock key ends with its run)."""
    check_key("name", name, required=True)

    def free(conn: Connection) -> int:
        freed = conn.execute(
            sa.update(locks)
            .where(l.name == name, l.kind == Mutex.kind, l.acquired == sa.true())
            .values(acquired=False, owner=None, locked_by=None, acquired_at=None)
        ).rowcount
        return (
            freed
            + conn.execute(
                sa.delete(locks).where(l.name == name, l.kind.in_([Lease.kind, TimeoutLock.kind]))
            ).rowcount
        )

    return store.db.write(free, atomic=True) > 0


def purge(store: Store) -> int:
    """Delete expired leases' rows; how many. Workers do this as part of their upkeep."""
    stmt = sa.delete(locks).where(l.kind == Lease.kind, l.expires_at < store.dialect.now())
    return store.db.write(lambda conn: conn.execute(stmt).rowcount)
