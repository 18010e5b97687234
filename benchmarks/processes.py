#!/usr/bin/env python
"""`jobq worker --processes N` and `--pool processes`, with real worker processes.

Three sections (``--only``, default all), each run ``--rounds`` times with its
configurations interleaved round by round (their order reversed every other round),
reported as medians with the minimum and maximum:

1. ``drain``: ``--tasks`` (50,000) no-op sync tasks, enqueued beforehand with
   ``enqueue_many`` and ANALYZEd (untimed), drained by ``jobq worker --processes N
   --concurrency 32 --burst`` for N in ``--processes`` (1, 2, 4), timed from the
   supervisor command's spawn to its exit; and, for comparison, by N separate ``jobq
   worker --concurrency 32 --burst`` commands started here at once, timed from the first
   spawn to the last exit, so that the supervisor's own cost shows. (``--processes 1``
   starts no supervisor: the command runs the worker itself, as a plain ``jobq worker``
   does.) Each configuration also starts and exits once per round on an empty queue.
2. ``cpu``: ``--cpu-tasks`` (200) runs of a pure-Python loop calibrated here to take
   ``--cpu-ms`` (50) ms on one core: ``--processes 1`` against ``--processes 2`` (threads
   pool, ``--cpu-concurrency`` 4 each), and ``--processes 1 --concurrency 2`` with
   ``--pool processes`` against ``--pool threads``. Reported: seconds and speed-ups.
3. ``pool``: ``--pool-tasks`` (10,000) no-op sync tasks drained by ``--processes 1
   --concurrency 8`` with ``--pool threads`` and with ``--pool processes``: jobs/s of
   each, and the difference per task in microseconds, ``(t_processes - t_threads) / n``.

After every drain all tasks must be ``done`` at attempt 1 (each ran once). The report
also gives, from the rows, the time from the first capture to the last end ("busy
span"; section 3 also from the first end to the last, which leaves out the pool's start)
and, in section 2, the runs in flight on average (the sum of each task's capture-to-end
over the busy span). A thread reads ``jobq_workers`` every 50 ms during each drain, to
count the worker processes that registered and those that named a supervisor (a done
row no longer names its worker). Workers run at ``--log-level warning`` unless
``--task-logs``. They get their own byte-code cache (PYTHONPYCACHEPREFIX, a temporary
directory filled by a warm-up start), as an installed package has its modules compiled.
Just before each timed drain the script reads /proc/stat over 0.5 s while it runs
nothing, and reports how much of the CPU other work kept busy; with ``--quiet-below P``
it first waits (up to 120 s a run) until that is under P %.

The database is PostgreSQL by default, in a schema of its own (``bench_processes_PID``),
dropped at the end. ``--database-url`` may name another PostgreSQL database, a MariaDB /
MySQL server (a database of the same name is created there and dropped), or ``sqlite``
(a temporary file). The report goes to stdout, progress to stderr.

    .venv/bin/python benchmarks/processes.py                 # all, 3 rounds: ~4 min here
    .venv/bin/python benchmarks/processes.py --only drain --rounds 5 --quiet-below 25
    .venv/bin/python benchmarks/processes.py --only cpu --only pool --rounds 3
    .venv/bin/python benchmarks/processes.py --database-url sqlite --tasks 20000
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


from benchmarks._drain_rows import DrainRates, Rows, check_rows, fill
from benchmarks._machine import Poller, load, quiet_moment
from benchmarks.harness import (
    DEFAULT_POSTGRES_URL,
    Database,
    csv_ints,
    database,
    git_state,
    log,
    reset,
    run_commands,
    spread,
    worker_env,
)
from benchmarks.processes_app import calibrate

APP_PATH = "benchmarks.processes_app:app"
NOOP_TASK = "bench.proc.noop"  # benchmarks/processes_app.py
CPU_TASK = "bench.proc.cpu"
# The PostgreSQL schema / MariaDB database of the run, named by our pid.
NAME = f"bench_processes_{os.getpid()}"
SECTIONS = ("drain", "cpu", "pool")


# --- the database ----------------------------------------------------------------------


def server_version(db: Database) -> str:
    """The database's name and version, e.g. 'PostgreSQL 15.20'."""
    sql = "SELECT sqlite_version()" if db.kind == "sqlite" else "SELECT version()"
    with db.store.engine.connect() as conn:
        version = str(conn.exec_driver_sql(sql).scalar())
    if db.kind == "postgresql":
        return " ".join(version.split()[:2])
    return f"{db.label} {version.split()[0]}"


