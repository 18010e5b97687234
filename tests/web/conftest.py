"""The dashboard's route tests: a Store holding a task in every state, and clients of it.

Every test runs on a real database (the ``store`` fixture of tests/conftest.py, once per
backend) through Starlette's TestClient: requests go through the whole ASGI app.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import jobq
from jobq import Cron, Mutex, Schedule, Status
from tests.helpers import set_columns

with warnings.catch_warnings():
    # Starlette asks for httpx2; httpx (the dev extra) works the same for these tests.
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from jobq.web import create_app

TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "app/reports.py", line 12, in build\n'
    "    raise ValueError('no data for 2026-11-24')\n"
    "ValueError: no data for 2026-11-24"
)
WORKER = "worker-1@host-a"
CSRF = re.compile(r'<meta name="jobq-csrf" content="([^"]+)">')


@dataclass(frozen=True)
class Rows:
    """The ids of the tasks made by the ``rows`` fixture, one per state."""

    queued: int
    running: int
    done: int
    failed: int
    cancelled: int
    retrying: int


@pytest.fixture
def rows(store: jobq.Store) -> Rows:
    """A task in each state, a cron schedule, a held mutex and a live worker running one."""
    queued = store.enqueue("emails.send", {"to": "ada@example.com"}, queue="mail")
    store.register_worker(WORKER, host="host-a", pid=4242, queues=["reports"], concurrency=4)
    running, _ = _run(store, "reports.build", "reports", WORKER, lock_key="report:daily")
    set_columns(store, running, progress={"current": 3, "total": 10, "message": "page 3 of 10"})
    done, attempt = _run(store, "emails.send", "mail")
    assert store.set_status(done, attempt, Status.DONE, result={"sent": True})
    failed, attempt = _run(store, "reports.build", "reports", retries=0)
    assert store.set_status(failed, attempt, Status.FAILED, error=TRACEBACK)
    retrying, attempt = _run(store, "emails.send", "mail", retries=3)
    assert store.set_status(retrying, attempt, Status.FAILED, error="boom", retry_delay=3600)
    cancelled = store.enqueue("emails.send", {"to": "eve@example.com"}, queue="mail")
    assert store.cancel(cancelled)
    store.sync_schedules([Schedule("nightly-cleanup", Cron("0 3 * * *"), "cleanup", "maintenance")])
    assert Mutex(store, "deploy").acquire()
    return Rows(queued, running, done, failed, cancelled, retrying)


def _run(
    store: jobq.Store, name: str, queue: str, worker: str = "worker-2", **options: object
) -> tuple[int, int]:
    """A task of ``queue`` captured by ``worker``: (id, attempt). It is enqueued on a queue
    of its own, so that this capture takes it and no other."""
    staging = f"{queue}-{name}-staging"
    task_id = store.enqueue(name, {"n": 1}, queue=staging, **options)  # type: ignore[arg-type]
    [run] = store.capture(1, queues=staging, worker_id=worker)
    assert run.id == task_id
    set_columns(store, task_id, queue_id=queue)
    return task_id, run.attempt


def client_of(store: jobq.Store, **options: object) -> Iterator[TestClient]:
    """A client of a dashboard of ``store``; its background counting stopped after."""
    app = create_app(store, **options)  # type: ignore[arg-type]
    with TestClient(app, headers={"accept": "text/html"}) as client:
        yield client
    app.state.counts.stop()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A migrated SQLite file holding one task, for `jobq dashboard` processes."""
    url = f"sqlite:///{tmp_path / 'jobq.db'}"
    store = jobq.Store(url)
    store.migrate()
    store.enqueue("hello.task", {"who": "world"}, queue="greetings")
    store.dispose()
    return url


@pytest.fixture
def client(store: jobq.Store) -> Iterator[TestClient]:
    """A client of a dashboard with no token (as on a loopback address)."""
    yield from client_of(store)


def csrf_of(client: TestClient, path: str = "/tasks") -> str:
    """The session's CSRF token, as the page at ``path`` carries it (in its head)."""
    page = client.get(path)
    assert page.status_code == 200, page.text
    found = CSRF.search(page.text)
    assert found, "no CSRF token on the page"
    return found.group(1)
