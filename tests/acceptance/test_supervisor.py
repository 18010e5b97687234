"""`jobq worker --processes N` against real processes, on every database.

The supervisor starts N worker processes, each registered on its own with the
supervisor's pid; SIGTERM of the supervisor stops them all within --grace (runs that
cannot finish go back to the queue, retries unspent); a process killed with -9 is
started again, and the tasks it held are rescued once their leases expire; a supervisor
killed with -9 leaves no process behind for long.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

import jobq
from jobq import Status
from jobq.core.live_workers import LiveWorker
from jobq.db.tasks import as_utc
from jobq.dialects.schema import locks
from jobq.upkeep import UPKEEP_LOCK
from tests.acceptance.test_hostile_tasks import DEADLINE, alive_until, get, state, stop
from tests.acceptance.test_process_pool import runs, store  # noqa: F401 (fixture)
from tests.acceptance.test_worker_processes import wait_until
from tests.apps import process_tasks
from tests.worker_processes import Worker, Workers

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def workers(store: jobq.Store, db_url: str, tmp_path: Path) -> Iterator[Workers]:  # noqa: F811
    started = Workers("tests.apps.process_tasks:app", db_url, tmp_path)
    yield started
    started.kill_all()
    for pid in _group_pids(started):  # a supervisor's processes, should one be left
        _kill(pid)


def _group_pids(started: Workers) -> list[int]:
    """The pids of every process the supervisors of ``started`` wrote in their logs."""
    pids = []
    for worker in started.started:
        for line in worker.stderr().splitlines():
            if "jobq.worker: worker " in line and " started: " in line:
                pids.append(int(line.split("jobq.worker: worker ")[1].split(":")[1]))
    return pids


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) counts as gone.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(") ")[1][0] != "Z"


def group(store: jobq.Store, supervisor: Worker) -> list[LiveWorker]:  # noqa: F811
    """The registered workers that ``supervisor`` started."""
    return [w for w in store.live_workers() if w.supervisor_pid == supervisor.process.pid]


def test_sigterm_of_the_supervisor_stops_every_process_within_the_grace(
    store: jobq.Store,  # noqa: F811
    workers: Workers,
    db_url: str,
) -> None:
    """Three processes of two slots each, six ten-minute naps and six short ones: each
    process registers with the supervisor's pid (`jobq status --json` says so); SIGTERM
    of the supervisor with --grace 2: it exits 0 within the grace (and a margin), every
    process with it; the short naps are done, the long ones back queued with attempt 1
    and their retries unspent; no registry row is left."""
    long = [process_tasks.nap.enqueue(seconds=600) for _ in range(6)]
    supervisor = workers.start("--processes", "3", "--concurrency", "2", "--grace", "2")
    alive_until(supervisor, lambda: len(group(store, supervisor)) == 3)
    alive_until(supervisor, lambda: sum(len(runs(task_id)) for task_id in long) == 6)
    short = [process_tasks.nap.enqueue(seconds=0.5) for _ in range(6)]
    members = group(store, supervisor)
    assert len({w.pid for w in members}) == 3 and supervisor.process.pid not in {
        w.pid for w in members
    }
    shown = subprocess.run(
        [sys.executable, "-m", "jobq.cli", "status", "--json", "--database-url", db_url],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
    )  # fmt: skip
    supervisors = {json.dumps(w["supervisor"]) for w in json.loads(shown.stdout)["workers"]}
    assert supervisors == {json.dumps({"host": members[0].host, "pid": supervisor.process.pid})}

    started = time.monotonic()
    log = stop(supervisor, timeout=2 + 15)
    took = time.monotonic() - started
    assert not any(_alive(w.pid) for w in members), log
    for task_id in long:
        task = get(store, task_id)
        assert (task.status, task.attempt, task.retries_left) == (Status.QUEUED, 1, 2), (
            f"{state(store, task_id)}; stopped in {took:.1f} s"
        )
    for task_id in short:  # enqueued while every slot was busy: never captured, or done
        assert get(store, task_id).status in (Status.QUEUED, Status.DONE), state(store, task_id)
    assert store.live_workers() == []
    assert "supervisor" in log and "stopping 3 worker process(es) within 2 s" in log


def test_kill_9_of_one_process_restarts_it_and_its_task_is_rescued(
    store: jobq.Store,  # noqa: F811
    workers: Workers,
) -> None:
    """Two processes of one slot, --lease 2: kill -9 of the process running nap A; the
    supervisor starts another process (the log says which died and how), and A is rescued
    after its lease and run again to the end (attempt 2), while B ran once."""
    a = process_tasks.nap.enqueue(seconds=3)
    b = process_tasks.nap.enqueue(seconds=3)
    supervisor = workers.start("--processes", "2", "--concurrency", "1", "--lease", "2")
    alive_until(supervisor, lambda: len(runs(a)) == 1 and len(runs(b)) == 1)
    (first_run,) = runs(a)
    victim = first_run["pid"]
    alive_until(supervisor, lambda: len(group(store, supervisor)) == 2)
    before = {w.pid for w in group(store, supervisor)}
    os.kill(victim, signal.SIGKILL)
    # Its registry row stays (stale) until forgotten: a third row is the new process.
    alive_until(supervisor, lambda: {w.pid for w in group(store, supervisor)} - before != set())
    alive_until(supervisor, lambda: get(store, a).status is Status.DONE, timeout=DEADLINE)
    alive_until(supervisor, lambda: get(store, b).status is Status.DONE, timeout=DEADLINE)
    log = stop(supervisor)
    assert get(store, a).attempt == 2 and [r["attempt"] for r in runs(a)] == [1, 2]
    assert get(store, b).attempt == 1 and len(runs(b)) == 1
    assert f"(pid {victim}) was killed by SIGKILL" in log


def upkeep_lease(store: jobq.Store) -> tuple[int, float] | None:  # noqa: F811
    """The pid of the worker holding the upkeep lease and the seconds its lease has left
    by the database's clock, or None while no worker holds it."""
    query = sa.select(locks.c.owner, locks.c.expires_at, store.dialect.now()).where(
        locks.c.name == UPKEEP_LOCK
    )
    with store.engine.connect() as conn:
        row = conn.execute(query).one_or_none()
    if row is None or row.owner is None or row.expires_at is None:
        return None
    expires, now = as_utc(row.expires_at), as_utc(row[2])
    assert expires is not None and now is not None
    left = (expires - now).total_seconds()
    return (int(row.owner.split(":")[1]), left) if left > 0 else None


