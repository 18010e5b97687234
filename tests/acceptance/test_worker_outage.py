"""A `jobq worker` that loses its database and gets it back says so once each way.

The worker reaches the server through a TCP forwarder (tests/forwarder.py): cutting it
resets every connection through it and refuses new ones, as a failed network does, while
the real server stays up for the other tests. The worker's log must hold one WARNING when
the outage starts and one INFO when it ends, whatever part of the worker noticed (the
capture loop, recording an outcome, the LISTEN thread), and nothing else about it: no
"will retry" line per poll, no traceback, no line that is not a log record of its own.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

import jobq
from jobq import Status
from tests.acceptance.test_worker_processes import wait_until
from tests.forwarder import Forwarder, forwarding
from tests.worker_processes import Worker, Workers

pytestmark = [pytest.mark.slow, pytest.mark.parametrize("backend", ["postgresql", "mysql"])]

#: How every record of the text log format begins (jobq.worker.logs.TEXT_FORMAT).
RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR) \S+: ")
#: Connections the worker must have tried (and been refused) during each outage: enough
#: polls for a line per failed call to show, far more than the outage's one line.
REFUSALS_PER_OUTAGE = 30


@pytest.fixture
def store(db_url: str) -> Iterator[jobq.Store]:
    store = jobq.Store(db_url)
    yield store
    store.dispose()


@pytest.fixture
def forwarder(db_url: str) -> Iterator[Forwarder]:
    with forwarding(db_url) as forwarder:
        yield forwarder


@pytest.fixture
def workers(db_url: str, forwarder: Forwarder, tmp_path: Path) -> Iterator[Workers]:
    """Workers of the mixed test app, reaching the database through ``forwarder``."""
    started = Workers("tests.apps.mixed:app", forwarder.url(db_url), tmp_path)
    yield started
    started.kill_all()


def done(store: jobq.Store, task_id: int) -> bool:
    task = store.get(task_id)
    return task is not None and task.status is Status.DONE


def alive_until(worker: Worker, condition: object, timeout: float = 60) -> None:
    """Wait for ``condition()``; fail at once, with its log, if ``worker`` exits meanwhile."""
    assert callable(condition)
    try:
        wait_until(lambda: condition() or worker.process.poll() is not None, timeout=timeout)
    except AssertionError:
        raise AssertionError(f"timed out; the worker's log:\n{worker.stderr()}") from None
    assert worker.process.poll() is None, f"the worker exited:\n{worker.stderr()}"


def outage(store: jobq.Store, worker: Worker, forwarder: Forwarder, number: int) -> None:
    """Cut the way to the database while a run is under way (its outcome must wait to be
    recorded), until the worker has been refused many times; then restore it and wait
    until the worker runs tasks again and has said so."""
    running = store.enqueue("sleep", {"seconds": 0.5})
    alive_until(worker, lambda: store.get(running).status is Status.IN_PROGRESS)  # type: ignore[union-attr]
    forwarder.cut()
    refused = forwarder.refused
    alive_until(worker, lambda: forwarder.refused >= refused + REFUSALS_PER_OUTAGE)
    alive_until(worker, lambda: worker.stderr().count("database unreachable") == number)
    forwarder.restore()
    alive_until(worker, lambda: done(store, running))
    after = store.enqueue("double", {"n": 2})
    alive_until(worker, lambda: done(store, after))
    alive_until(worker, lambda: worker.stderr().count("reachable again after") == number)


def test_an_outage_is_one_warning_when_it_starts_and_one_line_when_it_ends(
    store: jobq.Store, workers: Workers, forwarder: Forwarder
) -> None:
    worker = workers.start("--concurrency", "2")
    first = store.enqueue("double", {"n": 1})
    alive_until(worker, lambda: done(store, first))
    outage(store, worker, forwarder, 1)
    outage(store, worker, forwarder, 2)
    worker.process.send_signal(signal.SIGTERM)
    worker.process.wait(timeout=30)
    log = worker.stderr()
    assert worker.process.returncode == 0, log

    lines = log.splitlines()
    assert [line for line in lines if not RECORD.match(line)] == [], log  # no tracebacks
    unreachable = [line for line in lines if "database unreachable" in line]
    reachable = [line for line in lines if "reachable again after" in line]
    assert len(unreachable) == 2 and all(" WARNING " in line for line in unreachable), log
    assert len(reachable) == 2 and all(" INFO " in line for line in reachable), log
    assert re.search(r"database reachable again after \d+\.\d s$", reachable[0]), log
    noisy = ("will retry", "LISTEN connection lost", "failed", "Traceback")
    others = [line for line in lines if line not in unreachable]
    assert [line for line in others if any(word in line for word in noisy)] == [], log
