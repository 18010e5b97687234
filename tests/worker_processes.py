"""Real `jobq worker` processes for the acceptance tests, their stderr in files (a pipe
nobody reads could fill up and block a worker)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

import jobq
from tests.apps.run_log import RunLog

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Worker:
    process: subprocess.Popen[bytes]
    log: Path

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")


class Workers:
    """Starts `jobq worker --app APP` processes on ``db_url`` with ``options`` each."""

    def __init__(self, app: str, db_url: str, directory: Path, options: Sequence[str] = ()) -> None:
        self.app = app
        self.db_url = db_url
        self.directory = directory
        self.options = list(options)
        self.started: list[Worker] = []

    def start(self, *options: str, env: Mapping[str, str | None] | None = None) -> Worker:
        """A worker with ``options`` after the shared ones; ``env`` sets (None: unsets)."""
        environment = {**os.environ, "PYTHONPATH": str(ROOT), "JOBQ_DATABASE_URL": self.db_url}
        environment["PYTHONFAULTHANDLER"] = "1"  # SIGABRT dumps every thread's stack
        for name, value in (env or {}).items():
            if value is None:
                environment.pop(name, None)
            else:
                environment[name] = value
        log = self.directory / f"worker-{len(self.started)}.log"
        with log.open("wb") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-m", "jobq.cli", "worker", "--app", self.app,
                 "--poll-interval", "0.05", *self.options, *options],
                env=environment, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr,
            )  # fmt: skip
        started = Worker(process, log)
        self.started.append(started)
        return started

    def kill_all(self) -> None:
        """kill -9 whatever is still running (after a failure)."""
        for started in self.started:
            if started.process.poll() is None:
                started.process.kill()
                started.process.wait(timeout=30)


def app_store(
    app: jobq.App, log: RunLog | None, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[jobq.Store]:
    """For a fixture: a Store on ``db_url`` that ``app`` (a test app run by worker
    processes) uses too, $JOBQ_DATABASE_URL pointing there, and ``log``'s table empty."""
    monkeypatch.setenv("JOBQ_DATABASE_URL", db_url)
    store = jobq.Store(db_url)
    monkeypatch.setattr(app, "_store", store)
    if log is not None:
        log.empty()
    yield store
    store.dispose()
    if log is not None:
        log.dispose()
