"""jobq.locks in one process, on every database: Mutex, TimeoutLock, Lease, AdvisoryLock.

Small ttl and timeout values (0.3 s) with generous sleeps (0.5 s) keep these quick; the
claims about several processes contending are in test_lock_contention.py.
"""

from __future__ import annotations

import gc
import math
import os
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import jobq
from jobq import AdvisoryLock, Lease, Mutex, Status, TimeoutLock
from jobq.dialects.schema import locks
from jobq.locks import HeldLock, advisory_key, list_locks, purge, release, retry_until
from tests import shared_database

#: One migrated database per backend for the module, emptied before each test.
backend, shared_url, db_url = shared_database.FIXTURES

SHORT = 0.3  # a ttl or timeout that runs out during a test
PAST_SHORT = 0.5  # a sleep that outlasts SHORT by a wide margin
LONG = 60.0  # a ttl or timeout that never runs out during a test

ON_POSTGRESQL = pytest.mark.parametrize("backend", ["postgresql"], scope="module")
ON_SQLITE = pytest.mark.parametrize("backend", ["sqlite"], scope="module")

HOST_PID = f"{socket.gethostname()}:{os.getpid()}"


def lock_rows(store: jobq.Store) -> list[dict[str, Any]]:
    """Every jobq_locks row as a dict, ordered by name."""
    with store.engine.connect() as conn:
        rows = conn.execute(sa.select(locks).order_by(locks.c.name))
        return [dict(r._mapping) for r in rows]


def lock_row(store: jobq.Store, name: str) -> dict[str, Any] | None:
    """The jobq_locks row of ``name``, or None."""
    return next((row for row in lock_rows(store) if row["name"] == name), None)


def as_utc(value: datetime) -> datetime:
    """Datetimes from SQLite come back naive (they are UTC); PostgreSQL's are aware."""
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def assert_recent(value: datetime | None) -> None:
    """An aware datetime within a minute of now: catches a local-time or unit mix-up."""
    assert value is not None and value.tzinfo is not None
    assert abs(datetime.now(UTC) - value) < timedelta(seconds=60)


