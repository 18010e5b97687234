"""The peer side of bench_worker.py: PGQueuer and Procrastinate, run in their own venv.

Run by bench_worker.py with benchmarks/.venv-peers/bin/python (see peers.sh), one action
per process (sustained_load.py too, through _sustained_peers.py: setup, serve and
produce), and prints one JSON object on stdout:

    peer_worker.py pgqueuer|procrastinate setup|enqueue|drain|serve|latency|produce --dsn URI

* setup: install the queue's schema (its tables go in the connection's search_path,
  which bench_worker.py sets to a schema of its own through the URI's ``options``; for
  PGQueuer, then its recommended autovacuum settings, as ``pgq autovac`` applies them);
  reports the versions in use.
* enqueue: N no-op jobs in bulk (the queue's own batch API), ``--batch`` per call;
  reports the seconds of the calls alone (connected beforehand), best of ``--repeat``
  runs, the queue emptied between runs (untimed).
* drain: one worker at the given concurrency, in the queue's "exit when empty" mode;
  reports the seconds from just before the worker starts to its return.
* serve: one worker in its continuous mode until SIGTERM, each job sleeping
  ``--sleep-ms`` on the loop (0: a no-op); reports how many jobs it ran. PGQueuer: LISTEN,
  then batches of ``--concurrency`` (scale_peers.py starts several and times them from
  outside); Procrastinate: ``run_worker_async(concurrency=C, wait=True)``, LISTEN/NOTIFY
  on (its default).
* produce: sustained_load.py's producer (_producer.py: steps read from stdin, one JSON
  line printed per step, not one at the end), each batch through the queue's own batch
  API.
* latency (PGQueuer only): an idle worker woken by LISTEN/NOTIFY; jobs enqueued one at a
  time ``--spacing`` apart; latency is the picked log row's ``created`` minus the queued
  log row's (both the database's clock).

PGQueuer runs on ``--driver asyncpg`` (default: its documentation's driver, an
``AsyncpgDriver`` on ``asyncpg.connect(dsn)``) or ``--driver psycopg`` (``PsycopgDriver``
on an autocommit ``psycopg.AsyncConnection``). asyncpg does not take libpq's ``options``
parameter: the schema named there by ``-csearch_path=...`` is given to it as
``server_settings={"search_path": schema}`` instead. Procrastinate always runs on psycopg
(its ``PsycopgConnector``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from importlib.metadata import version
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

if TYPE_CHECKING:
    from pgqueuer import PgQueuer
    from pgqueuer.db import Driver

ENTRYPOINT = "bench_noop"
SEARCH_PATH_OPTION = "-csearch_path="

Result = dict[str, Any]


def payload(i: int) -> bytes:
    """Job ``i``'s payload: the same arguments jobq's no-op tasks get, ``{"n": i}``."""
    return json.dumps({"n": i}).encode()


def split_search_path(dsn: str) -> tuple[str, str | None]:
    """``dsn`` without its ``options`` parameter, and the schema its search_path names.

    bench_worker.py selects the schema with ``options=-csearch_path=SCHEMA`` (libpq);
    asyncpg would send ``options`` as a server setting of that name, so it is taken out
    and the schema passed as ``server_settings`` instead.
    """
    parts = urlsplit(dsn)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = None
    kept = []
    for key, value in query:
        if key == "options":
            if not value.startswith(SEARCH_PATH_OPTION) or " " in value:
                raise ValueError(f"only options={SEARCH_PATH_OPTION}SCHEMA is supported: {value}")
            schema = value.removeprefix(SEARCH_PATH_OPTION)
        else:
            kept.append((key, value))
    return urlunsplit(parts._replace(query=urlencode(kept))), schema


# --- PGQueuer ---------------------------------------------------------------------


@asynccontextmanager
async def pgq_driver(dsn: str, driver: str) -> AsyncIterator[Driver]:
    """A PGQueuer driver on a new connection of kind ``driver``, closed on exit."""
    if driver == "asyncpg":
        import asyncpg
        from pgqueuer import AsyncpgDriver

        plain, schema = split_search_path(dsn)
        settings = {"search_path": schema} if schema else None
        conn = await asyncpg.connect(plain, server_settings=settings)
        try:
            yield AsyncpgDriver(conn)
        finally:
            await conn.close()
    else:
        import psycopg
        from pgqueuer import PsycopgDriver

        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as pconn:
            yield PsycopgDriver(pconn)


def driver_version(driver: str) -> str:
    return f"{driver} {version(driver)}"


async def pgq_setup(args: argparse.Namespace) -> Result:
    from pgqueuer import Queries

    async with pgq_driver(args.dsn, args.driver) as driver:
        queries = Queries(driver)
        await queries.install(create_schema=False)
        # Its performance guide's first step after installing (`pgq autovac`): autovacuum
        # settings and fillfactor for its high-churn tables. Durability stays "durable"
        # (the default, WAL-logged tables), as jobq's tables are.
        await queries.optimize_autovacuum()
    return {"queue": f"pgqueuer {version('pgqueuer')}", "driver": driver_version(args.driver)}


async def pgq_enqueue(args: argparse.Namespace) -> Result:
    from pgqueuer import Queries

    runs: list[float] = []
    async with pgq_driver(args.dsn, args.driver) as driver:
        queries = Queries(driver)
        chunks = [
            [payload(i) for i in range(start, min(start + args.batch, args.tasks))]
            for start in range(0, args.tasks, args.batch)
        ]
        for run in range(args.repeat):
            if run:  # each run starts from empty tables, as the first does
                await queries.clear_queue()
                await queries.clear_queue_log()
            start = time.perf_counter()
            for chunk in chunks:
                n = len(chunk)
                await queries.enqueue([ENTRYPOINT] * n, list(chunk), [0] * n)
            runs.append(time.perf_counter() - start)
    return {"enqueued": args.tasks, "seconds": min(runs), "runs": runs, "per_call": args.batch}


def _pgq_app(driver: Driver, sleep_ms: float = 0.0) -> tuple[PgQueuer, dict[str, int]]:
    from pgqueuer import PgQueuer

    pgq = PgQueuer(driver)
    done = {"n": 0}

    @pgq.entrypoint(ENTRYPOINT)
    async def noop(job: Any) -> None:
        if sleep_ms:
            await asyncio.sleep(sleep_ms / 1000)  # the task's work (sustained_load.py)
        done["n"] += 1

    return pgq, done


async def pgq_drain(args: argparse.Namespace) -> Result:
    from pgqueuer.domain.types import QueueExecutionMode

    async with pgq_driver(args.dsn, args.driver) as driver:
        pgq, done = _pgq_app(driver)
        start = time.perf_counter()
        await pgq.run(batch_size=args.concurrency, mode=QueueExecutionMode.drain)
        seconds = time.perf_counter() - start
    return {"seconds": seconds, "ran": done["n"]}


async def pgq_serve(args: argparse.Namespace) -> Result:
    async with pgq_driver(args.dsn, args.driver) as driver:
        pgq, done = _pgq_app(driver, args.sleep_ms)
        # Its own shutdown on SIGTERM: the jobs it picked finish and are logged first.
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, pgq.shutdown.set)
        await pgq.run(batch_size=args.concurrency)
    return {"ran": done["n"]}


async def pgq_latency(args: argparse.Namespace) -> Result:
    from pgqueuer import Queries

    async with (
        pgq_driver(args.dsn, args.driver) as wdriver,
        pgq_driver(args.dsn, args.driver) as edriver,
    ):
        pgq, done = _pgq_app(wdriver)
        queries = Queries(edriver)
        worker = asyncio.create_task(
            pgq.run(batch_size=args.concurrency, dequeue_timeout=timedelta(seconds=10))
        )
        await asyncio.sleep(2.0)  # let it start, find nothing, and sit in LISTEN
        for i in range(args.samples):
            await queries.enqueue(ENTRYPOINT, payload(i), 0)
            await asyncio.sleep(args.spacing)
        deadline = time.monotonic() + 30
        while done["n"] < args.samples and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        pgq.shutdown.set()
        await asyncio.wait_for(worker, 30)
        log_table = os.environ.get("PGQUEUER_PREFIX", "") + "pgqueuer_log"
        rows = await edriver.fetch(
            f"SELECT extract(epoch FROM p.created - q.created)::float8 AS latency"
            f" FROM {log_table} q JOIN {log_table} p ON p.job_id = q.job_id"
            " WHERE q.status = 'queued' AND p.status = 'picked'"
        )
    return {"latencies": [float(row["latency"]) for row in rows], "ran": done["n"]}


# --- Procrastinate ----------------------------------------------------------------


def _procrastinate_app(dsn: str, sleep_ms: float = 0.0) -> tuple[Any, Any, dict[str, int]]:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))
    done = {"n": 0}

    @app.task(name=ENTRYPOINT, queue="bench")
    async def noop(n: int = 0) -> None:
        if sleep_ms:
            await asyncio.sleep(sleep_ms / 1000)  # the task's work (sustained_load.py)
        done["n"] += 1

    return app, noop, done


async def procrastinate_setup(args: argparse.Namespace) -> Result:
    app, _, _ = _procrastinate_app(args.dsn)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
    return {"queue": f"procrastinate {version('procrastinate')}", "driver": "psycopg"}


async def procrastinate_enqueue(args: argparse.Namespace) -> Result:
    app, noop, _ = _procrastinate_app(args.dsn)
    async with app.open_async():
        start = time.perf_counter()
        for first in range(0, args.tasks, args.batch):
            last = min(first + args.batch, args.tasks)
            await noop.batch_defer_async(*({"n": i} for i in range(first, last)))
        seconds = time.perf_counter() - start
    return {"enqueued": args.tasks, "seconds": seconds, "runs": [seconds], "per_call": args.batch}


async def procrastinate_drain(args: argparse.Namespace) -> Result:
    app, _, done = _procrastinate_app(args.dsn)
    async with app.open_async():
        start = time.perf_counter()
        await app.run_worker_async(
            queues=["bench"], concurrency=args.concurrency, wait=False,
            install_signal_handlers=False,
        )  # fmt: skip
        seconds = time.perf_counter() - start
    return {"seconds": seconds, "ran": done["n"]}


async def procrastinate_serve(args: argparse.Namespace) -> Result:
    app, _, done = _procrastinate_app(args.dsn, args.sleep_ms)
    async with app.open_async():
        # Its own signal handlers: SIGTERM stops it once the running jobs are done.
        await app.run_worker_async(queues=["bench"], concurrency=args.concurrency, wait=True)
    return {"ran": done["n"]}


def produce(args: argparse.Namespace) -> None:
    """sustained_load.py's producer for a peer: _producer.serve, each batch enqueued with
    the peer's own batch API (PGQueuer's ``Queries.enqueue``, Procrastinate's
    ``batch_defer_async``) on one connection, on a loop of its own."""
    from benchmarks._producer import serve

    loop = asyncio.new_event_loop()
    with contextlib.ExitStack() as stack:
        if args.queue == "pgqueuer":
            from pgqueuer import Queries

            opened = pgq_driver(args.dsn, args.driver)
            driver = loop.run_until_complete(opened.__aenter__())
            stack.callback(lambda: loop.run_until_complete(opened.__aexit__(None, None, None)))
            queries = Queries(driver)

            def send(n: int) -> object:
                return loop.run_until_complete(
                    queries.enqueue([ENTRYPOINT] * n, [payload(0)] * n, [0] * n)
                )
        else:
            app, noop, _ = _procrastinate_app(args.dsn)
            context = app.open_async()
            loop.run_until_complete(context.__aenter__())
            stack.callback(lambda: loop.run_until_complete(context.__aexit__(None, None, None)))

            def send(n: int) -> object:
                return loop.run_until_complete(noop.batch_defer_async(*([{"n": 0}] * n)))

        serve(send, args.batch)


ACTIONS: dict[tuple[str, str], Callable[[argparse.Namespace], Awaitable[Result]]] = {
    ("pgqueuer", "setup"): pgq_setup,
    ("pgqueuer", "enqueue"): pgq_enqueue,
    ("pgqueuer", "drain"): pgq_drain,
    ("pgqueuer", "serve"): pgq_serve,
    ("pgqueuer", "latency"): pgq_latency,
    ("procrastinate", "setup"): procrastinate_setup,
    ("procrastinate", "enqueue"): procrastinate_enqueue,
    ("procrastinate", "drain"): procrastinate_drain,
    ("procrastinate", "serve"): procrastinate_serve,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("queue", choices=["pgqueuer", "procrastinate"])
    parser.add_argument(
        "action", choices=["setup", "enqueue", "drain", "serve", "latency", "produce"]
    )
    parser.add_argument("--dsn", required=True, help="libpq URI (search_path in options)")
    parser.add_argument(
        "--driver", choices=["asyncpg", "psycopg"], default="asyncpg",
        help="PGQueuer's driver (default asyncpg); Procrastinate always uses psycopg",
    )  # fmt: skip
    parser.add_argument("--tasks", type=int, default=50000)
    parser.add_argument("--batch", type=int, default=1000, help="jobs per enqueue call")
    parser.add_argument("--repeat", type=int, default=1, help="enqueue runs; the best counts")
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--spacing", type=float, default=0.02)
    parser.add_argument("--sleep-ms", type=float, default=0.0, help="serve: each job's work")
    args = parser.parse_args()
    os.environ.setdefault("PGQUEUER_PREFIX", "")
    if args.action == "produce":
        produce(args)  # JSON lines of its own, one per step
        return
    action = ACTIONS.get((args.queue, args.action))
    if action is None:
        parser.error(f"{args.queue} has no {args.action} action")
    os.environ.setdefault("PGQUEUER_PREFIX", "")
    print(json.dumps(asyncio.run(action(args))), flush=True)


if __name__ == "__main__":
    main()