def test_a_rescue_interval_reaches_every_process_and_shortens_the_upkeep_lease(
    store: jobq.Store,  # noqa: F811
    workers: Workers,
) -> None:
    """--processes 2 --rescue-interval 1: the process elected for the upkeep holds its
    lease for 4 s (4 rescue intervals) at most, not the default's 20 s (renewed every 5
    to 15 s, it never has less than 5 s left): a dead holder's cron runs and workflow
    nodes wait for its lease that much less. kill -9 of the holder: another process takes
    the upkeep over, on the same short lease."""
    supervisor = workers.start("--processes", "2", "--rescue-interval", "1")
    alive_until(supervisor, lambda: len(group(store, supervisor)) == 2)
    alive_until(supervisor, lambda: upkeep_lease(store) is not None)
    held = upkeep_lease(store)
    assert held is not None
    victim, left = held
    assert victim in {w.pid for w in group(store, supervisor)}
    assert 0 < left <= 4.0 + 1e-3, left
    os.kill(victim, signal.SIGKILL)

    def taken_over() -> bool:
        """Its lease lapsed unrenewed, and the other process (or the one started in its
        place) took the upkeep over."""
        lease = upkeep_lease(store)
        return lease is not None and lease[0] != victim

    alive_until(supervisor, taken_over)
    held = upkeep_lease(store)
    assert held is not None
    heir, left = held
    assert heir in {w.pid for w in group(store, supervisor)} and heir != victim
    assert 0 < left <= 4.0 + 1e-3, left
    stop(supervisor)


def test_kill_9_of_the_supervisor_leaves_no_process_behind(
    store: jobq.Store,  # noqa: F811
    workers: Workers,
) -> None:
    """kill -9 of the supervisor: its processes see it gone and stop by themselves (as
    after a SIGTERM: a running nap goes back to the queue), deregistering."""
    napper = process_tasks.nap.enqueue(seconds=600)
    supervisor = workers.start("--processes", "2", "--concurrency", "1", "--grace", "1")
    alive_until(supervisor, lambda: len(runs(napper)) == 1)
    members = group(store, supervisor)
    supervisor.process.kill()
    supervisor.process.wait(timeout=30)
    wait_until(lambda: not any(_alive(w.pid) for w in members), timeout=DEADLINE)
    task = get(store, napper)
    assert (task.status, task.attempt) == (Status.QUEUED, 1), state(store, napper)
    assert store.live_workers() == []