class StatementLog:
    """The SQL statements run through a store's engine while it is attached."""

    def __init__(self, store: jobq.Store) -> None:
        self.engine = store.engine
        self.statements: list[str] = []

    def _record(self, conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        self.statements.append(statement)

    def __enter__(self) -> StatementLog:
        sa.event.listen(self.engine, "before_cursor_execute", self._record)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        sa.event.remove(self.engine, "before_cursor_execute", self._record)

    def count(self, fragment: str) -> int:
        return sum(fragment in statement for statement in self.statements)


@pytest.fixture
def advisory_name() -> str:
    """A name no other test session holds: advisory locks span the whole database."""
    return f"jobq-test-{uuid.uuid4().hex}"


# --- Mutex ---------------------------------------------------------------------------


def test_mutex_is_held_until_anyone_releases_it(store: jobq.Store) -> None:
    """One holder at a time; any Mutex object of the name may release it; never expires."""
    first, second = Mutex(store, "deploy"), Mutex(store, "deploy")
    assert first.acquire() is True
    assert first.acquire() is False, "a mutex is not re-entrant"
    assert second.acquire() is False
    row = lock_row(store, "deploy")
    assert row is not None
    assert row["kind"] == "mutex" and row["acquired"] is True
    assert row["locked_by"] == HOST_PID and row["expires_at"] is None
    assert_recent(as_utc(row["acquired_at"]))

    assert second.release() is True, "anyone may release a mutex"
    assert second.release() is False, "releasing a free mutex reports False"
    freed = lock_row(store, "deploy")
    assert freed is not None and freed["kind"] == "mutex"
    assert (freed["acquired"], freed["locked_by"], freed["acquired_at"]) == (False, None, None)
    assert second.acquire() is True
    assert first.acquire() is False


def test_mutex_context_manager_raises_when_held_and_releases_at_exit(store: jobq.Store) -> None:
    """``with`` raises LockNotAcquired while someone holds it, and frees it even on error."""
    holder = Mutex(store, "report")
    with Mutex(store, "report") as held:
        assert isinstance(held, Mutex)
        assert holder.acquire() is False
        with pytest.raises(jobq.LockNotAcquired, match="'report'"), Mutex(store, "report"):
            pytest.fail("entered a held mutex")
    assert lock_row(store, "report")["acquired"] is False  # type: ignore[index]

    with pytest.raises(RuntimeError), Mutex(store, "report"):
        raise RuntimeError("the body failed")
    assert holder.acquire() is True


def test_mutex_with_block_leaves_alone_a_mutex_someone_else_took_meanwhile(
    store: jobq.Store,
) -> None:
    """If an operator frees the mutex during a ``with`` block and another caller takes it,
    the block's end does not free the other caller's hold."""
    other = Mutex(store, "deploy")
    with Mutex(store, "deploy"):
        assert release(store, "deploy") is True
        assert other.acquire() is True
    assert lock_row(store, "deploy")["acquired"] is True  # type: ignore[index]
    assert Mutex(store, "deploy").acquire() is False
    assert other.release() is True


def test_mutex_with_block_frees_it_after_a_failed_acquire_inside(store: jobq.Store) -> None:
    """A failed acquire() on the holding object (it is not re-entrant) must not make the
    ``with`` block forget its own hold: the block's end still frees the mutex."""
    with Mutex(store, "deploy") as held:
        assert held.acquire() is False
    assert lock_row(store, "deploy")["acquired"] is False, (  # type: ignore[index]
        "the with block left its own mutex held"
    )
    assert Mutex(store, "deploy").acquire() is True


def test_mutex_context_manager_waits_for_its_wait(store: jobq.Store) -> None:
    """A Mutex with ``wait`` keeps trying for that long before raising LockNotAcquired."""
    assert Mutex(store, "busy").acquire()
    started = time.monotonic()
    with (
        pytest.raises(jobq.LockNotAcquired, match=r"within 0\.3 s"),
        Mutex(store, "busy", wait=SHORT),
    ):
        pass
    assert time.monotonic() - started >= SHORT * 0.9


# --- TimeoutLock ----------------------------------------------------------------------


def test_timeout_lock_is_acquired_at_most_once_per_timeout(store: jobq.Store) -> None:
    """Nobody acquires it again until ``timeout`` seconds after the last success; release
    does nothing."""
    first, second = TimeoutLock(store, "digest", SHORT), TimeoutLock(store, "digest", SHORT)
    assert first.acquire() is True
    assert first.acquire() is False
    assert second.acquire() is False
    row = lock_row(store, "digest")
    assert row is not None and row["kind"] == "timeout" and row["locked_by"] == HOST_PID
    assert first.release() is False
    assert lock_row(store, "digest") == row, "release() must not shorten the period"
    assert second.acquire() is False

    time.sleep(PAST_SHORT)
    assert second.acquire() is True
    assert first.acquire() is False
    later = lock_row(store, "digest")
    assert later is not None and later["acquired_at"] > row["acquired_at"]


def test_timeout_lock_acquire_waits_out_the_period(store: jobq.Store) -> None:
    """acquire(wait) keeps trying until the period ends, then succeeds."""
    assert TimeoutLock(store, "sync", SHORT).acquire()
    started = time.monotonic()
    assert TimeoutLock(store, "sync", SHORT).acquire(wait=5.0) is True
    assert time.monotonic() - started >= SHORT * 0.5


def test_timeout_lock_context_manager(store: jobq.Store) -> None:
    """``with`` raises LockNotAcquired inside the period and leaves the period alone at exit."""
    with TimeoutLock(store, "mail", LONG) as held:
        assert isinstance(held, TimeoutLock)
    row = lock_row(store, "mail")
    assert row is not None
    with pytest.raises(jobq.LockNotAcquired, match="'mail'"), TimeoutLock(store, "mail", LONG):
        pytest.fail("entered a timeout lock inside its period")
    assert lock_row(store, "mail") == row


# --- Lease ---------------------------------------------------------------------------


def test_lease_row_names_its_owner(store: jobq.Store) -> None:
    """locked_by is host:pid:owner; without an owner each Lease gets a fresh random one."""
    named = Lease(store, "named", LONG, owner="worker-7")
    assert named.acquire()
    row = lock_row(store, "named")
    assert row is not None and row["kind"] == "lease" and row["owner"] == "worker-7"
    assert row["locked_by"] == f"{HOST_PID}:worker-7"

    one, two = Lease(store, "anon", LONG), Lease(store, "anon", LONG)
    assert re.fullmatch(r"[0-9a-f]{32}", one.owner) and one.owner != two.owner
    assert one.acquire() and not two.acquire()
    assert lock_row(store, "anon")["locked_by"] == f"{HOST_PID}:{one.owner}"  # type: ignore[index]


def test_unexpired_lease_belongs_to_its_owner(store: jobq.Store) -> None:
    """Another owner cannot take a live lease; acquire reports False and changes nothing."""
    assert Lease(store, "job", LONG, owner="a").acquire()
    row = lock_row(store, "job")
    thief = Lease(store, "job", LONG, owner="b")
    assert thief.acquire() is False
    assert thief.renew() is False
    assert thief.release() is False
    assert lock_row(store, "job") == row


def test_expired_lease_is_taken_over_and_the_old_owner_is_fenced_off(store: jobq.Store) -> None:
    """After expiry another owner takes the row over; the old owner's renew, release and
    acquire then return False and leave the new owner's row exactly as it is."""
    old = Lease(store, "job", SHORT, owner="old")
    new = Lease(store, "job", LONG, owner="new")
    assert old.acquire()
    assert new.acquire() is False
    time.sleep(PAST_SHORT)
    assert new.acquire() is True
    row = lock_row(store, "job")
    assert row is not None and row["owner"] == "new"
    assert row["locked_by"] == f"{HOST_PID}:new"

    assert old.renew() is False
    assert old.renew(ttl=LONG) is False
    assert old.release() is False
    assert old.acquire() is False
    assert lock_row(store, "job") == row
    assert new.release() is True
    assert lock_row(store, "job") is None


def test_lease_acquire_waits_for_expiry(store: jobq.Store) -> None:
    """acquire(wait) outlasting the holder's ttl takes the lease over."""
    assert Lease(store, "job", SHORT, owner="old").acquire()
    started = time.monotonic()
    assert Lease(store, "job", LONG, owner="new").acquire(wait=5.0) is True
    assert time.monotonic() - started >= SHORT * 0.5
    assert lock_row(store, "job")["owner"] == "new"  # type: ignore[index]


def test_same_owner_reacquires_its_unexpired_lease_and_extends_it(store: jobq.Store) -> None:
    """A restarted process with a stable owner takes its lease back: held since the first
    acquisition, expiring ttl seconds from the re-acquisition."""
    first = Lease(store, "job", SHORT, owner="stable")
    assert first.acquire()
    before = lock_row(store, "job")
    restarted = Lease(store, "job", LONG, owner="stable")
    assert restarted.acquire() is True
    after = lock_row(store, "job")
    assert before is not None and after is not None
    assert after["acquired_at"] == before["acquired_at"]
    assert after["expires_at"] - before["expires_at"] > timedelta(seconds=LONG / 2)
    time.sleep(PAST_SHORT)
    assert Lease(store, "job", LONG, owner="other").acquire() is False


def test_renew_extends_the_lease(store: jobq.Store) -> None:
    """renew(ttl) pushes expiry out so nobody takes the lease when the first ttl ends."""
    lease = Lease(store, "job", SHORT, owner="a")
    assert lease.acquire()
    before = lock_row(store, "job")
    assert lease.renew(ttl=LONG) is True
    assert lease.ttl == LONG
    after = lock_row(store, "job")
    assert before is not None and after is not None
    assert after["expires_at"] - before["expires_at"] > timedelta(seconds=LONG / 2)
    assert after["acquired_at"] == before["acquired_at"]
    time.sleep(PAST_SHORT)
    assert Lease(store, "job", LONG, owner="b").acquire() is False
    assert lease.renew() is True


def test_lease_release_deletes_the_row_once(store: jobq.Store) -> None:
    """release() frees the lease for anyone at once; a second release or a renew is False."""
    lease = Lease(store, "job", LONG, owner="a")
    assert lease.acquire()
    assert lease.release() is True
    assert lock_row(store, "job") is None
    assert lease.release() is False
    assert lease.renew() is False
    assert lock_row(store, "job") is None
    assert Lease(store, "job", LONG, owner="b").acquire() is True


def test_lease_context_manager(store: jobq.Store) -> None:
    """``with`` raises LockNotAcquired while another owner holds it and releases at exit."""
    with Lease(store, "job", LONG, owner="a") as held:
        assert isinstance(held, Lease)
        with pytest.raises(jobq.LockNotAcquired, match="'job'"), Lease(store, "job", LONG):
            pytest.fail("entered another owner's lease")
        assert lock_row(store, "job")["owner"] == "a"  # type: ignore[index]
    assert lock_row(store, "job") is None


# --- one name, one kind -------------------------------------------------------------

MAKERS: dict[str, Callable[[jobq.Store, str], Mutex | TimeoutLock | Lease]] = {
    "mutex": lambda store, name: Mutex(store, name),
    "timeout": lambda store, name: TimeoutLock(store, name, LONG),
    "lease": lambda store, name: Lease(store, name, LONG),
}
KIND_PAIRS = [(a, b) for a in MAKERS for b in MAKERS if a != b]


@pytest.mark.parametrize(("existing", "requested"), KIND_PAIRS)
def test_a_name_belongs_to_one_kind(store: jobq.Store, existing: str, requested: str) -> None:
    """Acquiring a name that another kind of lock holds raises LockKindMismatch, even while
    waiting, and changes nothing."""
    assert MAKERS[existing](store, "shared").acquire()
    row = lock_row(store, "shared")
    other = MAKERS[requested](store, "shared")
    with pytest.raises(jobq.LockKindMismatch, match=f"'shared' is a {existing}, not a {requested}"):
        other.acquire()
    with pytest.raises(jobq.LockKindMismatch):
        other.acquire(wait=5.0)
    assert lock_row(store, "shared") == row


def test_a_released_mutex_still_owns_its_name(store: jobq.Store) -> None:
    """A free mutex keeps its row, so a Lease of the same name is still a mismatch."""
    mutex = Mutex(store, "shared")
    assert mutex.acquire() and mutex.release()
    with pytest.raises(jobq.LockKindMismatch):
        Lease(store, "shared", LONG).acquire()


# --- list, release by name, purge ---------------------------------------------------


def test_list_locks_shows_held_locks_and_running_tasks_lock_keys(store: jobq.Store) -> None:
    """Held mutexes, every timeout lock and lease row (expired ones too), and running
    tasks' lock keys; free mutexes and queued tasks' keys are not listed."""
    assert Lease(store, "e-expired", SHORT, owner="gone").acquire()
    time.sleep(PAST_SHORT)
    assert Mutex(store, "a-mutex").acquire()
    free = Mutex(store, "b-free")
    assert free.acquire() and free.release()
    assert TimeoutLock(store, "c-timeout", LONG).acquire()
    assert Lease(store, "d-lease", LONG, owner="me").acquire()
    store.enqueue("t", {}, lock_key="f-task")
    [task] = store.capture(1, worker_id="worker-1", lease=LONG)
    store.enqueue("t", {}, lock_key="g-queued")

    found = {held.name: held for held in list_locks(store)}
    assert sorted(found) == ["a-mutex", "c-timeout", "d-lease", "e-expired", "f-task"]
    assert all(isinstance(held, HeldLock) for held in found.values())
    assert {name: held.kind for name, held in found.items()} == {
        "a-mutex": "mutex", "c-timeout": "timeout", "d-lease": "lease",
        "e-expired": "lease", "f-task": "task",
    }  # fmt: skip
    for held in found.values():
        assert_recent(held.since)

    assert found["a-mutex"].holder == HOST_PID and found["a-mutex"].expires is None
    timeout = found["c-timeout"]
    assert timeout.holder == HOST_PID and timeout.expires is not None
    assert abs(timeout.expires - timeout.since - timedelta(seconds=LONG)) < timedelta(  # type: ignore[operator]
        milliseconds=5
    )
    lease = found["d-lease"]
    assert lease.holder == f"{HOST_PID}:me" and lease.expires is not None
    assert abs(lease.expires - lease.since - timedelta(seconds=LONG)) < timedelta(milliseconds=5)  # type: ignore[operator]
    expired = found["e-expired"]
    assert expired.expires is not None and expired.expires < datetime.now(UTC)
    running = found["f-task"]
    assert running.holder == "worker-1" and running.expires is not None
    assert running.expires > datetime.now(UTC) + timedelta(seconds=LONG / 2)
    assert task.lock_key == "f-task"


def test_list_locks_of_an_empty_database(store: jobq.Store) -> None:
    """No locks, no running tasks: an empty list."""
    assert list_locks(store) == []


def test_release_by_name_frees_any_kind_whoever_holds_it(store: jobq.Store) -> None:
    """release(store, name) frees a mutex, deletes a lease or a timeout lock's period; False
    when there is nothing to free."""
    assert Mutex(store, "m").acquire()
    assert release(store, "m") is True
    assert lock_row(store, "m")["acquired"] is False  # type: ignore[index]
    assert release(store, "m") is False, "a free mutex is nothing to release"
    assert Mutex(store, "m").acquire() is True

    holder = Lease(store, "l", LONG, owner="holder")
    assert holder.acquire()
    assert release(store, "l") is True
    assert lock_row(store, "l") is None
    assert Lease(store, "l", LONG, owner="next").acquire() is True
    assert holder.renew() is False and holder.release() is False
    assert lock_row(store, "l")["owner"] == "next"  # type: ignore[index]

    assert TimeoutLock(store, "t", LONG).acquire()
    assert release(store, "t") is True
    assert TimeoutLock(store, "t", LONG).acquire() is True

    assert release(store, "nothing-here") is False


def test_purge_deletes_expired_leases_only(store: jobq.Store) -> None:
    """purge() deletes expired lease rows and nothing else: not live leases, not mutexes
    (which never expire), not timeout locks whose period has ended."""
    stale = Lease(store, "l-expired", SHORT, owner="stale")
    assert stale.acquire()
    assert Mutex(store, "m-held").acquire()
    assert TimeoutLock(store, "t-ended", SHORT).acquire()
    time.sleep(PAST_SHORT)
    assert Lease(store, "l-live", LONG, owner="live").acquire()
    before = lock_rows(store)

    assert purge(store) == 1
    assert lock_rows(store) == [row for row in before if row["name"] != "l-expired"]
    assert purge(store) == 0
    assert stale.renew() is False, "a purged lease cannot be renewed"
    assert Mutex(store, "m-held").acquire() is False, "a mutex never expires"


# --- waiting ------------------------------------------------------------------------


def test_retry_until_backs_off_from_10_ms_doubling_to_half_a_second() -> None:
    """Pauses start at 5-10 ms and at least double each time (up to the 0.5 s cap), so a
    1 s wait makes a handful of tries, not hundreds; it stops at the first success."""
    calls: list[float] = []

    def never() -> bool:
        calls.append(time.monotonic())
        return False

    started = time.monotonic()
    assert retry_until(never, 1.0) is False
    assert time.monotonic() - started >= 1.0
    assert 5 <= len(calls) <= 20
    pauses = [b - a for a, b in pairwise(calls)][:-1]  # the last is cut short
    for n, pause in enumerate(pauses):
        # Never shorter than the jitter's low end of 10 ms * 2**n (capped at 0.5 s).
        assert pause >= 0.5 * min(0.01 * 2**n, 0.5) * 0.99, pauses

    calls.clear()
    assert retry_until(never, 0.0) is False
    assert len(calls) == 1, "wait=0 means one try"
    answers = iter([False, False, True, True])
    assert retry_until(lambda: next(answers), 10.0) is True
    assert next(answers) is True, "tried again after the first success"


CONTENDED: dict[str, Callable[[jobq.Store], Mutex | TimeoutLock | Lease]] = {
    "mutex": lambda store: Mutex(store, "contended"),
    "timeout": lambda store: TimeoutLock(store, "contended", LONG),
    "lease": lambda store: Lease(store, "contended", LONG),
}


def wait_in_vain(store: jobq.Store, waiter: Any, marker: str) -> tuple[StatementLog, int]:
    """Run ``waiter.acquire(wait=1.0)`` on a held lock: False after about a second, with a
    bounded number of tries (statements containing ``marker``); the log and the tries."""
    with StatementLog(store) as log:
        started = time.monotonic()
        assert waiter.acquire(wait=1.0) is False
        elapsed = time.monotonic() - started
    tries = log.count(marker)
    assert 1.0 <= elapsed < 10.0
    assert 5 <= tries <= 20, f"{tries} tries in {elapsed:.2f} s"
    return log, tries


@pytest.mark.parametrize("kind", CONTENDED)
def test_contended_acquire_gives_up_after_wait_with_few_tries(store: jobq.Store, kind: str) -> None:
    """acquire(wait=1.0) on a held lock returns False after about a second, having tried
    a bounded number of times (each try is one claim statement)."""
    assert CONTENDED[kind](store).acquire()
    log, tries = wait_in_vain(store, CONTENDED[kind](store), "INSERT INTO jobq_locks")
    assert len(log.statements) <= 4 * tries


# --- bad input ----------------------------------------------------------------------

BAD_INPUT: list[tuple[str, Callable[[jobq.Store], Any], str]] = [
    ("empty name", lambda s: Mutex(s, ""), "name"),
    ("name of 256", lambda s: Mutex(s, "n" * 256), "name"),
    ("name not a string", lambda s: Mutex(s, 7), "name"),  # type: ignore[arg-type]
    ("negative wait", lambda s: Mutex(s, "m", wait=-1), "wait"),
    ("NaN wait", lambda s: Mutex(s, "m", wait=math.nan), "wait"),
    ("negative acquire wait", lambda s: Mutex(s, "m").acquire(wait=-0.5), "wait"),
    ("timeout lock empty name", lambda s: TimeoutLock(s, "", 1), "name"),
    ("zero timeout", lambda s: TimeoutLock(s, "t", 0), "timeout"),
    ("negative timeout", lambda s: TimeoutLock(s, "t", -1), "timeout"),
    ("infinite timeout", lambda s: TimeoutLock(s, "t", math.inf), "timeout"),
    ("timeout lock negative wait", lambda s: TimeoutLock(s, "t", 1, wait=-1), "wait"),
    ("lease name of 256", lambda s: Lease(s, "l" * 256, 1), "name"),
    ("zero ttl", lambda s: Lease(s, "l", 0), "ttl"),
    ("negative ttl", lambda s: Lease(s, "l", -1), "ttl"),
    ("ttl not a number", lambda s: Lease(s, "l", "10"), "ttl"),  # type: ignore[arg-type]
    ("empty owner", lambda s: Lease(s, "l", 1, owner=""), "owner"),
    ("owner of 256", lambda s: Lease(s, "l", 1, owner="o" * 256), "owner"),
    ("lease negative acquire wait", lambda s: Lease(s, "l", 1).acquire(wait=-1), "wait"),
    ("release empty name", lambda s: release(s, ""), "name"),
    ("release name of 256", lambda s: release(s, "n" * 256), "name"),
]


@pytest.mark.parametrize(
    ("call", "option"), [(c, o) for _, c, o in BAD_INPUT], ids=[i for i, _, _ in BAD_INPUT]
)
def test_bad_input_is_invalid_option_and_writes_nothing(
    store: jobq.Store, call: Callable[[jobq.Store], Any], option: str
) -> None:
    """Empty or over-long names, non-positive ttl or timeout, negative wait: InvalidOption
    naming the option, and no lock row."""
    with pytest.raises(jobq.InvalidOption, match=f"'{option}'") as caught:
        call(store)
    assert caught.value.context["option"] == option
    assert lock_rows(store) == []


@pytest.mark.parametrize("ttl", [0, -1, math.inf])
def test_bad_renew_ttl_changes_nothing(store: jobq.Store, ttl: float) -> None:
    """renew() with a bad ttl raises InvalidOption; the row and the lease's ttl stay."""
    lease = Lease(store, "l", LONG, owner="a")
    assert lease.acquire()
    row = lock_row(store, "l")
    with pytest.raises(jobq.InvalidOption, match="'ttl'"):
        lease.renew(ttl=ttl)
    assert lease.ttl == LONG
    assert lock_row(store, "l") == row


def test_longest_names_fit(store: jobq.Store) -> None:
    """A 255-character name and owner are accepted; locked_by is cut to 255."""
    name, owner = "n" * 255, "o" * 255
    assert Mutex(store, name).acquire()
    assert release(store, name)
    lease = Lease(store, "l" * 255, LONG, owner=owner)
    assert lease.acquire()
    row = lock_row(store, "l" * 255)
    assert row is not None and row["owner"] == owner
    assert row["locked_by"] == f"{HOST_PID}:{owner}"[:255]
    assert lease.renew() and lease.release()


# --- the app's shortcuts ------------------------------------------------------------


def test_app_builds_locks_on_its_store(app: jobq.App) -> None:
    """app.mutex, app.timeout_lock and app.lease make the lock on the app's database."""
    mutex = app.mutex("m", wait=0.25)
    assert isinstance(mutex, Mutex) and mutex.store is app.store and mutex.wait == 0.25
    timeout = app.timeout_lock("t", LONG)
    assert isinstance(timeout, TimeoutLock) and timeout.timeout == LONG
    lease = app.lease("l", LONG, owner="o")
    assert isinstance(lease, Lease) and lease.owner == "o" and lease.ttl == LONG
    assert mutex.acquire() and timeout.acquire() and lease.acquire()
    assert [row["name"] for row in lock_rows(app.store)] == ["l", "m", "t"]
    with pytest.raises(jobq.InvalidOption, match="'ttl'"):
        app.lease("l2", 0)
    with pytest.raises(jobq.InvalidOption, match="'timeout'"):
        app.timeout_lock("t2", -1)
    with pytest.raises(jobq.InvalidOption, match="'name'"):
        app.mutex("")
    assert len(lock_rows(app.store)) == 3


# --- AdvisoryLock -------------------------------------------------------------------

#: advisory_key of these names, computed once with sha256sum and shell arithmetic.
KNOWN_KEYS = {"nightly-report": 7440995589958059143, "jobq": -6893577301590286317}


def test_advisory_key_is_a_fixed_function_of_the_name() -> None:
    """The first 8 bytes of SHA-256, big-endian, signed: hard-coded values, both signs."""
    for name, key in KNOWN_KEYS.items():
        assert advisory_key(name) == key
    assert advisory_key("é") == int.from_bytes(
        bytes.fromhex("4a99557e4033c353"), "big", signed=True
    )


def test_advisory_key_does_not_depend_on_the_hash_seed() -> None:
    """Two interpreters with different PYTHONHASHSEED compute the same key (unlike hash())."""
    code = (
        "from jobq.locks import advisory_key; "
        "print(advisory_key('nightly-report'), hash('nightly-report'))"
    )
    root = Path(jobq.__file__).resolve().parent.parent
    outputs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True,
            check=True, timeout=60,
        )  # fmt: skip
        outputs.append(done.stdout.split())
    assert [key for key, _ in outputs] == [str(KNOWN_KEYS["nightly-report"])] * 2
    assert outputs[0][1] != outputs[1][1], "the seeds did not change hash(); test is moot"


