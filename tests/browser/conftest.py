"""A real `jobq dashboard` process, and a headless Chromium driven by Playwright.

The browser is the machine's own Chromium (Debian's ``chromium`` package; another one
through $JOBQ_TEST_CHROMIUM), not one `playwright install` downloads. Without Chromium or
the playwright package the tests are skipped, unless $JOBQ_TEST_BROWSER is ``required``
(CI sets it): then they fail.

Screenshots of every page go to $JOBQ_SCREENSHOTS when set, else to the test's tmp_path:
never into the work tree.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import jobq
from jobq import Status
from tests.helpers import set_columns

ROOT = Path(__file__).resolve().parents[2]
#: Milliseconds Playwright waits for a condition: generous, for a busy 2-core machine.
TIMEOUT_MS = 30_000
#: Seconds a dashboard process gets to answer its first request.
STARTUP_SECONDS = 60.0

TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/srv/app/reports.py", line 41, in build_monthly\n'
    "    rows = fetch_rows(account, month)\n"
    '  File "/srv/app/reports.py", line 12, in fetch_rows\n'
    "    raise ValueError(f'no data for account {account} in {month}')\n"
    "ValueError: no data for account 4711 in 2026-10"
)


def unavailable(reason: str) -> None:
    """Skip for want of a browser, or fail when $JOBQ_TEST_BROWSER requires one."""
    if os.environ.get("JOBQ_TEST_BROWSER", "").strip().lower() == "required":
        pytest.fail(f"{reason} (required by JOBQ_TEST_BROWSER)")
    pytest.skip(reason)


def chromium_path() -> str | None:
    """The Chromium executable to drive: $JOBQ_TEST_CHROMIUM, else the one on PATH."""
    given = os.environ.get("JOBQ_TEST_CHROMIUM")
    if given:
        return given if os.access(given, os.X_OK) else None
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


# Per module, not per session: Playwright's sync API keeps an asyncio loop running in the
# main thread until it stops, and every later test's asyncio.run() would refuse to start.
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for the module's tests."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the playwright package is not installed (pip install playwright)")
    executable = chromium_path()
    if executable is None:
        unavailable("no Chromium: apt-get install chromium, or set JOBQ_TEST_CHROMIUM")
    # As root, Chromium refuses to start with its sandbox (CI containers run as root).
    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, headless=True, args=args)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh page (its own cookies), 1400 px wide, waiting up to TIMEOUT_MS."""
    from playwright.sync_api import expect

    expect.set_options(timeout=TIMEOUT_MS)
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    yield opened
    context.close()
    assert not errors, f"script errors on the page: {errors}"


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    """Where screenshots go: $JOBQ_SCREENSHOTS, else the test's tmp_path."""
    directory = Path(os.environ.get("JOBQ_SCREENSHOTS") or tmp_path / "screenshots")
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Dashboard:
    """A running `jobq dashboard` process and its address."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=20)


def answers(url: str) -> bool:
    """Whether an HTTP server answers at ``url`` (any status)."""
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


def start_dashboard(db_url: str, directory: Path, options: Sequence[str] = ()) -> Dashboard:
    """`jobq dashboard` on a free port of 127.0.0.1, once it answers."""
    port = free_port()
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONFAULTHANDLER": "1"}
    environment.pop("JOBQ_DASHBOARD_TOKEN", None)
    log = directory / f"dashboard-{port}.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "jobq.cli", "dashboard", "--port", str(port),
             "--database-url", db_url, *options],
            env=environment, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr,
        )  # fmt: skip
    started = Dashboard(f"http://127.0.0.1:{port}", process, log)
    deadline = time.monotonic() + STARTUP_SECONDS
    while not answers(started.url + "/static/app.css"):
        if process.poll() is not None:
            pytest.fail(f"jobq dashboard exited {process.returncode}:\n{started.stderr()}")
        if time.monotonic() > deadline:
            started.stop()
            pytest.fail(
                f"jobq dashboard did not answer in {STARTUP_SECONDS:g} s:\n{started.stderr()}"
            )
        time.sleep(0.1)  # polling a condition, with a deadline
    return started


@pytest.fixture
def dashboards(db_url: str, tmp_path: Path) -> Iterator[Callable[..., Dashboard]]:
    """Starts dashboards of ``db_url`` with the options given; stops them after the test."""
    running: list[Dashboard] = []

    def start(*options: str) -> Dashboard:
        started = start_dashboard(db_url, tmp_path, options)
        running.append(started)
        return started

    yield start
    for started in running:
        started.stop()


@pytest.fixture
def dashboard(dashboards: Callable[..., Dashboard]) -> Dashboard:
    """A dashboard of the test's database, without a token."""
    return dashboards()


def captured(
    store: jobq.Store, name: str, queue: str, worker: str, **options: Any
) -> tuple[int, int]:
    """A task of ``queue`` captured by ``worker``: (id, attempt). Enqueued on a queue of
    its own first, so that this capture takes it and no other."""
    staging = f"{queue}-staging"
    task_id = store.enqueue(name, {"account": 4711, "month": "2026-10"}, queue=staging, **options)
    [run] = store.capture(1, queues=staging, worker_id=worker)
    assert run.id == task_id
    set_columns(store, task_id, queue_id=queue)
    return task_id, run.attempt


def failed_task(store: jobq.Store, queue: str = "reports", worker: str = "worker-a") -> int:
    """A task that failed for good, with a traceback: its id."""
    task_id, attempt = captured(store, "reports.build_monthly", queue, worker, retries=0)
    assert store.set_status(task_id, attempt, Status.FAILED, error=TRACEBACK)
    return task_id


def done_task(store: jobq.Store, queue: str, name: str, worker: str = "worker-a") -> int:
    """A task that ran and succeeded: its id."""
    task_id, attempt = captured(store, name, queue, worker)
    assert store.set_status(task_id, attempt, Status.DONE, result={"ok": True})
    return task_id
