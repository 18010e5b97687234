"""Locks for users' code: Mutex, TimeoutLock and Lease on jobq_locks rows, AdvisoryLock on
PostgreSQL's advisory locks.

Every row lock is one atomic statement against the database's clock: a claim inserts the
row under its unique name, or takes the existing row over only while a condition on it
holds (released, old enough, expired), so no two callers can both succeed. One name
belongs to one kind of lock. Each lock is also reachable from the app (``app.mutex(name)``
and so on) and from a store (``store.locks.mutex(name)``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobq.locks.advisory import AdvisoryLock
from jobq.locks.base import advisory_key, retry_until
from jobq.locks.held import HeldLock, lease_owner, list_locks, purge, release
from jobq.locks.rows import Lease, Mutex, TimeoutLock

if TYPE_CHECKING:
    from jobq.core.store import TaskStore

__all__ = [
    "AdvisoryLock", "HeldLock", "Lease", "Locks", "Mutex", "TimeoutLock", "advisory_key",
    "lease_owner", "list_locks", "purge", "release", "retry_until",
]  # fmt: skip


class Locks:
    """The locks of one store (``store.locks``): makes each kind of lock on the store's
    database, lists the held ones and frees one by name (as `jobq locks` does).

    Making a lock reads nothing: each is an object whose ``acquire()``, ``release()`` and
    ``with`` block do the work. Each name belongs to one kind of lock.

    Example:
        ```python
        import jobq

        store = jobq.Store()
        store.migrate()
        with store.locks.mutex("weekly-export"):
            [held] = [lock for lock in store.locks.held() if lock.name == "weekly-export"]
            assert held.kind == "mutex"
        assert store.locks.lease("weekly-sync", 60).acquire()
        assert store.locks.release("weekly-sync")  # whoever held it
        ```
    """

    def __init__(self, store: TaskStore) -> None:
        self.store = store

    def mutex(self, name: str, *, wait: float = 0.0) -> Mutex:
        """A jobq.Mutex named ``name``: held until released, by anyone; never expires.
        ``wait``: seconds acquire() and ``with`` keep trying. InvalidOption for an empty
        name or a negative ``wait``."""
        return Mutex(self.store, name, wait=wait)

    def timeout_lock(self, name: str, timeout: float, *, wait: float = 0.0) -> TimeoutLock:
        """A jobq.TimeoutLock: acquired at most once per ``timeout`` seconds (> 0), by
        anyone. InvalidOption for a bad value."""
        return TimeoutLock(self.store, name, timeout, wait=wait)

    def lease(self, name: str, ttl: float, *, owner: str | None = None, wait: float = 0.0) -> Lease:
        """A jobq.Lease: held by ``owner`` (default: a random token) until released or
        ``ttl`` seconds (> 0) pass unrenewed. InvalidOption for a bad value."""
        return Lease(self.store, name, ttl, owner=owner, wait=wait)

    def advisory_lock(self, name: str, *, session: bool = False, wait: float = 0.0) -> AdvisoryLock:
        """A jobq.AdvisoryLock: PostgreSQL's, for a transaction (or, with ``session``,
        until released); RequiresPostgreSQL on SQLite or MySQL."""
        return AdvisoryLock(self.store, name, session=session, wait=wait)

    def held(self) -> list[HeldLock]:
        """Every lock row (held mutexes, timeout locks, leases: an expired lease stays
        until the workers' upkeep deletes it; its ``expires`` says so) and every running
        task's lock key (kind ``"task"``), as `jobq locks list` shows them: HeldLock(kind,
        name, holder, since, expires), the rows by name, then the tasks' keys."""
        return list_locks(self.store)

    def release(self, name: str) -> bool:
        """Free the lock ``name`` whoever holds it (a mutex, a lease, a timeout lock's
        period), as `jobq locks release NAME` does; False if none was held."""
        return release(self.store, name)
