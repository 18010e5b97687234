#!/usr/bin/env python
"""What a transaction pooler costs a drain: prepared statements off, and PgBouncer between.

``--tasks`` (20,000) no-op sync tasks (``bench.noop`` of benchmarks/noop_app.py), enqueued
beforehand with ``enqueue_many`` and ANALYZEd (untimed), drained by ``jobq worker
--concurrency 32 --burst``, one worker and ``--workers`` separate ones at once (default
1,4), with the database URL of each variant:

a. the server's own URL: psycopg prepares what it ran 5 times, and jobq's sessions use
   generic plans (plan_cache_mode) without JIT: the default;
b. the same URL with ``?jobq_pooler=transaction``: nothing prepared, only the time zone
   set, no pooler (so the worker polls: no LISTEN without --listen-url);
c. through PgBouncer (transaction pooling) with ``?jobq_pooler=transaction``: polling;
d. as c, with ``--listen-url`` the server's own URL: woken by LISTEN there.

Each (workers, variant) pair is a configuration; all run once a round for ``--rounds``
(3) rounds, interleaved, the order reversed every other round, and the report gives
medians with the minimum and maximum. A drain is timed from the first spawn to the last
exit; the "busy span" is the first capture to the last end as the rows record them.
After each drain every task must be ``done`` at attempt 1 (each ran once), or the script
stops with an error. The ratio to (a) divides each configuration's median jobs/s by (a)'s
with as many workers (round by round in brackets: each round's pair).

PgBouncer is Debian's (1.18), started by tests/pgbouncer_server.py in front of a database
of its own that it creates on the server of ``--database-url`` and drops at the end. Its
pool holds ``--pool-size`` (20) server connections at most: more than the transactions
the workers can have open at once (a worker's database work is done by its loop thread,
plus its heartbeats), so that the pool never makes a client wait and the comparison is
of the pooler's hop and of unprepared statements, not of queueing. The report shows that
it held: the most clients PgBouncer kept waiting for a server at once (sampled every
0.1 s) and the wait in all (SHOW STATS' total_wait_time). Before each drain PgBouncer
drops its connections (KILL and RESUME), so that every run starts with none, as direct
ones do; the report gives the most sessions the database had during the drain.

Workers run at ``--log-level warning`` (anything they write to stderr is shown) with a
byte-code cache of their own, filled by a warm-up start of each variant. Just before each
drain the script reads /proc/stat over 0.5 s while it runs nothing, and reports how much
of the CPU other work kept busy; with ``--quiet-below P`` it first waits (up to 120 s a
run) until that is under P %. The report goes to stdout, progress to stderr.

    .venv/bin/python benchmarks/pooler.py                      # 3 rounds: ~1.5 min here
    .venv/bin/python benchmarks/pooler.py --rounds 5 --quiet-below 25
    .venv/bin/python benchmarks/pooler.py --workers 4 --variants a,c --pool-size 4
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sqlalchemy as sa

from benchmarks._bouncer import Console, Server, code_state, pgbouncer_version
from benchmarks._drain_rows import DrainRates, Rows, check_rows, fill
from benchmarks._machine import Poller, load, quiet_moment
from benchmarks.harness import (
    DEFAULT_POSTGRES_URL,
    SYNC_TASK,
    Database,
    jobq_worker_cmd,
    log,
    run_commands,
    spread,
    worker_env,
)
from tests import pgbouncer_server

# --- configurations --------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    """One way of reaching the database: directly or through PgBouncer, with or without
    ``?jobq_pooler=transaction``, with or without ``--listen-url``."""

    key: str
    label: str
    pooled: bool  # through PgBouncer
    pooler_parameter: bool  # ?jobq_pooler=transaction
    listen_url: bool  # --listen-url the server's own URL

    def url(self, bouncer: pgbouncer_server.Bouncer) -> str:
        """The worker's database URL."""
        if self.pooled:
            return bouncer.pooled_url if self.pooler_parameter else bouncer.plain_url
        if self.pooler_parameter:
            return f"{bouncer.direct_url}?jobq_pooler=transaction"
        return bouncer.direct_url

    def shown(self) -> str:
        """The URL's kind and the options, for the report."""
        url = "PgBouncer" if self.pooled else "direct"
        if self.pooler_parameter:
            url += " `?jobq_pooler=transaction`"
        return url + (" + `--listen-url` direct" if self.listen_url else "")