class Registrations(Poller):
    """Which workers registered (jobq_workers) while a drain ran, looked at every
    ``every`` s from a thread: a done task's row no longer names its worker."""

    def __init__(self, db: Database, every: float = 0.05) -> None:
        super().__init__(every)
        self.db = db
        #: worker_id -> its supervisor's pid (None: not supervised).
        self.seen: dict[str, int | None] = {}

    def look(self) -> None:
        """The workers registered now, with their supervisors."""
        with self.db.store.engine.connect() as conn:
            rows = conn.exec_driver_sql("SELECT worker_id, supervisor_pid FROM jobq_workers")
            self.seen.update({worker_id: pid for worker_id, pid in rows})

    @property
    def supervised(self) -> int:
        """How many of the workers seen named a supervisor."""
        return sum(pid is not None for pid in self.seen.values())


# --- worker commands -------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    """One way of running the workers: ``processes`` x ``concurrency`` slots, sync tasks
    on ``pool`` (None: the default, threads, not given), under one supervisor command
    (``supervised``) or as separate commands started by the benchmark."""

    label: str
    processes: int
    concurrency: int
    pool: str | None = None
    supervised: bool = True

    def commands(self, extra: Sequence[str]) -> list[list[str]]:
        """The argv of each command to start (one, or ``processes`` of them)."""
        base = [
            sys.executable, "-m", "jobq.cli", "worker", "--app", APP_PATH, "--burst",
            "--concurrency", str(self.concurrency),
            *(["--pool", self.pool] if self.pool else []), *extra,
        ]  # fmt: skip
        if self.supervised:
            return [[*base, "--processes", str(self.processes)]]
        return [base for _ in range(self.processes)]

    def shown(self) -> str:
        """The command line, shortened to its options, for the report."""
        options = f"--concurrency {self.concurrency}"
        if self.pool:
            options += f" --pool {self.pool}"
        if self.supervised:
            return f"`jobq worker --processes {self.processes} {options} --burst`"
        return f"{self.processes} x `jobq worker {options} --burst`"


# --- runs ------------------------------------------------------------------------------


@dataclass
class Run(DrainRates):
    """One timed drain of one configuration."""

    section: str
    config: Config
    round: int
    tasks: int
    seconds: float
    rows: Rows
    workers: int  # worker processes seen registered during the drain
    supervised: int  # of those, how many named a supervisor
    empty: float | None = None  # start and exit on an empty queue, seconds
    others: float | None = None  # share of the CPU others kept busy just before the run


@dataclass
class Bench:
    """The run's database, worker environment and options."""

    db: Database
    env: dict[str, str]
    args: argparse.Namespace

    @property
    def extra(self) -> list[str]:
        """Options every worker command gets."""
        return [] if self.args.task_logs else ["--log-level", "warning"]

    def drain(
        self,
        section: str,
        config: Config,
        round_: int,
        task: str,
        task_args: Sequence[dict[str, Any]],
        *,
        empty: bool = False,
        durations: bool = False,
    ) -> Run:
        """Fill the table, then time ``config`` draining it; check the rows."""
        what = f"{section} round {round_ + 1}: {config.label}"
        commands = config.commands(self.extra)
        empty_s = None
        if empty:
            reset(self.db.store)
            empty_s, _ = run_commands(commands, self.env, self.args.timeout, what + " (empty)")
        fill(self.db, task, task_args)
        below = self.args.quiet_below
        others = quiet_moment(None if below is None else below / 100)
        with Registrations(self.db) as seen:
            seconds, text = run_commands(commands, self.env, self.args.timeout, what)
        if text.strip() and not self.args.task_logs:
            log(f"--- {what}: stderr ---\n{text.rstrip()}")
        rows = check_rows(self.db, len(task_args), what, durations=durations)
        run = Run(
            section, config, round_, len(task_args), seconds, rows, len(seen.seen),
            seen.supervised, empty_s, others,
        )  # fmt: skip
        note = f", empty queue {empty_s:.2f} s" if empty_s is not None else ""
        note += f", others busy {others:.0%} before" if others is not None else ""
        log(
            f"  {what}: {run.tasks:,} in {seconds:.2f} s ({run.rate:,.0f}/s), busy span"
            f" {rows.span:.2f} s, {run.workers} worker(s) registered"
            f" ({run.supervised} supervised){note}"
        )
        return run

    def rounds(
        self,
        section: str,
        configs: Sequence[Config],
        task: str,
        task_args: Sequence[dict[str, Any]],
        *,
        empty: bool = False,
        durations: bool = False,
    ) -> list[Run]:
        """Every configuration once a round, the order reversed every other round."""
        runs = []
        for round_ in range(self.args.rounds):
            order = list(configs) if round_ % 2 == 0 else list(reversed(configs))
            log(f"{section}: round {round_ + 1} of {self.args.rounds} (load {load()})")
            for config in order:
                runs.append(
                    self.drain(
                        section, config, round_, task, task_args, empty=empty, durations=durations
                    )
                )
        return runs


