"""The locks held now, as `jobq locks` lists and frees them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobq.core.store import TaskStore
from jobq.db.tasks import as_utc
from jobq.db.validation import check_key
from jobq.dialects.schema import locks
from jobq.lifecycle.admin import TaskAdmin
from jobq.locks.base import (
    _NAME,
    l,
)
from jobq.locks.rows import Lease, Mutex, TimeoutLock


@dataclass(frozen=True)
class HeldLock:
    """A lock as ``jobq locks list`` shows it."""

    kind: str
    name: str
    holder: str | None
    since: datetime | None
    expires: datetime | None


def list_locks(store: TaskStore) -> list[HeldLock]:
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
        for key, holder, since, expires in store.capability(TaskAdmin).running_lock_keys()
    ]
    return found


def lease_owner(store: TaskStore, name: str) -> str | None:
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


def release(store: TaskStore, name: str) -> bool:
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


def purge(store: TaskStore) -> int:
    """Delete expired leases' rows; how many. Workers do this as part of their upkeep."""
    stmt = sa.delete(locks).where(l.kind == Lease.kind, l.expires_at < store.dialect.now())
    return store.db.write(lambda conn: conn.execute(stmt).rowcount)
