"""The peer side of bench_worker.py: PGQueuer and Procrastinate, run in their own venv.

Run by bench_worker.py with benchmarks/.venv-peers/bin/python (see peers.sh), one action
per process, and prints one JSON object on stdout:

    peer_worker.py pgqueuer|procrastinate setup|enqueue|drain|latency --dsn URI [...]

* setup: install the queue's schema (its tables go in the connection's search_path,
  which bench_worker.py sets to a schema of its own through the URI's ``options``).
* enqueue: N no-op jobs in bulk (the queue's own batch API).
* drain: one worker at the given concurrency, in the queue's "exit when empty" mode;
  reports the seconds from just before the worker starts to its return.
* latency (PGQueuer only): an idle worker woken by LISTEN/NOTIFY; jobs enqueued one at a
  time ``--spacing`` apart; latency is the picked log row's ``created`` minus the queued
  log row's (both the database's clock).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from datetime import timedelta

import psycopg

ENTRYPOINT = "bench_noop"


# --- PGQueuer ---------------------------------------------------------------------


async def _pgq_connect(dsn: str) -> psycopg.AsyncConnection:
    return await psycopg.AsyncConnection.connect(dsn, autocommit=True)


async def pgq_setup(args: argparse.Namespace) -> dict:
    from pgqueuer import PsycopgDriver, Queries

    async with await _pgq_connect(args.dsn) as conn:
        await Queries(PsycopgDriver(conn)).install(create_schema=False)
    return {}


async def pgq_enqueue(args: argparse.Namespace) -> dict:
    from pgqueuer import PsycopgDriver, Queries

    async with await _pgq_connect(args.dsn) as conn:
        queries = Queries(PsycopgDriver(conn))
        for start in range(0, args.tasks, 5000):
            n = min(5000, args.tasks - start)
            await queries.enqueue([ENTRYPOINT] * n, [None] * n, [0] * n)
    return {"enqueued": args.tasks}


def _pgq_app(conn: psycopg.AsyncConnection):
    from pgqueuer import PgQueuer, PsycopgDriver

    pgq = PgQueuer(PsycopgDriver(conn))
    done = {"n": 0}

    @pgq.entrypoint(ENTRYPOINT)
    async def noop(job) -> None:
        done["n"] += 1

    return pgq, done


async def pgq_drain(args: argparse.Namespace) -> dict:
    from pgqueuer.domain.types import QueueExecutionMode

    async with await _pgq_connect(args.dsn) as conn:
        pgq, done = _pgq_app(conn)
        start = time.perf_counter()
        await pgq.run(batch_size=args.concurrency, mode=QueueExecutionMode.drain)
        seconds = time.perf_counter() - start
    return {"seconds": seconds, "ran": done["n"]}


async def pgq_latency(args: argparse.Namespace) -> dict:
    from pgqueuer import PsycopgDriver, Queries

    async with await _pgq_connect(args.dsn) as conn, await _pgq_connect(args.dsn) as econn:
        pgq, done = _pgq_app(conn)
        queries = Queries(PsycopgDriver(econn))
        worker = asyncio.create_task(
            pgq.run(batch_size=args.concurrency, dequeue_timeout=timedelta(seconds=10))
        )
        await asyncio.sleep(2.0)  # let it start, find nothing, and sit in LISTEN
        for _ in range(args.samples):
            await queries.enqueue(ENTRYPOINT, None, 0)
            await asyncio.sleep(args.spacing)
        deadline = time.monotonic() + 30
        while done["n"] < args.samples and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        pgq.shutdown.set()
        await asyncio.wait_for(worker, 30)
        log_table = os.environ.get("PGQUEUER_PREFIX", "") + "pgqueuer_log"
        cur = await econn.execute(
            f"SELECT extract(epoch FROM p.created - q.created) FROM {log_table} q"
            f" JOIN {log_table} p ON p.job_id = q.job_id"
            " WHERE q.status = 'queued' AND p.status = 'picked'"
        )
        latencies = [float(row[0]) for row in await cur.fetchall()]
    return {"latencies": latencies, "ran": done["n"]}


# --- Procrastinate ----------------------------------------------------------------


def _procrastinate_app(dsn: str):
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))
    done = {"n": 0}

    @app.task(name=ENTRYPOINT, queue="bench")
    async def noop(n: int = 0) -> None:
        done["n"] += 1

    return app, noop, done


async def procrastinate_setup(args: argparse.Namespace) -> dict:
    app, _, _ = _procrastinate_app(args.dsn)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
    return {}


async def procrastinate_enqueue(args: argparse.Namespace) -> dict:
    app, noop, _ = _procrastinate_app(args.dsn)
    async with app.open_async():
        for start in range(0, args.tasks, 5000):
            n = min(5000, args.tasks - start)
            await noop.batch_defer_async(*({"n": i} for i in range(start, start + n)))
    return {"enqueued": args.tasks}


async def procrastinate_drain(args: argparse.Namespace) -> dict:
    app, _, done = _procrastinate_app(args.dsn)
    async with app.open_async():
        start = time.perf_counter()
        await app.run_worker_async(
            queues=["bench"], concurrency=args.concurrency, wait=False,
            install_signal_handlers=False,
        )  # fmt: skip
        seconds = time.perf_counter() - start
    return {"seconds": seconds, "ran": done["n"]}


ACTIONS = {
    ("pgqueuer", "setup"): pgq_setup,
    ("pgqueuer", "enqueue"): pgq_enqueue,
    ("pgqueuer", "drain"): pgq_drain,
    ("pgqueuer", "latency"): pgq_latency,
    ("procrastinate", "setup"): procrastinate_setup,
    ("procrastinate", "enqueue"): procrastinate_enqueue,
    ("procrastinate", "drain"): procrastinate_drain,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("queue", choices=["pgqueuer", "procrastinate"])
    parser.add_argument("action", choices=["setup", "enqueue", "drain", "latency"])
    parser.add_argument("--dsn", required=True, help="libpq URI (search_path in options)")
    parser.add_argument("--tasks", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--spacing", type=float, default=0.02)
    args = parser.parse_args()
    action = ACTIONS.get((args.queue, args.action))
    if action is None:
        parser.error(f"{args.queue} has no {args.action} action")
    os.environ.setdefault("PGQUEUER_PREFIX", "")
    print(json.dumps(asyncio.run(action(args))), flush=True)


if __name__ == "__main__":
    main()