# --- sections --------------------------------------------------------------------------


def drain_configs(args: argparse.Namespace) -> list[Config]:
    """Section 1: for each N, one supervisor command and N separate commands."""
    configs = []
    for n in args.processes:
        c = args.concurrency
        configs.append(Config(f"--processes {n}", n, c))
        configs.append(Config(f"{n} separate", n, c, supervised=False))
    return configs


def cpu_configs(args: argparse.Namespace) -> list[Config]:
    """Section 2: two pairs, each slower side first (the report divides in that order)."""
    c = args.cpu_concurrency
    return [
        Config(f"--processes 1 --concurrency {c} (threads)", 1, c, "threads"),
        Config(f"--processes 2 --concurrency {c} (threads)", 2, c, "threads"),
        Config("--processes 1 --concurrency 2 --pool threads", 1, 2, "threads"),
        Config("--processes 1 --concurrency 2 --pool processes", 1, 2, "processes"),
    ]


def pool_configs(args: argparse.Namespace) -> list[Config]:
    """Section 3: threads first, then processes."""
    c = args.pool_concurrency
    return [
        Config("--pool threads", 1, c, "threads"),
        Config("--pool processes", 1, c, "processes"),
    ]


# --- the report ------------------------------------------------------------------------


def of(runs: Sequence[Run], config: Config) -> list[Run]:
    """The runs of ``config``, in round order."""
    return [r for r in runs if r.config == config]


def others_line(runs: Sequence[Run]) -> list[str]:
    """What other work kept busy before the runs, as a line of the report (if known)."""
    shares = [r.others * 100 for r in runs if r.others is not None]
    if not shares:
        return []
    return [
        f"Other work kept {spread(shares, '{:.0f}')} % of the CPU busy just before the runs"
        " (/proc/stat over 0.5 s while the benchmark ran nothing).",
        "",
    ]


def median_seconds(runs: Sequence[Run], config: Config) -> float:
    """The median spawn-to-exit seconds of ``config``'s runs."""
    return statistics.median(r.seconds for r in of(runs, config))


def registered(runs: Sequence[Run]) -> str:
    """Worker processes seen registered in each run (and how many named a supervisor)."""
    seen = sorted({(r.workers, r.supervised) for r in runs})
    return " / ".join(f"{n} ({s} supervised)" for n, s in seen)


