"""Waiting for results of tasks that real `jobq worker` processes run, on every database:
in the enqueuing process, in another process, and with `jobq result`.

The worker runs tests/apps/lifecycle_app.py, whose tasks end done, failed, timed out, and
done with a large, awkward JSON value.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import jobq
from jobq import Status
from tests.acceptance.test_cli import Cli, failure
from tests.acceptance.test_worker_processes import wait_until
from tests.apps import lifecycle_app
from tests.apps.lifecycle_app import SLOW_TIMEOUT, add, boom, odd, odd_value, slow
from tests.integration.test_handles import meanwhile
from tests.worker_processes import ROOT, Workers

pytestmark = pytest.mark.slow

APP = "tests.apps.lifecycle_app:app"
#: Seconds any one wait may take: far more than a task of the app needs.
WAIT = 60
#: Characters of odd's long string and numbers of its list: a result of ~0.5 MB.
ODD_SIZE = 50_000

#: A process of its own that waits for tasks by id (argv) and prints each result as a
#: JSON line; its first line says it is about to wait.
WAITER = f"""
import json, sys
from tests.apps.lifecycle_app import app
handles = [app.handle(int(arg)) for arg in sys.argv[1:]]
print("waiting", flush=True)
for handle in handles:
    print(json.dumps(handle.result(timeout={WAIT})), flush=True)
"""


@pytest.fixture
def app(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[jobq.App]:
    monkeypatch.setenv("JOBQ_DATABASE_URL", db_url)
    lifecycle_app.app.store = jobq.Store(db_url)
    yield lifecycle_app.app
    lifecycle_app.app.store.dispose()
    lifecycle_app.app._store = None


@pytest.fixture
def workers(db_url: str, tmp_path: Path) -> Iterator[Workers]:
    started = Workers(APP, db_url, tmp_path)
    yield started
    started.kill_all()


def test_results_of_every_kind_of_end(app: jobq.App, workers: Workers) -> None:
    worker = workers.start()
    done = add.enqueue(a=2, b=3)
    failed = boom.enqueue(message="it broke")
    timed_out = slow.enqueue(seconds=SLOW_TIMEOUT + 0.4)
    large = odd.enqueue(size=ODD_SIZE)
    awaited = add.enqueue(a=20, b=22)

    assert done.result(timeout=WAIT) == 5
    with pytest.raises(jobq.TaskFailed) as failure_of_boom:
        failed.result(timeout=WAIT)
    error = failure_of_boom.value.error
    assert error is not None and error.startswith("Traceback (most recent call last):")
    assert "in boom\n    raise ValueError(message)\nValueError: it broke" in error
    assert str(failure_of_boom.value) == f"Task {failed.id} failed: ValueError: it broke"
    with pytest.raises(jobq.TaskFailed, match=f"Task {timed_out.id} failed: timed out after"):
        timed_out.result(timeout=WAIT)
    assert large.result(timeout=WAIT) == odd_value(ODD_SIZE)
    assert asyncio.run(awaited.wait(timeout=WAIT)) == 42
    # A waiting task, cancelled while its handle waits.
    later = add.enqueue(a=1, b=1, _delay=3600)
    with (
        meanwhile(lambda: assert_cancelled(later), app.store),
        pytest.raises(jobq.TaskCancelled, match=f"Task {later.id} was cancelled"),
    ):
        later.result(timeout=WAIT)
    assert worker.process.poll() is None, worker.stderr()


def assert_cancelled(handle: jobq.TaskHandle) -> None:
    assert handle.cancel()


def test_another_process_waits_for_results_by_id(
    app: jobq.App, workers: Workers, backend: str, db_url: str
) -> None:
    handles = [add.enqueue(a=40, b=2), odd.enqueue(size=ODD_SIZE)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JOBQ_DATABASE_URL": db_url}
    waiter = subprocess.Popen(
        [sys.executable, "-c", WAITER, *(str(h) for h in handles)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert waiter.stdout is not None and waiter.stdout.readline() == "waiting\n"
        if backend == "postgresql":  # it waits for the first one's notification: it says so
            wait_until(lambda: handles[0].refresh().awaited)  # type: ignore[union-attr]
        assert all(h.status is Status.QUEUED for h in handles)
        workers.start()  # only now do the tasks run
        out, err = waiter.communicate(timeout=WAIT + 30)
    finally:
        waiter.kill()
        waiter.wait()
    assert waiter.returncode == 0, err
    assert [json.loads(line) for line in out.splitlines()] == [42, odd_value(ODD_SIZE)]


def test_jobq_result_prints_the_result_or_says_why_not(
    app: jobq.App, workers: Workers, db_url: str, tmp_path: Path
) -> None:
    workers.start()
    done = add.enqueue(a=2, b=3)
    failed = boom.enqueue(message="it broke")
    large = odd.enqueue(size=ODD_SIZE)
    later = add.enqueue(a=1, b=1, _delay=3600)
    cancelled = add.enqueue(a=1, b=1, _delay=3600)
    assert cancelled.cancel()
    wait = ["--timeout", str(WAIT)]
    cli = Cli(tmp_path)
    outcomes = cli.many(
        db_url,
        [
            ["result", str(done), *wait],
            ["result", str(large)],  # no --timeout: until it ends
            ["result", str(failed), *wait],
            ["result", str(cancelled), *wait],
            ["result", "999999", *wait],
            ["result", str(later), "--timeout", "0"],
            ["result", str(later), "--timeout", "0.3"],
        ],
    )
    done_out, large_out, failed_out, cancelled_out, unknown, now, soon = outcomes
    assert (done_out.returncode, done_out.stdout, done_out.stderr) == (0, "5\n", "")
    assert large_out.returncode == 0, large_out.stderr
    assert json.loads(large_out.stdout) == odd_value(ODD_SIZE)
    # A failure: the stored error, traceback and all, then the one-line summary.
    assert failed_out.returncode == 1 and failed_out.stdout == ""
    lines = failed_out.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[-2:] == [
        "ValueError: it broke",
        f"error: Task {failed.id} failed: ValueError: it broke",
    ]
    assert failure(cancelled_out) == (
        f"error: Task {cancelled.id} was cancelled: cancelled on request"
    )
    assert failure(unknown) == "error: no task 999999"
    for timed_out, seconds in [(now, "0"), (soon, "0.3")]:
        assert failure(timed_out) == (
            f"error: Task {later.id} did not finish within {seconds} s (it is queued now)."
        )
