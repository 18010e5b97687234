"""Mutex, TimeoutLock and Lease: locks on jobq_locks rows."""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa

from jobq.core.store import TaskStore
from jobq.db.validation import check_key, check_seconds
from jobq.dialects.schema import locks
from jobq.locks.base import (
    _NAME,
    _OWNER,
    _SECONDS,
    _holder,
    _RowLock,
    l,
    log,
)


class Mutex(_RowLock):
    """Held or free, until someone releases it: it never expires.

    ``acquire()`` flips ``acquired`` from false to true with one conditional write;
    ``release()`` flips it back, whoever calls it (``jobq locks release NAME`` too).
    Suits work that must not start again until a person looks at why the last run stopped.
    A ``with`` block frees the mutex at its end only if it is still the one it took: if an
    operator freed it meanwhile and someone else holds it now, it stays held.
    Make one with ``app.mutex(name)`` (or ``store.locks.mutex``).
    ``acquire(wait=None)`` tries for up to ``wait`` seconds (default: the lock's own)
    and says whether it took it; ``with`` raises jobq.LockNotAcquired instead of
    returning False. Both raise jobq.LockKindMismatch if ``name`` is another kind's lock.

    Example:
        ```python
        import jobq

        app = jobq.App()
        app.migrate()
        with app.mutex("nightly-import"):
            assert not app.mutex("nightly-import").acquire()  # held: by anyone
        assert app.mutex("nightly-import").acquire()  # freed at the block's end
        ```
    """

    kind = "mutex"

    def __init__(self, store: TaskStore, name: str, *, wait: float = 0.0) -> None:
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
    """At most once per ``timeout`` seconds, across every process: nothing to release.

    ``acquire(wait=None)`` succeeds only when the last successful acquisition of this
    name, by anyone, is more than ``timeout`` seconds old on the database's clock; it
    tries for up to ``wait`` seconds (default: the lock's own) and says whether it took
    it. ``with`` raises jobq.LockNotAcquired instead of returning False; leaving the
    block frees nothing. Suits "at most one digest an hour" however many workers try.
    Make one with ``app.timeout_lock(name, timeout)`` (or ``store.locks``).

    Args:
        store: the Store whose database holds the lock.
        name: the lock's name, shared by every process on that database.
        timeout: seconds (> 0) after an acquisition before the next may succeed.
        wait: seconds ``acquire()`` and ``with`` keep trying (0: one try).

    Raises:
        InvalidOption: an empty name, a ``timeout`` not > 0 or a negative ``wait``.
        LockKindMismatch: (by acquire and ``with``) ``name`` is another kind's lock.

    Example:
        ```python
        import jobq

        app = jobq.App()
        app.migrate()
        assert app.timeout_lock("hourly-digest", 3600).acquire()
        assert not app.timeout_lock("hourly-digest", 3600).acquire()  # for an hour
        try:
            with app.timeout_lock("hourly-digest", 3600):
                pass
        except jobq.LockNotAcquired as error:
            assert str(error) == (
                "Could not acquire timeout 'hourly-digest' within 0 s: another holder has it."
            )
        ```
    """

    kind = "timeout"

    def __init__(self, store: TaskStore, name: str, timeout: float, *, wait: float = 0.0) -> None:
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
    """Held by one owner until released, or until ``ttl`` seconds pass unrenewed.

    For a leader or a singleton that must not stay locked when its process dies: another
    owner takes an expired lease over. ``acquire(wait=None)`` takes it (or extends this
    owner's own unexpired lease) and says whether; ``renew()`` and ``release()`` apply
    only while the row still names this owner, so a holder whose lease expired and was
    taken over changes nothing and learns it from their False. ``with`` raises
    jobq.LockNotAcquired instead of returning False, and releases at the block's end.
    Make one with ``app.lease(name, ttl)`` (or ``store.locks.lease``).

    Args:
        store: the Store whose database holds the lease.
        name: the lease's name, shared by every process on that database.
        ttl: seconds (> 0) it holds from each acquire or renew.
        owner: who holds it: default a fresh random token; give a stable one to let a
            restarted process take back its unexpired lease.
        wait: seconds ``acquire()`` and ``with`` keep trying (0: one try).

    Raises:
        InvalidOption: an empty name or owner, a ``ttl`` not > 0 or a negative ``wait``.
        LockKindMismatch: (by acquire and ``with``) ``name`` is another kind's lock.

    Example:
        ```python
        import time

        import jobq

        app = jobq.App()
        app.migrate()
        first = app.lease("leader", ttl=0.2, owner="node-1")
        second = app.lease("leader", ttl=0.2, owner="node-2")
        assert first.acquire() and not second.acquire()
        assert first.renew()  # 0.2 s more, while node-1 still holds it
        time.sleep(0.3)  # node-1 stopped renewing: its lease expired
        assert second.acquire()
        assert not first.renew() and not first.release()  # it is node-2's now
        assert second.release()
        ```
    """

    kind = "lease"

    def __init__(
        self,
        store: TaskStore,
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
        """Extend the lease to ``ttl`` (default: its own) seconds from now, and keep that
        ``ttl`` for later renewals; False if this owner no longer holds it (it expired
        and another owner took it, or it was released). InvalidOption if ``ttl`` is not > 0."""
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
