"""A second Ctrl-C makes a `jobq worker` exit at once, having given back what it holds.

SIGINT twice while a long task runs (tests/apps/hostile.py's ``long_first``, retries=0):
the process exits within seconds, its run back in the queue with its retries untouched
(so a new worker runs it again and it ends done), the worker gone from the registry and
the upkeep lease free; with --pool processes, its child is dead too. Where the database
does not answer (a forwarder that stops passing bytes on), the exit still comes within
seconds: giving back has a hard deadline.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import jobq
from jobq import Status
from jobq.upkeep import upkeep_holder
from tests.acceptance.test_hostile_tasks import (  # noqa: F401 (fixtures)
    Workers,
    abort,
    alive_until,
    excerpt,
    exits_by_itself,
    get,
    run_of,
    state,
    store,
    workers,
)
from tests.acceptance.test_worker_processes import wait_until
from tests.apps import hostile
from tests.forwarder import Forwarder, forwarding

pytestmark = pytest.mark.slow

#: Seconds a worker may take to exit after its second SIGINT (it gives back within 1 s;
#: the rest is a busy 2-core machine).
EXIT_WITHIN = 10


def exit_at_once(worker_process: subprocess.Popen[bytes], log: Path) -> float:
    """SIGINT, and once the worker says it is stopping, SIGINT again; the seconds it took
    to exit after the second (failing, with its stacks, past EXIT_WITHIN)."""
    worker_process.send_signal(signal.SIGINT)
    # The second must come after the first was handled: two at once are one signal.
    wait_until(lambda: " stopping: waiting up to " in log.read_text(errors="replace"))
    signalled = time.monotonic()
    worker_process.send_signal(signal.SIGINT)
    try:
        worker_process.wait(timeout=EXIT_WITHIN)
    except subprocess.TimeoutExpired:
        worker_process.send_signal(signal.SIGABRT)
        worker_process.wait(timeout=30)
        raise AssertionError(
            f"the worker still ran {EXIT_WITHIN} s after its second SIGINT; its stacks:\n"
            f"{excerpt(log.read_text(errors='replace'), lines=120)}"
        ) from None
    return time.monotonic() - signalled


def gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie waiting to be reaped has)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in status


@pytest.mark.parametrize("pool", ["threads", "processes"])
def test_a_second_sigint_gives_the_run_back_then_exits(
    store: jobq.Store,  # noqa: F811
    workers: Workers,  # noqa: F811
    pool: str,
) -> None:
    task_id = hostile.long_first.enqueue(seconds=600)
    worker_id = f"exit-at-once-{pool}"
    worker = workers.start(
        "--concurrency", "2", "--grace", "60", "--pool", pool, "--worker-id", worker_id
    )
    alive_until(
        worker, lambda: run_of(task_id, 1) is not None and upkeep_holder(store) == worker_id
    )
    first = run_of(task_id, 1)
    assert first is not None

    took = exit_at_once(worker.process, worker.log)
    log = worker.stderr()
    task = get(store, task_id)
    assert (task.status, task.attempt, task.retries_left) == (Status.QUEUED, 1, 0), (
        f"exited {took:.1f} s after the second SIGINT: {state(store, task_id)}\n{excerpt(log)}"
    )
    assert worker_id not in [w.worker_id for w in store.live_workers()]
    assert upkeep_holder(store) is None
    assert worker.process.returncode == 1, excerpt(log)
    assert "Traceback" not in log, excerpt(log)
    assert f"worker {worker_id} gave back 1 run(s) before exiting at once" in log, excerpt(log)
    if pool == "processes":
        assert first["pid"] != worker.process.pid
        assert gone(first["pid"]), f"its pool child {first['pid']} outlived the worker"

    # The run given back runs again on a new worker and ends done: no retry was spent.
    exits_by_itself(workers.start("--burst", "--pool", pool), timeout=60)
    task = get(store, task_id)
    assert (task.status, task.attempt, task.result) == (Status.DONE, 2, 2), state(store, task_id)


@pytest.fixture
def hang(db_url: str) -> Iterator[Forwarder]:
    with forwarding(db_url) as forwarder:
        yield forwarder


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])  # a server to stop answering
def test_a_second_sigint_exits_within_its_deadline_when_the_database_hangs(
    store: jobq.Store,  # noqa: F811
    db_url: str,
    hang: Forwarder,
    tmp_path: Path,
) -> None:
    hanging = Workers("tests.apps.hostile:app", hang.url(db_url), tmp_path)
    task_id = hostile.long_first.enqueue(seconds=600)
    worker = hanging.start("--concurrency", "2", "--grace", "60")
    try:
        alive_until(worker, lambda: run_of(task_id, 1) is not None)
        hang.hang()
        exit_at_once(worker.process, worker.log)
    finally:
        hanging.kill_all()
    log = worker.stderr()
    assert worker.process.returncode == 1, excerpt(log)
    assert "could not give back what it holds within 1 s" in log, excerpt(log)
    # Given back it was not: its lease runs on, and rescue takes it over once it expires.
    assert get(store, task_id).status is Status.IN_PROGRESS, state(store, task_id)
