"""Shared by pooler.py and idle_load.py: PgBouncer's admin console, and the server's own
view of a database's sessions, read from outside that database.

Both scripts start PgBouncer with tests/pgbouncer_server.py (Debian's PgBouncer 1.18, in
transaction pooling mode, in front of a database of its own that it creates and drops).
The readers here connect to PgBouncer's ``pgbouncer`` console and to the server's own
database of ``--database-url`` (``test``), never to the measured database, so that none
of their reads counts in that database's statistics or sessions.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
import sqlalchemy as sa

from benchmarks.harness import ROOT, git_state, psycopg_conninfo


def code_state() -> str:
    """The commit measured: the checkout's (and whether jobq/ differs from it), or a note
    that the code is an export without git (``git archive``; give ``--label``)."""
    if (ROOT / ".git").exists():
        return git_state()
    return f"jobq from {ROOT} (an export, not a git checkout)"


def pgbouncer_version() -> str:
    """'PgBouncer 1.18.0', say: the first line of ``pgbouncer --version``."""
    try:
        out = subprocess.run(["pgbouncer", "--version"], capture_output=True, text=True)
    except OSError:
        return "PgBouncer (version unknown)"
    lines = out.stdout.strip().splitlines()
    return lines[0] if lines else "PgBouncer (version unknown)"


def wait_for(
    condition: Callable[[], bool], what: str, timeout: float = 60.0, every: float = 0.05
) -> float:
    """Look at ``condition`` every ``every`` s until it holds: the seconds that took.
    Raises TimeoutError, naming ``what``, after ``timeout`` s."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"not within {timeout:g} s: {what}")
        time.sleep(every)
    return time.monotonic() - start


class Console:
    """PgBouncer's admin console (the ``pgbouncer`` database), for one pooled database."""

    def __init__(self, port: int, user: str, database: str) -> None:
        self.database = database
        # Nothing prepared: the console takes the simple query protocol only, and psycopg
        # would prepare a statement it ran 5 times.
        self.conn = psycopg.connect(
            f"host=127.0.0.1 port={port} user={user} dbname=pgbouncer",
            autocommit=True,
            prepare_threshold=None,
        )

    def show(self, what: str) -> list[dict[str, Any]]:
        """The rows of ``SHOW <what>`` about our database, as dicts by column name."""
        cur = self.conn.execute(f"SHOW {what}")
        names = [column.name for column in cur.description or []]
        rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
        return [row for row in rows if row.get("database") == self.database]

    def stats(self) -> dict[str, int]:
        """SHOW STATS' running totals for our database (total_xact_count, total_query_count,
        total_wait_time in µs, ...), live as PgBouncer counts them."""
        rows = self.show("STATS")
        if not rows:
            return {}
        return {k: int(v) for k, v in rows[0].items() if k.startswith("total_")}

    def pool(self) -> dict[str, int]:
        """SHOW POOLS' row of our database: cl_active, cl_waiting, sv_active, sv_idle, ..."""
        rows = self.show("POOLS")
        if not rows:
            return {}
        return {k: int(v) for k, v in rows[0].items() if isinstance(v, int)}

    def servers(self) -> list[dict[str, Any]]:
        """PgBouncer's server connections to our database (remote_pid: the backend's pid)."""
        return self.show("SERVERS")

    def clients(self) -> list[dict[str, Any]]:
        """Client connections to our database through PgBouncer (not this console)."""
        return self.show("CLIENTS")

    def drop_connections(self) -> None:
        """KILL then RESUME our database: every client and server connection dropped, so
        that the next run starts with none (as processes connecting directly do)."""
        self.conn.execute(f"KILL {self.database}")
        self.conn.execute(f"RESUME {self.database}")

    def close(self) -> None:
        self.conn.close()


@dataclass(frozen=True)
class Backend:
    """One session of the measured database, as pg_stat_activity shows it."""

    pid: int
    state: str | None
    query: str

    @property
    def listening(self) -> bool:
        """Whether its last statement was a LISTEN: jobq's notification sessions."""
        return self.query.lstrip().upper().startswith("LISTEN")


class Server:
    """A connection to the server's own database (``--database-url``'s), from which the
    scripts read the measured database's statistics and sessions without being part of
    them. Each read is a transaction of its own (autocommit), so each sees fresh figures
    (pg_stat_* values are cached for the length of a transaction)."""

    def __init__(self, url: str, database: str) -> None:
        self.database = database
        self.conn = psycopg.connect(psycopg_conninfo(sa.make_url(url)), autocommit=True)
        self.pid = int(self.conn.info.backend_pid)

    def version(self) -> str:
        """'PostgreSQL 15.20', say."""
        version = self.conn.execute("SELECT version()").fetchone()
        return " ".join(str(version[0] if version else "PostgreSQL ?").split()[:2])

    def backends(self) -> list[Backend]:
        """Client sessions of the measured database (not this connection, not the server's
        own processes)."""
        rows = self.conn.execute(
            "SELECT pid, state, coalesce(query, '') FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
            [self.database],
        ).fetchall()
        return [Backend(int(pid), state, query) for pid, state, query in rows]

    def transactions(self) -> int:
        """pg_stat_database's xact_commit + xact_rollback of the measured database: what
        its sessions had flushed to the statistics so far. A session flushes its counts
        when it goes idle, unless it did less than 1 s before: then 10 s later
        (PostgreSQL 15's PGSTAT_MIN_INTERVAL and PGSTAT_IDLE_INTERVAL), or at its next
        idle moment past the second."""
        row = self.conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
            [self.database],
        ).fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def setting(self, name: str) -> str:
        """A server setting's current value (``shared_preload_libraries``, say)."""
        row = self.conn.execute("SELECT current_setting(%s, true)", [name]).fetchone()
        return str(row[0]) if row and row[0] is not None else ""

    def wait_until_empty(self, timeout: float = 60.0) -> float:
        """Wait until the measured database has no client session left: the seconds."""
        return wait_for(lambda: not self.backends(), f"no session left in {self.database}", timeout)

    def close(self) -> None:
        self.conn.close()