def drain_report(runs: list[Run], configs: list[Config], args: argparse.Namespace) -> list[str]:
    """Section 1's table, the supervisor's cost against separate processes, and scaling."""
    out = [
        f"## 1. Drain of {args.tasks:,} no-op tasks, {args.concurrency} slots a process"
        " (spawn to exit)",
        "",
        *others_line(runs),
        "| configuration | command | jobs/s | seconds | busy span jobs/s | empty queue s"
        " | workers registered |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for config in configs:
        mine = of(runs, config)
        out.append(
            f"| {config.label} | {config.shown()} | {spread([r.rate for r in mine], '{:,.0f}')} "
            f"| {spread([r.seconds for r in mine])} "
            f"| {spread([r.span_rate for r in mine], '{:,.0f}')} "
            f"| {spread([r.empty for r in mine if r.empty is not None])} "
            f"| {registered(mine)} |"
        )
    out += ["", "Supervisor against separate processes (medians; round by round in brackets):", ""]
    for n in args.processes:
        sup, sep = (c for c in configs if c.processes == n)
        diff = median_seconds(runs, sup) - median_seconds(runs, sep)
        rounds = [a.seconds - b.seconds for a, b in zip(of(runs, sup), of(runs, sep), strict=True)]
        empty = statistics.median(r.empty or 0 for r in of(runs, sup)) - statistics.median(
            r.empty or 0 for r in of(runs, sep)
        )
        note = " (the same command: --processes 1 starts no supervisor)" if n == 1 else ""
        out.append(
            f"- {n} process(es): supervisor {diff:+.2f} s on the drain"
            f" [{', '.join(f'{x:+.2f}' for x in rounds)}], {empty:+.2f} s on an empty queue"
            f"{note}"
        )
    base = [c for c in configs if c.supervised and c.processes == min(args.processes)]
    if base:
        out += ["", f"Scaling against {base[0].label} (medians of jobs/s):", ""]
        ref = statistics.median(r.rate for r in of(runs, base[0]))
        for config in configs:
            rate = statistics.median(r.rate for r in of(runs, config))
            out.append(f"- {config.label}: {rate / ref:.2f}x")
    return out


def cpu_report(
    runs: list[Run], configs: list[Config], args: argparse.Namespace, iterations: int, ms: float
) -> list[str]:
    """Section 2's table and its two speed-ups; ``ms``: one task's calibrated length."""
    serial = args.cpu_tasks * ms / 1000
    out = [
        f"## 2. CPU-bound: {args.cpu_tasks} runs of a {ms:.1f} ms pure-Python loop"
        f" ({iterations:,} iterations; {serial:.1f} s of work on one core)",
        "",
        *others_line(runs),
        "| configuration | command | seconds (spawn to exit) | busy span s"
        " | cores' worth of work in the busy span | capture-to-end of a task, median ms"
        " | runs in flight, mean |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for config in configs:
        mine = of(runs, config)
        task_ms = [statistics.median(r.rows.task_seconds) * 1000 for r in mine]
        in_flight = [sum(r.rows.task_seconds) / r.rows.span for r in mine]
        out.append(
            f"| {config.label} | {config.shown()} | {spread([r.seconds for r in mine])} "
            f"| {spread([r.rows.span for r in mine])} "
            f"| {spread([serial / r.rows.span for r in mine])} | {spread(task_ms, '{:.0f}')} "
            f"| {spread(in_flight)} |"
        )
    out += ["", "Speed-ups (ratio of the medians; round by round in brackets):", ""]
    for slow, fast in ((configs[0], configs[1]), (configs[2], configs[3])):
        pairs = list(zip(of(runs, slow), of(runs, fast), strict=True))
        ratio = median_seconds(runs, slow) / median_seconds(runs, fast)
        busy = statistics.median(r.rows.span for r in of(runs, slow)) / statistics.median(
            r.rows.span for r in of(runs, fast)
        )
        out.append(
            f"- {fast.label} against {slow.label}: **{ratio:.2f}x** spawn to exit"
            f" [{', '.join(f'{a.seconds / b.seconds:.2f}' for a, b in pairs)}],"
            f" {busy:.2f}x on the busy spans"
            f" [{', '.join(f'{a.rows.span / b.rows.span:.2f}' for a, b in pairs)}]"
        )
    return out


def pool_report(runs: list[Run], configs: list[Config], args: argparse.Namespace) -> list[str]:
    """Section 3's table and the difference a task between the two pools."""
    n = args.pool_tasks
    threads, processes = configs
    out = [
        f"## 3. What a run costs in the process pool: {n:,} no-op sync tasks,"
        f" --processes 1 --concurrency {args.pool_concurrency}",
        "",
        *others_line(runs),
        "| pool | command | jobs/s | seconds | busy span s | first end to last end s"
        " | jobs/s, first end to last end |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for config in configs:
        mine = of(runs, config)
        out.append(
            f"| {config.pool} | {config.shown()} | {spread([r.rate for r in mine], '{:,.0f}')} "
            f"| {spread([r.seconds for r in mine])} | {spread([r.rows.span for r in mine])} "
            f"| {spread([r.rows.ends for r in mine])} "
            f"| {spread([(r.tasks - 1) / r.rows.ends for r in mine], '{:,.0f}')} |"
        )
    pairs = list(zip(of(runs, threads), of(runs, processes), strict=True))
    wall = [(p.seconds - t.seconds) / n * 1e6 for t, p in pairs]
    diff = (median_seconds(runs, processes) - median_seconds(runs, threads)) / n * 1e6
    busy = [(p.rows.span - t.rows.span) / n * 1e6 for t, p in pairs]
    ends = [(p.rows.ends - t.rows.ends) / (n - 1) * 1e6 for t, p in pairs]
    out += [
        "",
        f"- (t_processes - t_threads) / n, spawn to exit: **{diff:+.0f} µs a task** (of the"
        f" medians); round by round {', '.join(f'{x:+.0f}' for x in wall)} µs",
        f"- the same on the busy spans: {spread(busy, '{:+.0f}')} µs a task",
        f"- the same from the first end to the last (without the pool's start):"
        f" {spread(ends, '{:+.0f}')} µs a task",
    ]
    return out


# --- main ------------------------------------------------------------------------------


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line's options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=SECTIONS, action="append",
                        help="a section to run (repeatable; default all)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3, help="runs of each configuration")
    parser.add_argument("--tasks", type=int, default=50_000, help="section 1's no-op tasks")
    parser.add_argument("--processes", type=csv_ints, default=[1, 2, 4],
                        help="section 1's process counts (default 1,2,4)")  # fmt: skip
    parser.add_argument("--concurrency", type=int, default=32, help="section 1's slots a process")
    parser.add_argument("--cpu-tasks", type=int, default=200, help="section 2's tasks")
    parser.add_argument("--cpu-ms", type=float, default=50.0, help="section 2's task length")
    parser.add_argument("--cpu-iterations", type=int, default=None,
                        help="section 2's loop turns (default: calibrated)")  # fmt: skip
    parser.add_argument("--cpu-concurrency", type=int, default=4,
                        help="section 2's slots a process, --processes 1 vs 2")  # fmt: skip
    parser.add_argument("--pool-tasks", type=int, default=10_000, help="section 3's tasks")
    parser.add_argument("--pool-concurrency", type=int, default=8, help="section 3's slots")
    parser.add_argument("--task-logs", action="store_true",
                        help="workers log each task (else --log-level warning)")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds a drain may take")
    parser.add_argument("--quiet-below", type=float, default=None, metavar="PERCENT",
                        help="before each run, wait (up to 120 s) until other work keeps"
                        " under PERCENT %% of the CPU busy")  # fmt: skip
    parser.add_argument("--database-url", default=DEFAULT_POSTGRES_URL,
                        help="PostgreSQL (default; a schema of the run's own), MariaDB/MySQL"
                        " (a database of its own on that server) or 'sqlite' (a temporary"
                        " file)")  # fmt: skip
    args = parser.parse_args(argv)
    for name in ("rounds", "concurrency", "cpu_tasks", "cpu_concurrency", "pool_concurrency"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    for name in ("tasks", "pool_tasks"):
        if getattr(args, name) < 2:
            parser.error(f"--{name.replace('_', '-')} must be at least 2")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the sections asked for, print the report; 0 (every failed check raises)."""
    args = parse(argv)
    sections = [s for s in SECTIONS if s in (args.only or SECTIONS)]
    began, load_before = time.monotonic(), load()
    iterations, one_ms = 0, 0.0
    if "cpu" in sections:
        if args.cpu_iterations:
            iterations = args.cpu_iterations
            per_turn = calibrate(args.cpu_ms / 1000)[1]
        else:
            iterations, per_turn = calibrate(args.cpu_ms / 1000)
        one_ms = iterations * per_turn * 1000
        log(f"cpu task: {iterations:,} iterations, about {one_ms:.1f} ms here")
    out: list[str] = []
    loads = []
    with (
        tempfile.TemporaryDirectory(prefix="jobq-processes-") as tmp,
        database(args.database_url, tmp, NAME) as db,
    ):
        version = server_version(db)
        bench = Bench(db, worker_env(db.url, os.path.join(tmp, "pycache")), args)
        log("warm-up: one worker start on an empty queue (fills the byte-code cache)")
        reset(db.store)
        run_commands(Config("warm-up", 1, 1).commands(bench.extra), bench.env, 120, "warm-up")
        if "drain" in sections:
            configs = drain_configs(args)
            before = load()
            noop_args = [{"n": i} for i in range(args.tasks)]
            runs = bench.rounds("drain", configs, NOOP_TASK, noop_args, empty=True)
            loads.append(f"drain {before} -> {load()}")
            out += [*drain_report(runs, configs, args), ""]
        if "cpu" in sections:
            configs = cpu_configs(args)
            before = load()
            cpu_args = [{"iterations": iterations, "n": i} for i in range(args.cpu_tasks)]
            runs = bench.rounds("cpu", configs, CPU_TASK, cpu_args, durations=True)
            loads.append(f"cpu {before} -> {load()}")
            out += [*cpu_report(runs, configs, args, iterations, one_ms), ""]
        if "pool" in sections:
            configs = pool_configs(args)
            before = load()
            noop_args = [{"n": i} for i in range(args.pool_tasks)]
            runs = bench.rounds("pool", configs, NOOP_TASK, noop_args)
            loads.append(f"pool {before} -> {load()}")
            out += [*pool_report(runs, configs, args), ""]
    header = [
        f"processes.py at {git_state()}; {version};"
        f" {os.cpu_count()} cores; Python {platform.python_version()};"
        f" {args.rounds} round(s), configurations interleaved;"
        f" workers at {'INFO (task logs on)' if args.task_logs else '--log-level warning'}",
        f"load average (1/5/15 min): {load_before} at the start, {load()} at the end;"
        f" by section: {'; '.join(loads)}; {time.monotonic() - began:.0f} s in all",
        "",
    ]
    print("\n".join(header + out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
