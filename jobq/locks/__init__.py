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
    """The locks of one store (``store.locks``): made on its TaskStore, hooked into nothing."""

    def __init__(self, store: TaskStore) -> None:
        self.store = store

    def mutex(self, name: str, *, wait: float = 0.0) -> Mutex:
        """A Mutex: held until released, by anyone; never expires."""
        return Mutex(self.store, name, wait=wait)

    def timeout_lock(self, name: str, timeout: float, *, wait: float = 0.0) -> TimeoutLock:
        """A TimeoutLock: acquired at most once per ``timeout`` seconds."""
        return TimeoutLock(self.store, name, timeout, wait=wait)

    def lease(self, name: str, ttl: float, *, owner: str | None = None, wait: float = 0.0) -> Lease:
        """A Lease: held by its owner until released or ``ttl`` seconds pass unrenewed."""
        return Lease(self.store, name, ttl, owner=owner, wait=wait)

    def advisory_lock(self, name: str, *, session: bool = False, wait: float = 0.0) -> AdvisoryLock:
        """A PostgreSQL advisory lock (transaction-scoped unless ``session``)."""
        return AdvisoryLock(self.store, name, session=session, wait=wait)

    def held(self) -> list[HeldLock]:
        """Every lock held now, and every running task's lock key."""
        return list_locks(self.store)

    def release(self, name: str) -> bool:
        """Free the lock ``name`` whoever holds it; False if none was held."""
        return release(self.store, name)
