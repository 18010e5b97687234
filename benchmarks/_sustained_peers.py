"""sustained_load.py's peers: PGQueuer and Procrastinate at the same steps as jobq.

Each runs from benchmarks/.venv-peers (peers.sh) through peer_worker.py, in a PostgreSQL
schema of its own, at its strongest documented configuration:

- PGQueuer on asyncpg (the driver its documentation recommends), its tables set up with
  its recommended autovacuum settings (``pgq autovac``, peer_worker.py ``setup``); one
  ``PgQueuer.run(batch_size=SLOTS)`` process (LISTEN/NOTIFY), producer
  ``Queries.enqueue`` in batches;
- Procrastinate on psycopg (its ``PsycopgConnector``), one ``run_worker_async(
  concurrency=SLOTS)`` process with LISTEN/NOTIFY (its default), producer
  ``batch_defer_async`` in batches.

Jobs are async and sleep 1 ms on the worker's loop (``asyncio.sleep(0.001)``), as
jobq's ``--task async``. Everything is read from their own tables (PostgreSQL's clock):
PGQueuer's log (a 'queued', a 'picked' and a 'successful' row per job: claim latency is
picked - queued), Procrastinate's events ('deferred', 'started', 'succeeded').
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from benchmarks._backend_cpu import APPLICATION, named
from benchmarks._drains import PEER_SCRIPT, peer
from benchmarks._sustained_run import Plan, Queue
from benchmarks.harness import PEERS_PYTHON, ROOT, connect_postgres

PEERS = ("pgqueuer", "procrastinate")
PREFIX = "bench_"  # PGQueuer's table prefix, as bench_worker.py's peer runs use


@dataclass(frozen=True)
class Tables:
    """One peer's SQL: (done since, depth, running), completed in a window, latencies."""

    table: str  # the table whose dead tuples are shown
    state: str
    completed: str
    latencies: str


_PGQ_LOG = f"{PREFIX}pgqueuer_log"
_PGQ = f"{PREFIX}pgqueuer"
TABLES = {
    "pgqueuer": Tables(
        _PGQ,
        f"SELECT (SELECT count(*) FROM {_PGQ_LOG} WHERE status = 'successful'"
        "   AND created >= to_timestamp(%s)),"
        f" (SELECT count(*) FROM {_PGQ} WHERE status = 'queued'),"
        f" (SELECT count(*) FROM {_PGQ} WHERE status = 'picked')",
        f"SELECT count(*) FROM {_PGQ_LOG} WHERE status = 'successful'"
        " AND created >= to_timestamp(%s) AND created < to_timestamp(%s)",
        f"SELECT extract(epoch FROM p.created - q.created)::float8 FROM {_PGQ_LOG} q"
        f" LEFT JOIN {_PGQ_LOG} p ON p.job_id = q.job_id AND p.status = 'picked'"
        " WHERE q.status = 'queued' AND q.created >= to_timestamp(%s)"
        " AND q.created < to_timestamp(%s)",
    ),
    "procrastinate": Tables(
        "procrastinate_jobs",
        "SELECT (SELECT count(*) FROM procrastinate_events WHERE type = 'succeeded'"
        "   AND at >= to_timestamp(%s)),"
        " (SELECT count(*) FROM procrastinate_jobs WHERE status = 'todo'),"
        " (SELECT count(*) FROM procrastinate_jobs WHERE status = 'doing')",
        "SELECT count(*) FROM procrastinate_events WHERE type = 'succeeded'"
        " AND at >= to_timestamp(%s) AND at < to_timestamp(%s)",
        "SELECT extract(epoch FROM s.at - d.at)::float8 FROM procrastinate_events d"
        " LEFT JOIN procrastinate_events s ON s.job_id = d.job_id AND s.type = 'started'"
        " WHERE d.type = 'deferred' AND d.at >= to_timestamp(%s) AND d.at < to_timestamp(%s)",
    ),
}
_DEAD = (
    "SELECT n_dead_tup FROM pg_stat_user_tables"
    " WHERE relname = %s AND schemaname = current_schema()"
)
_READY = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"


class PeerProbe:
    """_sustained_run.Probe over a peer's tables, on a psycopg connection of its own."""

    def __init__(self, dsn: str, tables: Tables) -> None:
        self.dsn, self.tables = dsn, tables

    def _one(self, sql: str, *params: object) -> tuple[Any, ...]:
        with connect_postgres(self.dsn, autocommit=True) as conn:
            row = conn.execute(sql, params).fetchone()
        assert row is not None
        return tuple(row)

    def state(self, since: float) -> tuple[int, int, int]:
        done, depth, running = self._one(self.tables.state, since)
        return int(done), int(depth), int(running)

    def dead(self) -> tuple[int | None, int | None]:
        (dead,) = self._one(_DEAD, self.tables.table)
        return int(dead), None

    def completed(self, start: float, end: float) -> int:
        return int(self._one(self.tables.completed, start, end)[0])

    def latencies(self, start: float, end: float) -> tuple[list[float], int]:
        with connect_postgres(self.dsn, autocommit=True) as conn:
            rows = conn.execute(self.tables.latencies, (start, end)).fetchall()
        found = [float(r[0]) for r in rows if r[0] is not None]
        return found, len(rows) - len(found)

    def ready(self) -> bool:
        """The worker connected (its sessions carry APPLICATION)."""
        return bool(self._one(_READY, APPLICATION)[0])


def peer_queue(name: str, dsn: str, slots: int, plan: Plan) -> Queue:
    """``name`` on its freshly set-up tables at ``dsn`` (a libpq URI on its own schema)."""
    extra = {"driver": "asyncpg"} if name == "pgqueuer" else {}
    seen = peer(name, "setup", dsn, 120, **extra)
    base = [str(PEERS_PYTHON), str(PEER_SCRIPT), name]
    options = [f"--{k}={v}" for k, v in extra.items()]
    worker = [*base, "serve", "--dsn", named(dsn), "--concurrency", str(slots), "--sleep-ms", "1"]
    producer = [*base, "produce", "--dsn", dsn, "--batch", str(plan.batch)]
    env = dict(os.environ, PGQUEUER_PREFIX=PREFIX, PYTHONPATH=str(ROOT))
    label = f"{seen['queue']} on {seen['driver']}"
    probe = PeerProbe(dsn, TABLES[name])
    return Queue(label, worker + options, producer + options, env, probe)


def peers_ready() -> bool:
    """Whether benchmarks/.venv-peers exists (peers.sh)."""
    return PEERS_PYTHON.exists()