@pytest.mark.parametrize("backend", ["sqlite", "mysql"], scope="module")
@pytest.mark.parametrize("session", [False, True])
def test_advisory_lock_requires_postgresql(
    store: jobq.Store, app: jobq.App, session: bool, backend: str
) -> None:
    """Elsewhere building an AdvisoryLock (directly or from the app) raises RequiresPostgreSQL."""
    with pytest.raises(
        jobq.RequiresPostgreSQL, match=f"requires PostgreSQL; this database is {backend}"
    ):
        AdvisoryLock(store, "x", session=session)
    with pytest.raises(jobq.RequiresPostgreSQL, match="requires PostgreSQL"):
        app.advisory_lock("x", session=session)
    assert lock_rows(store) == []


def try_from_outside(store: jobq.Store, key: int) -> bool:
    """Whether a separate connection, knowing only the key, can take the lock right now."""
    with store.engine.connect() as conn:
        return bool(
            conn.execute(sa.text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": key}).scalar()
        )


@ON_POSTGRESQL
def test_transaction_advisory_lock_is_held_by_its_own_transaction(
    store: jobq.Store, advisory_name: str
) -> None:
    """acquire() opens a connection and transaction that hold the lock; release() commits
    the work done there and frees the lock."""
    lock, other = AdvisoryLock(store, advisory_name), AdvisoryLock(store, advisory_name)
    assert lock.key == advisory_key(advisory_name)
    assert lock.acquire() is True
    assert lock.connection is not None and lock.connection.in_transaction()
    assert other.acquire() is False
    assert other.connection is None
    assert AdvisoryLock(store, advisory_name, session=True).acquire() is False
    assert try_from_outside(store, lock.key) is False

    store.enqueue("guarded", {}, connection=lock.connection)
    assert store.counts() == {}, "the work is not committed while the lock is held"
    assert lock.release() is True
    assert lock.connection is None
    assert store.counts() == {("default", Status.QUEUED): 1}
    assert try_from_outside(store, lock.key) is True
    assert lock.release() is False, "nothing left to release"

    assert other.acquire() is True
    assert other.release() is True
    assert store.engine.pool.checkedout() == 0


@ON_POSTGRESQL
@pytest.mark.parametrize("end", ["commit", "rollback"])
def test_advisory_lock_in_the_callers_transaction_lasts_until_it_ends(
    store: jobq.Store, advisory_name: str, end: str
) -> None:
    """acquire(connection=conn) locks inside the caller's transaction; release() cannot free
    it early (False); committing or rolling back does."""
    lock = AdvisoryLock(store, advisory_name)
    with store.engine.connect() as conn:
        transaction = conn.begin()
        assert lock.acquire(connection=conn) is True
        assert lock.connection is conn
        assert AdvisoryLock(store, advisory_name).acquire() is False
        assert lock.release() is False
        assert AdvisoryLock(store, advisory_name).acquire() is False, "released too early"
        assert not conn.closed
        getattr(transaction, end)()
        assert try_from_outside(store, lock.key) is True


@ON_POSTGRESQL
def test_session_advisory_lock_outlives_transactions_until_released(
    store: jobq.Store, advisory_name: str
) -> None:
    """session=True holds the lock on its own autocommit connection across transactions,
    until release() unlocks it."""
    lock = AdvisoryLock(store, advisory_name, session=True)
    assert lock.acquire() is True
    assert lock.connection is not None
    lock.connection.execute(sa.text("SELECT 1"))
    lock.connection.commit()
    assert AdvisoryLock(store, advisory_name, session=True).acquire() is False
    assert AdvisoryLock(store, advisory_name).acquire() is False
    assert try_from_outside(store, lock.key) is False

    assert lock.release() is True
    assert lock.connection is None
    assert lock.release() is False
    assert try_from_outside(store, lock.key) is True
    again = AdvisoryLock(store, advisory_name, session=True)
    assert again.acquire() is True and again.release() is True
    assert store.engine.pool.checkedout() == 0


@ON_POSTGRESQL
@pytest.mark.parametrize("session", [False, True])
def test_advisory_lock_context_manager(
    store: jobq.Store, advisory_name: str, session: bool
) -> None:
    """``with`` holds the lock for the block, raises LockNotAcquired while it is held, and
    frees it at exit."""
    with AdvisoryLock(store, advisory_name, session=session) as held:
        assert isinstance(held, AdvisoryLock) and held.connection is not None
        with (
            pytest.raises(jobq.LockNotAcquired, match="advisory lock"),
            AdvisoryLock(store, advisory_name, session=session, wait=0.1),
        ):
            pytest.fail("entered a held advisory lock")
    assert try_from_outside(store, advisory_key(advisory_name)) is True
    assert store.engine.pool.checkedout() == 0


@ON_POSTGRESQL
def test_advisory_lock_refuses_a_second_acquire_of_one_object(
    store: jobq.Store, advisory_name: str
) -> None:
    """One AdvisoryLock object holds the lock once; acquiring it again is a JobqError."""
    lock = AdvisoryLock(store, advisory_name)
    assert lock.acquire()
    with pytest.raises(jobq.JobqError, match="already held"):
        lock.acquire()
    assert lock.release()


@ON_POSTGRESQL
@pytest.mark.parametrize("session", [False, True])
def test_contended_advisory_acquire_gives_up_with_few_tries(
    store: jobq.Store, advisory_name: str, session: bool
) -> None:
    """acquire(wait=1.0) on a held advisory lock returns False after about a second, with a
    bounded number of tries, and gives its connection back."""
    holder = AdvisoryLock(store, advisory_name, session=session)
    assert holder.acquire()
    waiter = AdvisoryLock(store, advisory_name, session=session)
    wait_in_vain(store, waiter, "pg_try_advisory")
    assert waiter.connection is None
    assert store.engine.pool.checkedout() == 1, "only the holder's connection is out"
    assert holder.release()


@ON_POSTGRESQL
def test_advisory_bad_input(store: jobq.Store, app: jobq.App) -> None:
    """Bad names and waits are InvalidOption, and no connection is left checked out."""
    for call in (
        lambda: AdvisoryLock(store, ""),
        lambda: AdvisoryLock(store, "a" * 256),
        lambda: AdvisoryLock(store, "a", wait=-1),
        lambda: AdvisoryLock(store, "a").acquire(wait=-1),
        lambda: app.advisory_lock("", session=True),
    ):
        with pytest.raises(jobq.InvalidOption):
            call()
    assert store.engine.pool.checkedout() == 0


@ON_POSTGRESQL
def test_app_advisory_lock(app: jobq.App, advisory_name: str) -> None:
    """app.advisory_lock makes an AdvisoryLock on the app's database."""
    lock = app.advisory_lock(advisory_name, session=True, wait=0.5)
    assert isinstance(lock, AdvisoryLock)
    assert lock.store is app.store and lock.session is True and lock.wait == 0.5
    assert lock.acquire() and lock.release()


@ON_POSTGRESQL
def test_a_failing_advisory_with_block_rolls_its_work_back(
    store: jobq.Store, advisory_name: str
) -> None:
    """An exception in a transaction-scoped block rolls back the work done on
    lock.connection (and so frees the lock), instead of committing it."""
    with pytest.raises(RuntimeError), AdvisoryLock(store, advisory_name) as lock:
        store.enqueue("guarded", {}, connection=lock.connection)
        raise RuntimeError("the guarded work failed")
    assert store.counts() == {}
    assert try_from_outside(store, advisory_key(advisory_name)) is True
    assert store.engine.pool.checkedout() == 0


@ON_POSTGRESQL
def test_advisory_lock_in_the_callers_transaction_can_be_taken_again_after_it(
    store: jobq.Store, advisory_name: str
) -> None:
    """release() lets go of the caller's connection, so the object serves the next one."""
    lock = AdvisoryLock(store, advisory_name)
    for _ in range(2):
        with store.engine.begin() as conn:
            assert lock.acquire(connection=conn) is True
            assert lock.release() is False
            assert lock.connection is None


@ON_POSTGRESQL
def test_a_dropped_session_advisory_lock_does_not_stay_held(
    store: jobq.Store, advisory_name: str
) -> None:
    """An object dropped while holding a session lock closes its connection, rather than
    let the pool hand the connection on with the lock still held."""
    lock = AdvisoryLock(store, advisory_name, session=True)
    assert lock.acquire() is True
    del lock
    gc.collect()
    # Another session (not the pool's, which might be the very one that held it).
    outside = sa.create_engine(store.engine.url, poolclass=sa.pool.NullPool)
    with outside.connect() as conn:
        key = {"key": advisory_key(advisory_name)}
        assert conn.execute(sa.text("SELECT pg_try_advisory_xact_lock(:key)"), key).scalar()
    outside.dispose()


def test_a_failed_renew_keeps_the_old_ttl(store: jobq.Store) -> None:
    """renew(ttl) adopts the new ttl only when it applied."""
    old, new = Lease(store, "r", SHORT), Lease(store, "r", LONG)
    assert old.acquire()
    time.sleep(PAST_SHORT)
    assert new.acquire()
    assert old.renew(LONG) is False
    assert old.ttl == SHORT


def test_an_owner_retaking_its_expired_lease_starts_a_new_hold(store: jobq.Store) -> None:
    """since (acquired_at) restarts when the lease had expired before its owner took it back."""
    lease = Lease(store, "again", SHORT, owner="me")
    assert lease.acquire()
    first = lock_row(store, "again")
    assert first is not None
    time.sleep(PAST_SHORT)
    assert lease.acquire()
    second = lock_row(store, "again")
    assert second is not None and second["acquired_at"] > first["acquired_at"]
