"""PostgreSQL (and PgBouncer) servers of a benchmark's own, started from tests/postgres_server.py
(the machine's ``initdb`` in a temporary directory, run as the ``postgres`` user, on a free
loopback port) with settings added to that module's (a later -c wins over an earlier one).

Every one has ``fsync=on``: the module turns it off for its restart tests; the shared
server on 5432, which the other benchmarks measure, has it on, and commits cost what they
cost in production.

- ``private_postgres`` (retention_10m.py, table_settings.py): the shared server runs with
  ``autovacuum = off``, so nothing it shows about dead rows or vacuums is what a
  production server would show. This one adds ``shared_buffers`` (512MB unless told: the
  tables measured are hundreds of MB), ``autovacuum=on`` (the default, said outright) and
  ``log_autovacuum_min_duration=0``, so that every automatic vacuum and analyze leaves a
  line in the server's log, which ``autovacuum_lines`` reads back before the directory
  goes. Everything else is PostgreSQL's default (``autovacuum_naptime`` 1 min, scale
  factors 0.2 and 0.1, ``max_wal_size`` 1GB).
- ``hosted_postgres`` and ``hosted_bouncer`` (scale_out.py): the shared server listens on
  127.0.0.1 only, and restarting it would disturb its other users. This one also listens
  on the host ends of the namespaces' veths, with ``max_connections=300`` and a
  ``pg_hba.conf`` line that trusts 127.0.0.0/8 (initdb's trusts 127.0.0.1 only).
  PgBouncer is tests/pgbouncer_server.py's (Debian's 1.18, transaction pooling) with
  ``listen_addr`` likewise.

Server CPU is read from /proc: the postmaster's own utime + stime, plus what its children
that exited used (cutime + cstime: the kernel adds a child's times there when its parent
reaps it), plus the utime + stime of its children alive now. Two such readings bracket
every backend that lived between them, however short its life.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import psycopg
import sqlalchemy as sa

from tests import pgbouncer_server, postgres_server

TICK = os.sysconf("SC_CLK_TCK")  # /proc's clock ticks a second
# "automatic vacuum of table "db.public.jobq_tasks": index scans: 1 ..." (PostgreSQL 15).
_AUTOVACUUM = re.compile(r'automatic (vacuum|analyze) of table "([^"]+)"')


class OwnPostgres(postgres_server.PostgresServer):
    """tests' private cluster with ``settings`` added to the module's own."""

    settings: tuple[str, ...] = ("fsync=on",)

    def _pg_ctl(self, action: str, *extra: str) -> None:
        # pg_ctl appends a second -o to the first: these come after the module's own.
        ours = " ".join(f"-c {s}" for s in self.settings)
        super()._pg_ctl(action, "-o", ours, *extra)


Server = TypeVar("Server", bound=OwnPostgres)


@contextmanager
def started(make: type[Server], *args: object) -> Iterator[Server]:
    """``make(programs, *args)`` started, stopped and its directory deleted at the end,
    whatever happened in between."""
    programs = postgres_server.bindir()
    if programs is None:
        raise RuntimeError("no PostgreSQL server programs (pg_ctl, initdb) on this machine")
    with postgres_server.running(programs, lambda found: make(found, *args)) as server:
        yield server


# --- private_postgres: autovacuum on, logged --------------------------------------------


class BenchPostgres(OwnPostgres):
    """tests' private cluster with autovacuum logged and ``shared_buffers`` as given."""

    def __init__(self, programs: Path, shared_buffers: str) -> None:
        super().__init__(programs)  # initdb
        self.settings = (
            "fsync=on", "autovacuum=on", "log_autovacuum_min_duration=0",
            f"shared_buffers={shared_buffers}",
        )  # fmt: skip

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


def private_postgres(
    shared_buffers: str = "512MB",
) -> contextlib.AbstractContextManager[BenchPostgres]:
    """A started BenchPostgres, stopped and its directory deleted at the end."""
    return started(BenchPostgres, shared_buffers)


# --- hosted_postgres and hosted_bouncer: reachable from network namespaces ---------------


class HostedPostgres(OwnPostgres):
    """tests' private cluster, listening on 127.0.0.1 and on ``addresses`` as well."""

    def __init__(self, programs: Path, addresses: Sequence[str]) -> None:
        super().__init__(programs)  # initdb
        listen = ",".join(["127.0.0.1", *addresses])
        self.settings = (f"listen_addresses={listen}", "fsync=on", "max_connections=300")
        with open(self.data / "pg_hba.conf", "a") as hba:
            hba.write("host all all 127.0.0.0/8 trust\n")

    @property
    def postmaster(self) -> int:
        """The postmaster's pid (the first line of postmaster.pid)."""
        return int((self.data / "postmaster.pid").read_text().split()[0])


def hosted_postgres(addresses: Sequence[str]) -> contextlib.AbstractContextManager[HostedPostgres]:
    """A started HostedPostgres, stopped and deleted at the end."""
    return started(HostedPostgres, addresses)


class HostedBouncer(pgbouncer_server.Bouncer):
    """tests' PgBouncer, listening on 127.0.0.1 and on ``addresses`` as well."""

    def __init__(self, server: sa.URL, database: str, pool_size: int, addresses: Sequence[str]):
        super().__init__(server, database, pool_size)
        ini = self.directory / "pgbouncer.ini"
        listen = ",".join(["127.0.0.1", *addresses])
        text = ini.read_text()
        if "listen_addr = 127.0.0.1\n" not in text:
            raise RuntimeError("tests/pgbouncer_server.py's pgbouncer.ini changed: no listen_addr")
        ini.write_text(text.replace("listen_addr = 127.0.0.1\n", f"listen_addr = {listen}\n"))

    @property
    def pid(self) -> int:
        """PgBouncer's pid (its pidfile)."""
        return int((self.directory / "pgbouncer.pid").read_text().split()[0])


@contextmanager
def hosted_bouncer(
    server_url: str, pool_size: int, addresses: Sequence[str]
) -> Iterator[HostedBouncer]:
    """A HostedBouncer in front of a new database on ``server_url``'s server, both removed
    at the end (as tests/pgbouncer_server.running, listening on ``addresses`` too)."""
    with pgbouncer_server.own_database(server_url) as database:
        bouncer = HostedBouncer(sa.make_url(server_url), database, pool_size, addresses)
        try:
            bouncer.start()
            yield bouncer
        finally:
            bouncer.stop()


def on(url: str, host: str) -> str:
    """``url`` with its host replaced (a namespace reaches the servers at its host end)."""
    return sa.make_url(url).set(host=host).render_as_string(hide_password=False)


# --- CPU time ----------------------------------------------------------------------------


def _stat(pid: int) -> list[str]:
    """/proc/<pid>/stat's fields after the command name (state first); [] if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            text = stat.read()
    except OSError:
        return []
    return text[text.rindex(")") + 2 :].split()


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system) process ``pid`` used so far; 0 if it is gone."""
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / TICK if fields else 0.0


def tree_cpu_seconds(*pids: int) -> float:
    """CPU time so far of each of ``pids``, of their reaped children and of their live
    children, summed (a postmaster and its backends; a worker supervisor and its workers:
    none of those children has children of its own). One scan of /proc."""
    roots = {str(pid) for pid in pids}
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat(int(entry))
        if not fields:
            continue
        if entry in roots:
            total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
        elif fields[1] in roots:  # field 4, ppid
            total += int(fields[11]) + int(fields[12])
    return total / TICK
