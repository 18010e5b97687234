"""A private PgBouncer in transaction pooling mode, in front of the test PostgreSQL server.

Debian's `pgbouncer` (1.18: it keeps no prepared statements in transaction mode), run
by the tests on a free loopback port with a configuration of its own in a temporary
directory, in front of a database of its own on the server of JOBQ_TEST_POSTGRES_URL
(PgBouncer passes no search_path, so the schema-per-session trick of conftest.py does not
carry through it). As root, it runs as the `postgres` user: PgBouncer refuses root.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import sqlalchemy as sa

from tests.tigerbeetle_server import free_port


class Bouncer:
    """A started PgBouncer: ``pooled_url`` goes through it, ``direct_url`` does not."""

    def __init__(self, server: sa.URL, database: str, pool_size: int) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="jobq-pgbouncer-"))
        self.port = free_port()
        self.database = database
        user = server.username or "postgres"
        host, port = server.host or "127.0.0.1", server.port or 5432
        base = f"postgresql+psycopg://{user}@"
        self.direct_url = f"{base}{host}:{port}/{database}"
        self.pooled_url = f"{base}127.0.0.1:{self.port}/{database}?jobq_pooler=transaction"
        #: The pooled URL without jobq's parameter: what a client unaware of the pooler has.
        self.plain_url = f"{base}127.0.0.1:{self.port}/{database}"
        self.log = self.directory / "pgbouncer.log"
        (self.directory / "userlist.txt").write_text(f'"{user}" ""\n')
        (self.directory / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"{database} = host={host} port={port} dbname={database}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.directory / 'userlist.txt'}\n"
            f"admin_users = {user}\n"
            f"pool_mode = transaction\ndefault_pool_size = {pool_size}\nmin_pool_size = 0\n"
            "max_client_conn = 2000\nreserve_pool_size = 0\n"
            f"pidfile = {self.directory / 'pgbouncer.pid'}\n"
            "server_reset_query =\nignore_startup_parameters = extra_float_digits\n"
        )
        self._owner = None
        if os.geteuid() == 0:
            self._owner = "postgres"
            entry = pwd.getpwnam(self._owner)
            for path in [self.directory, *self.directory.iterdir()]:
                os.chown(path, entry.pw_uid, entry.pw_gid)
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = ["pgbouncer", str(self.directory / "pgbouncer.ini")]
        if self._owner is not None:
            command = ["pgbouncer", "-u", self._owner, str(self.directory / "pgbouncer.ini")]
        # PgBouncer logs to stderr: to a file, never to a pipe that nobody reads (once its
        # 64 KB filled, PgBouncer blocked on it, and so did every client behind it).
        with self.log.open("wb") as stderr:
            self._process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
        deadline = time.monotonic() + 30
        while True:
            try:
                psycopg.connect(self._conninfo(), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"pgbouncer did not start: {self.log_text()}") from None
                time.sleep(0.05)

    def _conninfo(self, database: str | None = None) -> str:
        user = sa.make_url(self.direct_url).username
        return f"host=127.0.0.1 port={self.port} user={user} dbname={database or self.database}"

    def connect(self) -> psycopg.Connection:
        """A plain psycopg client of the pooled database (not in autocommit)."""
        return psycopg.connect(self._conninfo(), connect_timeout=10)

    def server_connections(self) -> int:
        """Server connections PgBouncer holds now (SHOW POOLS: active, idle, used, ...)."""
        with psycopg.connect(self._conninfo("pgbouncer"), autocommit=True) as admin:
            rows = admin.execute("SHOW SERVERS").fetchall()
        return sum(1 for row in rows if row[2] == self.database)  # type, user, database, ...

    def log_text(self) -> str:
        """What PgBouncer has logged."""
        return self.log.read_text(errors="replace") if self.log.exists() else "(no log)"

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGINT)  # SIGINT: at once, dropping clients
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


@contextmanager
def own_database(server_url: str) -> Iterator[str]:
    """The name of a new database on ``server_url``'s server, dropped at the end (with
    whatever sessions are still in it): what it holds, and its statistics, are its own."""
    server = sa.make_url(server_url)
    database = f"jobq_own_{uuid.uuid4().hex[:8]}"
    admin = f"host={server.host} port={server.port or 5432} user={server.username} dbname="
    with psycopg.connect(admin + (server.database or "postgres"), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    try:
        yield database
    finally:
        with psycopg.connect(admin + (server.database or "postgres"), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


@contextmanager
def running(server_url: str, pool_size: int = 10) -> Iterator[Bouncer]:
    """A PgBouncer in front of a new database on ``server_url``'s server, both removed
    at the end."""
    with own_database(server_url) as database:
        bouncer = Bouncer(sa.make_url(server_url), database, pool_size)
        try:
            bouncer.start()
            yield bouncer
        finally:
            bouncer.stop()
