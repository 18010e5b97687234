"""`jobq dashboard`: it refuses to serve other hosts without a token, and serves pages
over real HTTP from a process of its own."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from jobq.cli.dashboard import dashboard, is_loopback
from tests.acceptance import test_cli_secrets as secrets

TOKEN = "cli-token-123"


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "::", "example.com"])
def test_another_host_needs_a_token(host: str, sqlite_url: str) -> None:
    runner = CliRunner()
    result = runner.invoke(
        dashboard, ["--host", host, "--database-url", sqlite_url], env={"JOBQ_DASHBOARD_TOKEN": ""}
    )
    assert result.exit_code == 2
    assert "not a loopback address" in result.output and "--token" in result.output


def test_loopback_hosts() -> None:
    assert all(is_loopback(h) for h in ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
    assert not any(is_loopback(h) for h in ["0.0.0.0", "::", "10.0.0.1", "example.com", ""])


def test_a_database_that_does_not_exist_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(dashboard, ["--database-url", f"sqlite:///{tmp_path / 'no.db'}"])
    assert result.exit_code == 1 and "does not exist" in result.output


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serving(*args: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """A `jobq dashboard` process with ``args``; its base URL, once it answers."""
    port = free_port()
    command = [sys.executable, "-c", "from jobq.cli.dashboard import dashboard; dashboard()"]
    environment = {**os.environ, "JOBQ_DASHBOARD_TOKEN": "", **(env or {})}
    process = subprocess.Popen(
        [*command, "--port", str(port), *args], env=environment, stderr=subprocess.PIPE
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(f"{base}/static/app.css", timeout=1)
                break
            except httpx.TransportError:
                assert process.poll() is None, process.stderr.read()  # type: ignore[union-attr]
                assert time.monotonic() < deadline, "the dashboard did not start"
                time.sleep(0.1)
        yield base
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=20)
        assert process.stderr is not None
        process.stderr.close()


def test_it_serves_with_a_token(sqlite_url: str) -> None:
    with serving("--database-url", sqlite_url, env={"JOBQ_DASHBOARD_TOKEN": TOKEN}) as base:
        assert httpx.get(f"{base}/tasks").status_code == 401
        page = httpx.get(f"{base}/tasks", headers={"authorization": f"Bearer {TOKEN}"})
        assert page.status_code == 200 and "hello.task" in page.text


def test_without_a_token_it_answers_loopback_names_only(sqlite_url: str) -> None:
    with serving("--database-url", sqlite_url, "--read-only") as base:
        page = httpx.get(f"{base}/tasks")
        assert page.status_code == 200 and "hello.task" in page.text
        assert 'method="post"' not in page.text
        # A site whose name was pointed at 127.0.0.1 (DNS rebinding) gets nothing.
        assert httpx.get(f"{base}/tasks", headers={"host": "evil.example"}).status_code == 400


def test_without_the_web_extra_it_says_which_to_install(sqlite_url: str) -> None:
    # A None in sys.modules makes an import fail as if the package were not installed.
    script = (
        "import sys; sys.modules['starlette'] = None\n"
        "from jobq.cli.dashboard import dashboard; dashboard()"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, "--database-url", sqlite_url],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    assert "pip install 'jobq[web]'" in done.stderr


def test_check_looks_at_the_database_and_serves_nothing(sqlite_url: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(dashboard, ["--check", "--database-url", sqlite_url])
    assert result.exit_code == 0 and "the database is ready" in result.output
    empty = tmp_path / "empty.db"
    empty.touch()
    result = CliRunner().invoke(dashboard, ["--check", "--database-url", f"sqlite:///{empty}"])
    assert result.exit_code == 1 and "jobq migrate" in result.output


@pytest.mark.parametrize("url", secrets.UNREACHABLE)
def test_no_secret_of_the_database_url_shows(url: str) -> None:
    """As tests/acceptance/test_cli_secrets.py checks every command: `jobq dashboard
    --check` is how that test runs this one without serving."""
    result = CliRunner().invoke(dashboard, ["--check", "--database-url", url])
    assert result.exit_code in (0, 1), result.output
    secrets.assert_nothing_shows(result.stdout, result.stderr)


def test_no_secret_of_a_reachable_database_shows(db_url: str) -> None:
    for url in secrets.with_secrets(db_url):
        result = CliRunner().invoke(dashboard, ["--check", "--database-url", url])
        assert result.exit_code in (0, 1), result.output
        secrets.assert_nothing_shows(result.stdout, result.stderr)