VARIANTS = (
    Variant("a", "direct (default)", pooled=False, pooler_parameter=False, listen_url=False),
    Variant("b", "direct, prepared off", pooled=False, pooler_parameter=True, listen_url=False),
    Variant("c", "PgBouncer, polling", pooled=True, pooler_parameter=True, listen_url=False),
    Variant("d", "PgBouncer + LISTEN", pooled=True, pooler_parameter=True, listen_url=True),
)


@dataclass(frozen=True)
class Config:
    """``workers`` separate ``jobq worker`` commands through ``variant``."""

    variant: Variant
    workers: int

    @property
    def label(self) -> str:
        return f"({self.variant.key}) {self.variant.label}, {self.workers} worker(s)"

    def commands(
        self, bouncer: pgbouncer_server.Bouncer, concurrency: int, extra: Sequence[str]
    ) -> list[list[str]]:
        """The argv of each worker command (the URL goes in the environment)."""
        command = jobq_worker_cmd(
            "--burst", "--concurrency", str(concurrency), *extra,
            *(["--listen-url", bouncer.direct_url] if self.variant.listen_url else []),
        )  # fmt: skip
        return [command for _ in range(self.workers)]


# --- one drain -------------------------------------------------------------------------


class Sampler(Poller):
    """Every ``every`` s during a drain, from a thread: the database's sessions (from the
    server's own database) and PgBouncer's waiting clients; the most of each seen."""

    def __init__(self, server: Server, console: Console, every: float = 0.1) -> None:
        super().__init__(every)
        self.server, self.console = server, console
        self.sessions = 0  # the most sessions of the database at once
        self.waiting = 0  # the most clients PgBouncer kept waiting at once

    def look(self) -> None:
        """The sessions and waiting clients now, kept if the most so far."""
        self.sessions = max(self.sessions, len(self.server.backends()))
        pool = self.console.pool()
        self.waiting = max(self.waiting, pool.get("cl_waiting", 0))


@dataclass
class Run(DrainRates):
    """One timed drain of one configuration."""

    config: Config
    round: int
    tasks: int
    seconds: float
    rows: Rows
    sessions: int  # the most sessions the database had at once
    waiting: int  # the most clients PgBouncer kept waiting at once
    wait_ms: float  # SHOW STATS' total_wait_time over the drain, ms
    queries: int  # SHOW STATS' total_query_count over the drain (through PgBouncer)
    transactions: int  # SHOW STATS' total_xact_count over the drain
    others: float | None  # share of the CPU others kept busy just before the run
    stderr: list[str] = field(default_factory=list)  # what the workers wrote


@dataclass
class Bench:
    """The database, PgBouncer, the readers of both, and the options."""

    db: Database
    bouncer: pgbouncer_server.Bouncer
    server: Server
    console: Console
    pycache: str
    args: argparse.Namespace

    @property
    def extra(self) -> list[str]:
        """Options every worker command gets."""
        return [] if self.args.task_logs else ["--log-level", "warning"]

    def env(self, config: Config) -> dict[str, str]:
        return worker_env(config.variant.url(self.bouncer), self.pycache)

    def start_clean(self) -> None:
        """Close the benchmark's own sessions of the database and PgBouncer's; wait until
        the database has none."""
        self.db.store.dispose()
        self.console.drop_connections()
        self.server.wait_until_empty()

    def warm_up(self) -> None:
        """Each variant starts once on an empty queue (fills the byte-code cache)."""
        fill(self.db, SYNC_TASK, [])
        for variant in VARIANTS:
            log(f"warm-up: ({variant.key}) {variant.label}, one start on an empty queue")
            config = Config(variant, 1)
            commands = config.commands(self.bouncer, 1, self.extra)
            run_commands(commands, self.env(config), 120, f"warm-up ({variant.key})")

    def drain(self, config: Config, round_: int, task_args: Sequence[dict[str, Any]]) -> Run:
        """Fill the table, then time ``config`` draining it; check the rows."""
        what = f"round {round_ + 1}: {config.label}"
        fill(self.db, SYNC_TASK, task_args)
        self.start_clean()
        below = self.args.quiet_below
        others = quiet_moment(None if below is None else below / 100)
        commands = config.commands(self.bouncer, self.args.concurrency, self.extra)
        before = self.console.stats()
        with Sampler(self.server, self.console) as sampled:
            seconds, text = run_commands(commands, self.env(config), self.args.timeout, what)
        after = self.console.stats()
        lines = text.strip().splitlines() if not self.args.task_logs else []
        if lines:
            log(f"--- {what}: stderr ---\n" + "\n".join(lines))
        rows = check_rows(self.db, len(task_args), what)

        def delta(name: str) -> int:
            return after.get(name, 0) - before.get(name, 0)

        run = Run(
            config, round_, len(task_args), seconds, rows, sampled.sessions, sampled.waiting,
            delta("total_wait_time") / 1000, delta("total_query_count"),
            delta("total_xact_count"), others, lines,
        )  # fmt: skip
        note = f", others busy {others:.0%} before" if others is not None else ""
        if config.variant.pooled:
            note += (
                f"; PgBouncer: {run.transactions:,} transactions, {run.queries:,} queries,"
                f" waited {run.wait_ms:.1f} ms, at most {run.waiting} client(s) waiting"
            )
        log(
            f"  {what}: {run.tasks:,} in {seconds:.2f} s ({run.rate:,.0f}/s), busy span"
            f" {rows.span:.2f} s, at most {run.sessions} session(s){note}"
        )
        return run

    def rounds(self, configs: Sequence[Config], task_args: Sequence[dict[str, Any]]) -> list[Run]:
        """Every configuration once a round, the order reversed every other round."""
        runs = []
        for round_ in range(self.args.rounds):
            order = list(configs) if round_ % 2 == 0 else list(reversed(configs))
            log(f"round {round_ + 1} of {self.args.rounds} (load {load()})")
            for config in order:
                runs.append(self.drain(config, round_, task_args))
        return runs


