"""A real TigerBeetle server for the tests: one replica, development mode, a fresh data file.

The binary comes from $JOBQ_TEST_TIGERBEETLE_BIN, else `tigerbeetle` on PATH; without
either, tests that need it skip and say so (jobq ships only the client; no registry
ships the server).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def binary() -> str | None:
    """The tigerbeetle binary to run, if any."""
    return os.environ.get("JOBQ_TEST_TIGERBEETLE_BIN") or shutil.which("tigerbeetle")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """A started replica: ``address`` for --tigerbeetle-addresses; stop() and start() again."""

    def __init__(self, executable: str, directory: Path) -> None:
        self.executable = executable
        self.data = directory / "0_0.tigerbeetle"
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.log = directory / "tigerbeetle.log"
        subprocess.run(
            [executable, "format", "--cluster=0", "--replica=0", "--replica-count=1",
             "--development", str(self.data)],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [self.executable, "start", "--development", f"--addresses={self.address}",
                 str(self.data)],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"tigerbeetle exited: {self.log.read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"tigerbeetle did not listen on {self.address} within 30 s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None


@contextmanager
def running(executable: str, directory: Path) -> Iterator[Server]:
    server = Server(executable, directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()
