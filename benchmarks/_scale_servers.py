"""scale_out.py's servers: a PostgreSQL and a PgBouncer of the run's own, reachable from
the namespaces, and the CPU time they use.

The shared PostgreSQL on 5432 listens on 127.0.0.1 only, and restarting it would disturb
its other users. So the benchmark starts a cluster of its own with
tests/postgres_server.py (``initdb`` in a temporary directory, run as the ``postgres``
user), adding to that module's settings: ``listen_addresses`` also the host ends of the
namespaces' veths, ``fsync=on`` (the module turns it off for its restart tests; the shared
server, which the other benchmarks measure, has it on), and a ``pg_hba.conf`` line that
trusts 127.0.0.0/8 (initdb's trusts 127.0.0.1 only). PgBouncer is tests/pgbouncer_server.py's
(Debian's 1.18, transaction pooling) with ``listen_addr`` likewise.

Server CPU is read from /proc: the postmaster's own utime + stime, plus what its children
that exited used (cutime + cstime: the kernel adds a child's times there when its parent
reaps it), plus the utime + stime of its children alive now. Two such readings bracket
every backend that lived between them, however short its life.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa

from tests import pgbouncer_server, postgres_server

TICK = os.sysconf("SC_CLK_TCK")  # /proc's clock ticks a second
#: Settings added to tests/postgres_server.py's (a later -c wins over an earlier one).
SETTINGS = ("fsync=on", "max_connections=300")


class HostedPostgres(postgres_server.PostgresServer):
    """tests' private cluster, listening on 127.0.0.1 and on ``addresses`` as well."""

    def __init__(self, programs: Path, addresses: Sequence[str]) -> None:
        super().__init__(programs)  # initdb
        self.addresses = ["127.0.0.1", *addresses]
        with open(self.data / "pg_hba.conf", "a") as hba:
            hba.write("host all all 127.0.0.0/8 trust\n")

    def _pg_ctl(self, action: str, *extra: str) -> None:
        # pg_ctl appends a second -o to the first: these come after the module's own.
        ours = [f"listen_addresses={','.join(self.addresses)}", *SETTINGS]
        super()._pg_ctl(action, "-o", " ".join(f"-c {s}" for s in ours), *extra)

    @property
    def postmaster(self) -> int:
        """The postmaster's pid (the first line of postmaster.pid)."""
        return int((self.data / "postmaster.pid").read_text().split()[0])


@contextmanager
def hosted_postgres(addresses: Sequence[str]) -> Iterator[HostedPostgres]:
    """A started HostedPostgres, stopped and deleted at the end."""
    programs = postgres_server.bindir()
    if programs is None:
        raise RuntimeError("no PostgreSQL server programs (pg_ctl, initdb) on this machine")
    server = HostedPostgres(programs, addresses)
    try:
        server.start()
        yield server
    finally:
        try:
            server.stop()
        finally:
            shutil.rmtree(server.directory, ignore_errors=True)


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