# --- the report ------------------------------------------------------------------------


def of(runs: Sequence[Run], config: Config) -> list[Run]:
    """The runs of ``config``, in round order."""
    return sorted((r for r in runs if r.config == config), key=lambda r: r.round)


def ratios(runs: Sequence[Run], config: Config, base: Config, busy: bool = False) -> str:
    """Median jobs/s of ``config`` over ``base``'s, then each round's ratio in brackets."""

    def rate(run: Run) -> float:
        return run.span_rate if busy else run.rate

    mine, theirs = of(runs, config), of(runs, base)
    ratio = statistics.median(map(rate, mine)) / statistics.median(map(rate, theirs))
    if len(mine) == 1:
        return f"{ratio:.3f}"
    rounds = ", ".join(f"{rate(a) / rate(b):.2f}" for a, b in zip(mine, theirs, strict=True))
    return f"{ratio:.3f} [{rounds}]"


def table(
    runs: list[Run], configs: list[Config], workers: int, args: argparse.Namespace
) -> list[str]:
    """The section of one worker count: a row per variant."""
    mine = [c for c in configs if c.workers == workers]
    shares = [r.others * 100 for c in mine for r in of(runs, c) if r.others is not None]
    out = [
        f"## Drain of {args.tasks:,} no-op tasks by {workers} x `jobq worker --concurrency"
        f" {args.concurrency} --burst`",
        "",
    ]
    if shares:
        out += [
            f"Other work kept {spread(shares, '{:.0f}')} % of the CPU busy just before the"
            " runs (/proc/stat over 0.5 s while the benchmark ran nothing).",
            "",
        ]
    out += [
        "| variant | URL | jobs/s (spawn to exit) | seconds | busy span jobs/s"
        " | vs (a), spawn to exit | vs (a), busy span | sessions, most | PgBouncer: clients"
        " waiting, most / waited ms | PgBouncer: queries a task |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    base = next((c for c in mine if c.variant.key == "a"), None)
    for config in mine:
        rs = of(runs, config)
        if config.variant.pooled:
            waits = f"{max(r.waiting for r in rs)} / {spread([r.wait_ms for r in rs], '{:.1f}')}"
            queries = spread([r.queries / r.tasks for r in rs], "{:.3f}")
        else:
            waits = queries = "-"
        out.append(
            f"| ({config.variant.key}) {config.variant.label} | {config.variant.shown()}"
            f" | {spread([r.rate for r in rs], '{:,.0f}')} | {spread([r.seconds for r in rs])}"
            f" | {spread([r.span_rate for r in rs], '{:,.0f}')}"
            f" | {ratios(runs, config, base) if base else '-'}"
            f" | {ratios(runs, config, base, busy=True) if base else '-'}"
            f" | {spread([r.sessions for r in rs], '{:.0f}')} | {waits} | {queries} |"
        )
    return out


def stderr_notes(runs: list[Run]) -> list[str]:
    """What the workers wrote to stderr at --log-level warning, by configuration."""
    out = []
    for run in runs:
        if run.stderr:
            out.append(f"- round {run.round + 1}, {run.config.label}: {len(run.stderr)} line(s):")
            out += [f"    {line}" for line in run.stderr[:10]]
    return ["Worker stderr (warnings and errors):", "", *(out or ["- none"])]


# --- main ------------------------------------------------------------------------------


def csv_ints(text: str) -> list[int]:
    """``1,4`` as [1, 4] (argparse type)."""
    values = [int(x) for x in text.split(",") if x.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"positive integers, comma-separated: {text!r}")
    return values


def variant_keys(text: str) -> list[str]:
    """``a,c`` as ['a', 'c'] (argparse type): variants among a-d."""
    keys = [x.strip() for x in text.split(",") if x.strip()]
    known = {v.key for v in VARIANTS}
    if not keys or not set(keys) <= known:
        raise argparse.ArgumentTypeError(f"variants among {','.join(sorted(known))}: {text!r}")
    return keys


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line's options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20_000, help="no-op tasks a drain")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each configuration")
    parser.add_argument("--workers", type=csv_ints, default=[1, 4],
                        help="worker processes a drain, comma-separated (default 1,4)")  # fmt: skip
    parser.add_argument("--concurrency", type=int, default=32, help="slots a worker")
    parser.add_argument("--variants", type=variant_keys, default=[v.key for v in VARIANTS],
                        help="of a,b,c,d, those to run (default all; (a): the base)")  # fmt: skip
    parser.add_argument("--pool-size", type=int, default=20,
                        help="PgBouncer's default_pool_size (default 20)")  # fmt: skip
    parser.add_argument("--task-logs", action="store_true",
                        help="workers log each task (else --log-level warning)")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds a drain may take")
    parser.add_argument("--quiet-below", type=float, default=None, metavar="PERCENT",
                        help="before each run, wait (up to 120 s) until other work keeps"
                        " under PERCENT %% of the CPU busy")  # fmt: skip
    parser.add_argument("--label", default="", help="a name for this run, in the report")
    parser.add_argument("--database-url", default=DEFAULT_POSTGRES_URL,
                        help="the PostgreSQL server (its database is used only to create and"
                        " drop the run's own, and to read statistics)")  # fmt: skip
    args = parser.parse_args(argv)
    for name in ("rounds", "concurrency", "pool_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.tasks < 2:
        parser.error("--tasks must be at least 2")
    if sa.make_url(args.database_url).get_backend_name() != "postgresql":
        parser.error("--database-url: PgBouncer stands in front of PostgreSQL only")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the drains, print the report; 0 (every failed check raises)."""
    args = parse(argv)
    began, load_before = time.monotonic(), load()
    configs = [
        Config(variant, workers)
        for workers in args.workers
        for variant in VARIANTS
        if variant.key in args.variants
    ]
    task_args = [{"n": i} for i in range(args.tasks)]
    with (
        tempfile.TemporaryDirectory(prefix="jobq-pooler-") as tmp,
        pgbouncer_server.running(args.database_url, pool_size=args.pool_size) as bouncer,
    ):
        log(f"PgBouncer on port {bouncer.port} in front of database {bouncer.database}")
        db = Database(bouncer.direct_url, "PostgreSQL")  # migrated on the server's own URL
        server = Server(args.database_url, bouncer.database)
        user = sa.make_url(bouncer.direct_url).username or "postgres"
        console = Console(bouncer.port, user, bouncer.database)
        try:
            version = server.version()
            bench = Bench(db, bouncer, server, console, os.path.join(tmp, "pycache"), args)
            bench.warm_up()
            runs = bench.rounds(configs, task_args)
        finally:
            console.close()
            server.close()
            db.store.dispose()
    out = [
        f"pooler.py at {code_state()}{f' ({args.label})' if args.label else ''}; {version};"
        f" {pgbouncer_version()}, pool_mode transaction, default_pool_size {args.pool_size};"
        f" {os.cpu_count()} cores; Python {platform.python_version()}; {args.rounds} round(s),"
        " configurations interleaved;"
        f" workers at {'INFO (task logs on)' if args.task_logs else '--log-level warning'}",
        f"load average (1/5/15 min): {load_before} at the start, {load()} at the end;"
        f" {time.monotonic() - began:.0f} s in all",
        "",
    ]
    for workers in args.workers:
        out += [*table(runs, configs, workers, args), ""]
    out += stderr_notes(runs)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
