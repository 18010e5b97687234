"""The Django project's database for each test (pytest-django's test database, committed for
real: worker processes read it) and real worker processes on it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from django.db import connection

PROJECT = Path(__file__).parent / "project"


@pytest.fixture(autouse=True)
def _database(transactional_db: None) -> None:
    """Every test commits what it writes, as an application does (no wrapping transaction)."""


def project_env() -> dict[str, str]:
    """The environment of a process of the test project on this test database."""
    env = dict(os.environ)
    env["JOBQ_DJANGO_NAME"] = str(connection.settings_dict["NAME"])
    env["DJANGO_SETTINGS_MODULE"] = "djproject.settings"
    env["PYTHONPATH"] = os.pathsep.join([str(PROJECT), env.get("PYTHONPATH", "")])
    return env


def manage(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    """Run ``manage.py args`` of the test project in a process of its own, to its end."""
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=PROJECT, env=project_env(),
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


@pytest.fixture
def run_worker() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run ``manage.py jobq_worker --burst`` (a real worker process) until nothing is left
    to run now; fails the test if it does not exit 0."""

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        done = manage("jobq_worker", "--burst", "--burst-wait", "0", *args)
        assert done.returncode == 0, done.stderr
        return done

    return run


@pytest.fixture(scope="session", autouse=True)
def _jobq_connections_closed(django_db_setup: None, django_db_blocker: object) -> object:
    """jobq's pooled connections closed before the test database is dropped."""
    yield
    from jobq.contrib.django.settings import app_for

    app_for({}).store.dispose()
