"""`jobq locks list | release | purge`, run as a user runs them, on every database.

The locks are taken in this process (jobq.locks) and by tasks captured here; the commands
run in subprocesses, so a release there must free what another process object holds.
"""

from __future__ import annotations

import os
import socket
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

import jobq
from jobq import Status
from jobq.db.tasks import DEFAULT_LEASE
from jobq.dialects.schema import locks
from jobq.locks import Lease, Mutex, TimeoutLock
from tests.acceptance.test_cli import UNREACHABLE, Cli, failure, rows_of, usage_error

HERE = f"{socket.gethostname()}:{os.getpid()}"
HEADER = "kind name holder since expires"


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


def listed(stdout: str) -> dict[str, tuple[str, str, datetime, datetime | None]]:
    """`jobq locks list` by name: (kind, holder, since, expires), the header checked."""
    header, *lines = rows_of(stdout)
    assert header == HEADER
    found = {}
    for line in lines:
        kind, name, holder, *moments = line.split(" ")
        # Each moment prints as "YYYY-MM-DD HH:MM:SS+00:00", or "-" when there is none.
        since = datetime.fromisoformat(" ".join(moments[:2]))
        rest = moments[2:]
        expires = None if rest == ["-"] else datetime.fromisoformat(" ".join(rest))
        assert name not in found, stdout
        found[name] = (kind, holder, since, expires)
    return found


def expire(store: jobq.Store, name: str) -> None:
    """Move lock row ``name``'s expiry a minute into the past."""
    with store.engine.begin() as conn:
        conn.execute(
            sa.update(locks)
            .where(locks.c.name == name)
            .values(expires_at=store.dialect.now_plus(-60.0))
        )


def lock_names(store: jobq.Store) -> set[str]:
    with store.engine.connect() as conn:
        return set(conn.execute(sa.select(locks.c.name)).scalars())


# --- list ---------------------------------------------------------------------------------


def test_list_with_no_held_lock_says_so(cli: Cli, db_url: str, store: jobq.Store) -> None:
    """An empty table, a free mutex and a waiting task's key all make "no locks"."""
    mutex = Mutex(store, "m")
    assert mutex.acquire() and mutex.release()  # its row stays, free
    store.enqueue("post", {}, lock_key="ledger:1")  # queued, not running
    done = cli(db_url, "locks", "list")
    assert (done.returncode, done.stdout, done.stderr) == (0, "no locks\n", "")


