"""A `--pool processes` child never outlives its worker, against real processes, on every
database. The app is tests/apps/process_tasks.py.

A worker killed with -9 while its child computes in C (``sum(range(4 * 10**9))``, which
lets no thread of the child run, nor any signal handler): every process under it (its
fork server, the child, the resource tracker) is gone within seconds, and the attempt a
second worker captures once the lease expired never overlaps the first (the second
records whether the first's process still ran as it began). The same under a
`--processes` supervisor, and when the supervisor itself is killed with -9.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

import jobq
from jobq import Status
from tests.acceptance.test_hostile_tasks import DEADLINE, alive_until, get, state, stop
from tests.acceptance.test_process_pool import runs, store  # noqa: F401 (fixture)
from tests.acceptance.test_worker_processes import wait_until
from tests.apps import process_tasks
from tests.worker_processes import Workers

pytestmark = pytest.mark.slow

POOL = ("--pool", "processes")
#: The lease of the tasks: attempt 2 may begin this long after the worker died.
LEASE = "3"
#: Seconds within which every process under a killed worker must be gone: the fix takes
#: milliseconds; without it, the child computes for minutes.
GONE_WITHIN = 10
ROUNDS = 3


@pytest.fixture
def processes() -> Iterator[set[int]]:
    """The pids the test saw under its workers: any still running at the end is killed
    (a child that outlived its worker would burn a core for minutes)."""
    seen: set[int] = set()
    yield seen
    for pid in seen:
        if running(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def workers(store: jobq.Store, db_url: str, tmp_path: Path) -> Iterator[Workers]:  # noqa: F811
    started = Workers("tests.apps.process_tasks:app", db_url, tmp_path)
    yield started
    started.kill_all()


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(") ")[2][0] != "Z"
    except FileNotFoundError:
        return False


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rpartition(") ")[2].split()[1])


def descendants(root: int) -> set[int]:
    """The pids of every running process under ``root`` (children, theirs, ...), from /proc."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                parents[int(entry)] = parent_of(int(entry))
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return {pid for pid in found if running(pid)}


def assert_all_gone(pids: set[int], what: str) -> None:
    """Wait up to GONE_WITHIN s for every process of ``pids`` to be gone."""
    try:
        wait_until(lambda: not any(running(pid) for pid in pids), timeout=GONE_WITHIN)
    except AssertionError:
        left = sorted(pid for pid in pids if running(pid))
        raise AssertionError(f"{GONE_WITHIN} s after {what}, still running: {left}") from None


def assert_never_overlapped(store: jobq.Store, task_id: int) -> None:  # noqa: F811
    """Task ``task_id`` is done by its attempt 2, begun once attempt 1's process was gone."""
    task = get(store, task_id)
    assert (task.status, task.result) == (Status.DONE, 2), state(store, task_id)
    first, second = runs(task_id)
    assert second["earlier_alive"] is False, (
        f"attempt 2 began while attempt 1's process {first['pid']} still ran"
    )


def test_kill_9_of_a_worker_kills_its_child_computing_in_c(
    store: jobq.Store,  # noqa: F811
    workers: Workers,
    processes: set[int],
) -> None:
    """Three rounds: a one-slot `--pool processes` worker (--lease 3) runs burn's attempt
    1 in a child; a second worker waits beside it; kill -9 of the first: its child, its
    fork server and every other process under it are gone within GONE_WITHIN s, and the
    second worker runs attempt 2 after the lease, never while attempt 1 still ran."""
    for _ in range(ROUNDS):
        task_id = process_tasks.burn.enqueue()
        first = workers.start("--concurrency", "1", "--lease", LEASE, *POOL)
        alive_until(first, lambda task_id=task_id: len(runs(task_id)) == 1)
        tree = descendants(first.process.pid)
        processes.update(tree)
        child = runs(task_id)[0]["pid"]
        assert child in tree, (child, tree)
        second = workers.start("--concurrency", "1", "--lease", LEASE, *POOL)
        first.process.kill()
        first.process.wait(timeout=30)
        assert_all_gone(tree, "kill -9 of the worker")
        alive_until(second, lambda task_id=task_id: get(store, task_id).status is Status.DONE)
        processes.update(descendants(second.process.pid))
        stop(second)
        assert_never_overlapped(store, task_id)


def test_kill_9_of_a_supervised_worker_kills_its_child_computing_in_c(
    store: jobq.Store,  # noqa: F811
    workers: Workers,
    processes: set[int],
) -> None:
    """`--processes 2 --pool processes`, two rounds: kill -9 of the worker process whose
    child runs burn's attempt 1 (the child's parent is the fork server, whose parent is
    that worker): every process under it is gone within GONE_WITHIN s; the supervisor
    starts another, and attempt 2 never overlaps attempt 1."""
    supervisor = workers.start("--processes", "2", "--concurrency", "1", "--lease", LEASE, *POOL)
    for _ in range(2):
        task_id = process_tasks.burn.enqueue()
        alive_until(supervisor, lambda task_id=task_id: len(runs(task_id)) == 1)
        processes.update(descendants(supervisor.process.pid))
        child = runs(task_id)[0]["pid"]
        worker = parent_of(parent_of(child))
        tree = descendants(worker)
        assert child in tree and parent_of(worker) == supervisor.process.pid, (child, worker)
        os.kill(worker, signal.SIGKILL)
        assert_all_gone(tree, f"kill -9 of worker process {worker}")
        alive_until(supervisor, lambda task_id=task_id: get(store, task_id).status is Status.DONE)
        assert_never_overlapped(store, task_id)
    processes.update(descendants(supervisor.process.pid))
    stop(supervisor)


def test_kill_9_of_the_supervisor_leaves_no_pool_child_computing(
    store: jobq.Store,  # noqa: F811
    workers: Workers,
    processes: set[int],
) -> None:
    """kill -9 of a `--processes 2 --pool processes --grace 1` supervisor while a child
    computes in C: its worker processes see it gone and stop, killing the child at the
    end of the grace; every process under the supervisor is gone within DEADLINE s, and
    the run is back queued, its retry unspent."""
    task_id = process_tasks.burn.enqueue()
    supervisor = workers.start("--processes", "2", "--concurrency", "1", "--grace", "1", *POOL)
    alive_until(supervisor, lambda task_id=task_id: len(runs(task_id)) == 1)
    tree = descendants(supervisor.process.pid)
    processes.update(tree)
    assert runs(task_id)[0]["pid"] in tree
    supervisor.process.kill()
    supervisor.process.wait(timeout=30)
    wait_until(lambda: not any(running(pid) for pid in tree), timeout=DEADLINE)
    task = get(store, task_id)
    assert (task.status, task.attempt, task.retries_left) == (Status.QUEUED, 1, 1), state(
        store, task_id
    )
