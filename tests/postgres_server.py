"""A private PostgreSQL server for the tests that restart it under running workers (chaos,
waiters across restarts).

It is a real cluster made by the machine's own `initdb` in a temporary directory,
listening on a free loopback port, so restarting it disturbs no other test or user of
the shared server. As root, the server runs as the `postgres` user (PostgreSQL refuses
to run as root).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import psycopg
import pytest

from tests.tigerbeetle_server import free_port

# fsync only matters when the machine itself crashes; restarts here are clean ones.
SETTINGS = ("fsync=off", "max_connections=300", "listen_addresses=127.0.0.1")


def bindir() -> Path | None:
    """Where the machine's PostgreSQL server programs are, if it has them."""
    if found := shutil.which("pg_ctl"):
        return Path(found).parent
    try:
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True)
    except OSError:
        return None
    path = Path(out.stdout.strip())
    return path if (path / "pg_ctl").exists() and (path / "initdb").exists() else None


class PostgresServer:
    """A started cluster: ``url`` to connect; ``restart()`` and ``stop()``."""

    def __init__(self, programs: Path) -> None:
        self.programs = programs
        self.directory = Path(tempfile.mkdtemp(prefix="jobq-pg-"))
        self.data = self.directory / "data"
        self.log = self.directory / "server.log"
        self.port = free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"
        self._owner: str | None = None
        if os.geteuid() == 0:
            self._owner = "postgres"
            entry = pwd.getpwnam(self._owner)
            os.chown(self.directory, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")

    def _run(self, program: str, *arguments: str) -> None:
        command = [str(self.programs / program), *arguments]
        if self._owner is not None:
            command = ["runuser", "-u", self._owner, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{program} failed: {done.stdout}{done.stderr}")

    def _pg_ctl(self, action: str, *extra: str) -> None:
        options = f"-p {self.port} -k {self.directory} " + " ".join(f"-c {s}" for s in SETTINGS)
        self._run("pg_ctl", action, "-D", str(self.data), "-l", str(self.log), "-w",
                  "-t", "60", "-o", options, *extra)  # fmt: skip

    def start(self) -> None:
        self._pg_ctl("start")
        self.wait_until_ready()

    def restart(self) -> None:
        """Stop the server (disconnecting every client) and start it again."""
        self._pg_ctl("restart", "-m", "fast")
        self.wait_until_ready()

    def stop(self) -> None:
        self._run("pg_ctl", "stop", "-D", str(self.data), "-m", "immediate", "-w")

    def wait_until_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                conninfo = f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"
                psycopg.connect(conninfo, connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


Server = TypeVar("Server", bound="PostgresServer")


@contextmanager
def running(
    programs: Path,
    make: Callable[[Path], Server] = PostgresServer,  # type: ignore[assignment]
) -> Iterator[Server]:
    """A server made by ``make(programs)`` and started; stopped and its directory deleted
    at the end, whatever happened in between (benchmarks/_servers.py makes its own kinds)."""
    server = make(programs)
    try:
        server.start()
        yield server
    finally:
        try:
            server.stop()
        finally:
            shutil.rmtree(server.directory, ignore_errors=True)


@pytest.fixture(scope="module")
def private_server() -> Iterator[PostgresServer]:
    """A private PostgreSQL server for a test module, stopped after it; CI requires one as
    it requires the shared server."""
    from tests.conftest import missing

    programs = bindir()
    if programs is None:
        missing("postgresql")
    assert programs is not None
    with running(programs) as server:
        yield server