def test_list_shows_every_held_lock_and_running_tasks_keys(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    """Held mutex, lease, timeout lock and a running task's key, each with its holder and times;
    free mutexes and waiting tasks' keys are left out."""
    assert Mutex(store, "held-mutex").acquire()
    free = Mutex(store, "free-mutex")
    assert free.acquire() and free.release()
    lease = Lease(store, "lease", 60, owner="owner-1")
    assert lease.acquire()
    assert TimeoutLock(store, "period", 3600).acquire()
    store.enqueue("post", {}, lock_key="ledger:1")
    store.enqueue("post", {}, lock_key="ledger:1")  # waits behind the first
    store.enqueue("post", {}, lock_key="ledger:2", delay=3600)  # not due
    (run,) = store.capture(10, worker_id="worker-7")

    done = cli(db_url, "locks", "list")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    found = listed(done.stdout)
    assert {name: row[:2] for name, row in found.items()} == {
        "held-mutex": ("mutex", HERE),
        "lease": ("lease", f"{HERE}:owner-1"),
        "period": ("timeout", HERE),
        "ledger:1": ("task", "worker-7"),
    }
    assert found["held-mutex"][3] is None  # a mutex never expires
    for name, seconds in [("lease", 60), ("period", 3600), ("ledger:1", DEFAULT_LEASE)]:
        _, _, since, expires = found[name]
        assert expires is not None
        # Printed to the second: the spans are within a second of the one asked for.
        assert abs((expires - since) - timedelta(seconds=seconds)) <= timedelta(seconds=1), name
    assert run.started_at is not None
    assert abs(found["ledger:1"][2] - run.started_at) <= timedelta(seconds=1)

    # A task's key is listed only while a run of it holds it.
    assert store.set_status(run.id, run.attempt, Status.DONE)
    assert set(listed(cli(db_url, "locks", "list").stdout)) == {"held-mutex", "lease", "period"}


def test_enqueue_with_app_fills_the_lock_key_a_running_task_is_listed_under(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    """`jobq enqueue --app` formats the task's lock template; `list` shows the key as it runs."""
    app = ("--app", "tests.apps.mixed:app")
    done = cli(db_url, "enqueue", "ledger", *app, "--kwargs", '{"holder": 3, "n": 1}')
    assert done.returncode == 0, done.stderr
    task = store.get(int(done.stdout))
    assert task is not None and task.lock_key == "ledger:3"
    store.capture(1, worker_id="w")
    assert listed(cli(db_url, "locks", "list").stdout)["ledger:3"][:2] == ("task", "w")


# --- release ------------------------------------------------------------------------------


def test_release_frees_each_kind_of_lock_whoever_holds_it(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    """After `release`, a new holder takes the mutex, the lease and the timeout lock at once."""
    mutex = Mutex(store, "m")
    held = Lease(store, "l", 3600, owner="first")
    period = TimeoutLock(store, "t", 3600)
    assert mutex.acquire() and held.acquire() and period.acquire()
    assert not Mutex(store, "m").acquire()
    assert not Lease(store, "l", 60, owner="second").acquire()
    assert not TimeoutLock(store, "t", 3600).acquire()

    results = cli.many(db_url, [["locks", "release", name] for name in ("m", "l", "t")])
    for name, done in zip(("m", "l", "t"), results, strict=True):
        assert (done.returncode, done.stdout, done.stderr) == (0, f"released {name!r}\n", "")

    assert Mutex(store, "m").acquire()
    second = Lease(store, "l", 60, owner="second")
    assert second.acquire()
    assert TimeoutLock(store, "t", 3600).acquire()
    # The first lease holder lost it: it can neither renew nor release the new one's.
    assert not held.renew() and not held.release()
    assert second.renew()
    assert listed(cli(db_url, "locks", "list").stdout)["l"][:2] == ("lease", f"{HERE}:second")


def test_release_of_what_is_not_held_is_one_error_line_and_changes_nothing(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    """Unknown names, free mutexes and waiting tasks' keys: exit 1, "no held lock named"."""
    free = Mutex(store, "free")
    assert free.acquire() and free.release()
    store.enqueue("post", {}, lock_key="waiting", delay=3600)
    lease = Lease(store, "kept", 60)
    assert lease.acquire()
    names = ["nope", "free", "waiting"]
    results = cli.many(db_url, [["locks", "release", name] for name in names])
    for name, done in zip(names, results, strict=True):
        assert failure(done) == f"error: no held lock named {name!r}"
    assert lock_names(store) == {"free", "kept"}
    assert lease.renew()


def test_release_of_a_running_tasks_key_says_it_ends_with_the_run(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    """A task's lock key cannot be released by hand: exit 1, and the task keeps running."""
    task_id = store.enqueue("post", {}, lock_key="ledger:1")
    waiting = store.enqueue("post", {}, lock_key="ledger:1")
    (run,) = store.capture(10, worker_id="w")
    line = failure(cli(db_url, "locks", "release", "ledger:1"))
    assert line.startswith("error: 'ledger:1' is the lock key of a running task"), line
    assert "freed when the run ends" in line
    task = store.get(task_id)
    assert task is not None and (task.status, task.attempt) == (Status.IN_PROGRESS, 1)
    assert store.capture(10, worker_id="w2") == []
    assert store.set_status(run.id, run.attempt, Status.DONE)
    assert [t.id for t in store.capture(10, worker_id="w2")] == [waiting]


@pytest.mark.parametrize("backend", ["sqlite"])
def test_release_refuses_an_empty_or_overlong_name(cli: Cli, db_url: str) -> None:
    """The NAME is a key: non-empty and at most 255 characters, or a usage error."""
    empty, long = cli.many(db_url, [["locks", "release", ""], ["locks", "release", "n" * 256]])
    assert usage_error(empty).startswith("Error: Invalid value for 'NAME': ")
    assert "longer than 255 characters" in usage_error(long)


# --- purge --------------------------------------------------------------------------------


def test_purge_deletes_only_expired_leases(cli: Cli, db_url: str, store: jobq.Store) -> None:
    """Expired leases go; live leases, mutexes and timeout locks past their period stay."""
    for name in ("old-1", "old-2", "live"):
        assert Lease(store, name, 60).acquire()
    assert Mutex(store, "mutex").acquire()
    assert TimeoutLock(store, "period", 1).acquire()
    for name in ("old-1", "old-2", "period"):
        expire(store, name)

    done = cli(db_url, "locks", "purge")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith("purged 2 expired lease"), done.stdout
    assert lock_names(store) == {"live", "mutex", "period"}
    expire(store, "live")
    one = cli(db_url, "locks", "purge")
    assert one.stdout.startswith("purged 1 expired lease"), one.stdout
    again = cli(db_url, "locks", "purge")
    assert again.stdout.startswith("purged 0 expired lease"), again.stdout
    assert lock_names(store) == {"mutex", "period"}


# --- the database -------------------------------------------------------------------------

COMMANDS = [["locks", "list"], ["locks", "release", "x"], ["locks", "purge"]]


def test_an_unreachable_database_is_one_line(cli: Cli) -> None:
    """Every locks command reports an unreachable database in one line, without the password."""
    for args, done in zip(COMMANDS, cli.many(UNREACHABLE, COMMANDS), strict=True):
        assert failure(done).startswith("error: Cannot connect to database 'x'"), args
        assert "secret" not in done.stderr, args


def test_an_unmigrated_database_says_to_run_jobq_migrate(cli: Cli, empty_url: str) -> None:
    """Every locks command on a database without jobq's tables says to run `jobq migrate`."""
    for args, done in zip(COMMANDS, cli.many(empty_url, COMMANDS), strict=True):
        assert failure(done).endswith("; run `jobq migrate`."), args
