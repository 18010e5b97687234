"""A PostgreSQL server of the benchmark's own, for measurements that need autovacuum.

The shared server on 5432 runs with ``autovacuum = off``, so nothing it shows about dead
rows or vacuums is what a production server would show. This starts a cluster with
tests/postgres_server.py (the machine's ``initdb`` in a temporary directory, run as the
``postgres`` user, on a free loopback port) and adds to that module's settings:

- ``fsync=on``: the module turns it off for its restart tests; the shared server, which
  the other benchmarks measure, has it on, and commits cost what they cost in production;
- ``shared_buffers`` (512MB unless told): the tables measured here are hundreds of MB;
- ``autovacuum=on`` (the default, said outright) and ``log_autovacuum_min_duration=0``,
  so that every automatic vacuum and analyze leaves a line in the server's log, which
  ``autovacuum_lines`` reads back before the directory goes.

Everything else is PostgreSQL's default (``autovacuum_naptime`` 1 min, scale factors 0.2
and 0.1, ``max_wal_size`` 1GB).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import psycopg
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # tests/ is a package of the checkout, not installed
    sys.path.insert(0, str(ROOT))

from tests import postgres_server  # noqa: E402

#: Added to tests/postgres_server.py's settings (a later -c wins over an earlier one).
SETTINGS = ("fsync=on", "autovacuum=on", "log_autovacuum_min_duration=0")
# "automatic vacuum of table "db.public.jobq_tasks": index scans: 1 ..." (PostgreSQL 15).
_AUTOVACUUM = re.compile(r'automatic (vacuum|analyze) of table "([^"]+)"')


class BenchPostgres(postgres_server.PostgresServer):
    """tests' private cluster with the settings above (``shared_buffers`` as given)."""

    def __init__(self, programs: Path, shared_buffers: str) -> None:
        super().__init__(programs)  # initdb
        self.settings = (*SETTINGS, f"shared_buffers={shared_buffers}")

    def _pg_ctl(self, action: str, *extra: str) -> None:
        # pg_ctl appends a second -o to the first: these come after the module's own.
        ours = " ".join(f"-c {s}" for s in self.settings)
        super()._pg_ctl(action, "-o", ours, *extra)

    def database_url(self, name: str) -> str:
        """The SQLAlchemy URL of database ``name`` on this server."""
        return sa.make_url(self.url).set(database=name).render_as_string(hide_password=False)

    def create_database(self, name: str) -> str:
        """Create the empty database ``name``; its URL."""
        self._admin(f"CREATE DATABASE {_identifier(name)}")
        return self.database_url(name)

    def drop_database(self, name: str) -> None:
        """Drop database ``name`` if it exists, ending any session still in it."""
        self._admin(f"DROP DATABASE IF EXISTS {_identifier(name)} WITH (FORCE)")

    def _admin(self, sql: str) -> None:
        # CREATE / DROP DATABASE refuse to run inside a transaction block.
        conninfo = f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(sql)  # type: ignore[arg-type]

    def version(self) -> str:
        """The server's version string, e.g. '15.20 (Debian 15.20-0+deb12u1)'."""
        conninfo = f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"
        with psycopg.connect(conninfo) as conn:
            row = conn.execute("SHOW server_version").fetchone()
        return str(row[0]) if row else "?"

    def autovacuum_lines(self, table: str = "jobq_tasks") -> list[tuple[str, str]]:
        """(database, 'vacuum' or 'analyze') for each automatic run on ``table`` logged so far."""
        if not self.log.exists():
            return []
        found = []
        for match in _AUTOVACUUM.finditer(self.log.read_text(errors="replace")):
            database, _, name = match.group(2).rpartition(".")
            if name == table:
                found.append((database.partition(".")[0], match.group(1)))
        return found


def _identifier(name: str) -> str:
    if not name.isidentifier():
        raise ValueError(f"not a plain database name: {name!r}")
    return name


@contextmanager
def private_postgres(shared_buffers: str = "512MB") -> Iterator[BenchPostgres]:
    """A started BenchPostgres, stopped and its directory deleted at the end, whatever
    happened in between."""
    programs = postgres_server.bindir()
    if programs is None:
        raise RuntimeError("no PostgreSQL server programs (pg_ctl, initdb) on this machine")
    server = BenchPostgres(programs, shared_buffers)
    try:
        server.start()
        yield server
    finally:
        try:
            server.stop()
        finally:
            shutil.rmtree(server.directory, ignore_errors=True)


def machine_load() -> str:
    """The 1, 5 and 15 minute load averages and the number of cores, for the report."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


def percentile(samples: Sequence[float], p: float) -> float:
    """The nearest-rank ``p``th percentile of ``samples`` (not empty)."""
    xs = sorted(samples)
    return xs[min(len(xs) - 1, max(0, round(p / 100 * len(xs)) - 1))]
