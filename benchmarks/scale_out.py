#!/usr/bin/env python
"""Scale-out: worker groups in network namespaces against one PostgreSQL, direct and
through PgBouncer, 1 to 16 processes; and 200 idle workers beside 4 busy ones.

Each group of workers is one ``jobq worker --processes M --concurrency 32`` command run
with ``ip netns exec`` in a namespace of its own (benchmarks/_netns.py: a veth pair to the
host, 127.77.k.0/30), as if on a host of its own; N processes are ``--per-namespace`` (2)
a namespace, so 16 processes are 8 namespaces. They reach a PostgreSQL and a PgBouncer
(transaction pooling, pool of ``--pool-size`` 20) that the benchmark starts for itself
(benchmarks/_servers.py) at their namespace's host end:

- ``direct``: the server's own URL; each worker LISTENs there;
- ``pooled``: PgBouncer with ``?jobq_pooler=transaction``, and ``--listen-url`` the
  server's own URL (docs/how-to/pgbouncer.md's set-up for many workers).

A run empties the tasks table (TRUNCATE, then ANALYZE: every run starts from the
statistics of an empty table), starts its workers idle and waits until all have
registered (and LISTEN), then:

1. steady load (``--steady-rate`` 1,000 tasks/s for ``--steady-seconds`` 10, in
   enqueue_many calls every 50 ms, queue ``steady``): latency p50 / p99 from enqueue
   (created_at) to start (started_at), from the rows;
2. backlog: ``--tasks`` (20,000) no-op tasks in one transaction of the benchmark's
   (enqueue_many with ``connection=``, as ``jobq enqueue --file`` does: jobq refreshes the
   table's statistics in it), queue ``backlog``, drained by the idle workers woken at its
   commit: jobs/s = tasks / (last end - first start) by the rows; latency enqueue to end
   (finished_at), whose p99 is about the drain's length; tasks a capture statement (a
   capture stamps its tasks' started_at with its transaction's now()).

The enqueues go through a Store of the run's own, so that jobq's count of what a Store
enqueued in bulk (a refresh at 10,000, then at each tenfold) starts afresh each run.
Around each phase: CPU seconds of the PostgreSQL tree (postmaster, its reaped and live
children), of PgBouncer, of the worker commands' trees and of the benchmark, and the
machine's busy time (/proc/stat), whose remainder is other work. While the phases run,
every 0.2 s: the measured database's server sessions (the benchmark's own left out),
their LISTENs and client addresses, PgBouncer's clients and servers; the most seen. The
scale points run once a round for ``--rounds`` (2), both modes side by side, the order of
the modes reversed every other round; the report gives medians (minimum-maximum).

Then ``--idle`` (200) idle processes (``--queues idle``, which gets no task; ``--idle-groups``
10 namespaces of ``--processes 20``, jobq's default concurrency) through PgBouncer beside 4
busy ones (one namespace, ``--processes 4``, pooled as above): first the 4 alone, then
with 200 polling idle ones (no --listen-url), then with 200 idle ones with
``--listen-url``. Before the busy ones start, a window of ``--idle-window`` (20) s after
11 s of settling measures the idle ones alone: transactions a second (pg_stat_database, and
PgBouncer's SHOW STATS), server CPU and connections.

After each run every task must be done at attempt 1, one row per enqueue; the script goes
on and exits 1 at the end if one was lost or ran twice (2 on any other failure, 0
otherwise). The whole run is bounded by ``--max-minutes`` (30) and every wait by a
deadline; the namespaces, servers and database are removed on every exit. Must run as
root. Writes ``--json`` (benchmarks/scale_out.json), then draws benchmarks/scale_out.png
with scale_out_plot.py in benchmarks/.venv-peers (matplotlib; see peers.sh) if it exists.

    .venv/bin/python benchmarks/scale_out.py                        # about 10 min here
    .venv/bin/python benchmarks/scale_out.py --processes 1,4 --idle 0 --steady-rate 0
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType
from typing import Any

if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sqlalchemy as sa

import jobq
from benchmarks import _netns
from benchmarks._bouncer import Console, Server, wait_for
from benchmarks._machine import cpu_ticks, load, quiet_moment
from benchmarks._scale_report import report
from benchmarks._scale_run import (
    Fleet,
    Group,
    IdleWindow,
    Phase,
    Point,
    Run,
    Sampler,
    Watch,
    own_url,
)
from benchmarks._servers import (
    TICK,
    HostedBouncer,
    HostedPostgres,
    cpu_seconds,
    hosted_bouncer,
    hosted_postgres,
    on,
    tree_cpu_seconds,
)
from benchmarks.harness import (
    PEERS_PYTHON,
    ROOT,
    SYNC_TASK,
    Database,
    analyze,
    csv_ints,
    log,
    reset,
    run_commands,
    worker_env,
)

HERE = Path(__file__).resolve().parent
PACE = 0.05  # seconds between the steady phase's enqueues
SETTLE = 11.0  # idle workers' start out of the idle window (see idle_load.py)
STDERR_KEPT = 20  # workers' stderr lines kept a run


@dataclass
class Bench:
    """The namespaces, servers, readers and options of the whole benchmark."""

    namespaces: list[_netns.Namespace]
    postgres: HostedPostgres
    bouncer: HostedBouncer
    url: str  # the measured database's own URL, for the benchmark's sessions
    server: Server
    console: Console
    pycache: str
    args: argparse.Namespace

    def groups(self, point: Point) -> tuple[list[Group], list[Group]]:
        """The busy groups (namespaces 0, 1, ...) and the idle ones (after them)."""
        per = self.args.per_namespace
        sizes = [per] * (point.processes // per) + [point.processes % per]
        pooled, concurrency = point.mode == "pooled", self.args.concurrency
        busy = [
            self.group(self.namespaces[k], n, pooled, True, None, concurrency)
            for k, n in enumerate(s for s in sizes if s)
        ]
        idle: list[Group] = []
        if point.idle:
            each = point.idle // self.args.idle_groups
            for k in range(self.args.idle_groups):
                ns = self.namespaces[len(busy) + k]
                idle.append(self.group(ns, each, True, point.idle_listen, "idle", None))
        return busy, idle

    def group(
        self, ns: _netns.Namespace, n: int, pooled: bool, listen: bool, queue: str | None,
        concurrency: int | None,
    ) -> Group:  # fmt: skip
        """A group in ``ns``, at its host end: direct, or pooled (+ --listen-url)."""
        direct = on(self.bouncer.direct_url, ns.host_address)
        if not pooled:
            return Group(ns, n, direct, None, queue, concurrency)
        url = on(self.bouncer.pooled_url, ns.host_address)
        return Group(ns, n, url, direct if listen else None, queue, concurrency)

    @contextlib.contextmanager
    def bracket(self, phase: Phase, fleets: Sequence[Fleet]) -> Iterator[None]:
        """CPU over the block, into ``phase``: PostgreSQL's, PgBouncer's, the workers',
        the benchmark's own and the machine's (all cores busy)."""
        pm, pgb = self.postgres.postmaster, self.bouncer.pid
        pids = [proc.pid for fleet in fleets for proc in fleet.procs]
        m0, t0, own0 = cpu_ticks(), time.monotonic(), time.process_time()
        s0, b0, w0 = tree_cpu_seconds(pm), cpu_seconds(pgb), tree_cpu_seconds(*pids)
        yield
        phase.seconds = time.monotonic() - t0
        phase.server_cpu = tree_cpu_seconds(pm) - s0
        phase.bouncer_cpu = cpu_seconds(pgb) - b0
        phase.workers_cpu = tree_cpu_seconds(*pids) - w0
        phase.own_cpu = time.process_time() - own0
        m1 = cpu_ticks()
        if m0 and m1 and m1[1] > m0[1]:
            phase.machine_busy = (m1[0] - m0[0]) / (m1[1] - m0[1])
            phase.machine_cpu = (m1[0] - m0[0]) / TICK
            ours = phase.server_cpu + phase.bouncer_cpu + phase.workers_cpu + phase.own_cpu
            phase.others_cpu = max(0.0, phase.machine_cpu - ours)

    def steady(self, store: jobq.Store, watch: Watch, fleets: Sequence[Fleet]) -> Phase:
        """Enqueue at --steady-rate for --steady-seconds, wait for the end, audit."""
        ticks = max(1, round(self.args.steady_seconds / PACE))
        batch = max(1, round(self.args.steady_rate * PACE))
        phase = Phase("steady", ticks * batch, 0.0)
        with self.bracket(phase, fleets):
            start = time.monotonic()
            for i in range(ticks):
                time.sleep(max(0.0, start + i * PACE - time.monotonic()))  # the pace
                store.enqueue_many(SYNC_TASK, [{"n": i}] * batch, queue="steady")
            phase.enqueue_rate = phase.tasks / (time.monotonic() - start)
            watch.wait_done("steady", self.args.timeout)
        watch.audit(phase, "started_at")
        return phase

    def drain(self, store: jobq.Store, watch: Watch, fleets: Sequence[Fleet]) -> Phase:
        """Enqueue the backlog in one transaction, wait until it is drained, audit."""
        phase = Phase("backlog", self.args.tasks, 0.0)
        task_args = [{"n": i} for i in range(phase.tasks)]
        with self.bracket(phase, fleets):
            # One transaction of ours, as `jobq enqueue --file` makes: once it holds
            # 10,000 tasks jobq refreshes the statistics in it (ANALYZE), so the workers,
            # woken by its commit, plan for the tasks that wait. Without, on the emptied
            # table, each capture read and sorted the whole backlog (measured with this script).
            with store.engine.begin() as conn:
                store.enqueue_many(SYNC_TASK, task_args, queue="backlog", connection=conn)
            phase.reltuples = watch.reltuples()
            watch.wait_done("backlog", self.args.timeout)
        watch.audit(phase, "finished_at")
        return phase

    def idle_window(self, fleet: Fleet, ready_s: float) -> IdleWindow:
        """The idle workers alone: settle, then measure over --idle-window s."""
        time.sleep(SETTLE)  # their start's statistics flushed before the window
        phase = Phase("idle", 0, 0.0)
        tx0, stats0 = self.server.transactions(), self.console.stats()
        with Sampler(self.server, self.console, every=1.0) as peaks, self.bracket(phase, [fleet]):
            time.sleep(self.args.idle_window)  # the window
            fleet.check_alive()
        tx1, stats1 = self.server.transactions(), self.console.stats()
        return IdleWindow(
            fleet.processes, phase.seconds, ready_s, tx1 - tx0,
            stats1.get("total_xact_count", 0) - stats0.get("total_xact_count", 0),
            stats1.get("total_query_count", 0) - stats0.get("total_query_count", 0),
            phase.server_cpu, phase.bouncer_cpu, peaks,
        )  # fmt: skip

    def warm_up(self) -> None:
        """One worker start in a namespace on an empty queue: fills the byte-code cache,
        and shows a worker gets through from a namespace."""
        log("warm-up: one `jobq worker --burst` in a namespace on an empty queue")
        ns = self.namespaces[0]
        warm = Group(ns, 1, on(self.bouncer.direct_url, ns.host_address))
        run_commands(
            [[*warm.argv(), "--burst"]], worker_env(warm.url, self.pycache), 120, "warm-up"
        )

    def setting(self) -> dict[str, Any]:
        """The server's version and the settings that matter here."""
        names = ("shared_buffers", "fsync", "synchronous_commit", "max_connections")
        return {"server": self.server.version(), **{n: self.server.setting(n) for n in names}}

    def run(self, point: Point, round_: int) -> Run:
        """Start ``point``'s workers, run the phases, stop them; the figures."""
        what = f"round {round_ + 1}: {point.label}"
        # A Store of the run's own: jobq counts the tasks a Store enqueues in bulk (its
        # statistics refresh at 10,000, then at each tenfold), and each run starts that
        # count afresh, as on an emptied table it should. The table's statistics start
        # as those of an empty table.
        store = jobq.Store(self.url)
        try:
            reset(store)
            analyze(store)
            return self._run(point, round_, what, store)
        finally:
            store.dispose()

    def _run(self, point: Point, round_: int, what: str, store: jobq.Store) -> Run:
        """``run``, with the run's Store."""
        store.dispose()  # its sessions closed: the database is to be empty
        self.console.drop_connections()  # every run opens its connections anew
        self.server.wait_until_empty()
        below = self.args.quiet_below
        others = quiet_moment(None if below is None else below / 100)
        busy_groups, idle_groups = self.groups(point)
        watch = Watch(self.bouncer.direct_url)
        fleets: list[Fleet] = []
        stderr: list[str] = []
        idle = None
        try:
            if idle_groups:
                spawned = time.monotonic()
                fleets.append(Fleet(idle_groups, self.pycache, f"{what} (idle)"))
                ready = watch.wait_registered(point.idle, fleets, self.args.start_timeout)
                log(f"  {what}: {point.idle} idle workers registered in {ready:.1f} s")
                idle = self.idle_window(fleets[0], time.monotonic() - spawned)
            fleets.append(Fleet(busy_groups, self.pycache, what))
            n = point.processes + point.idle
            ready_s = watch.wait_registered(n, fleets, self.args.start_timeout)
            listeners = point.processes + (point.idle if point.idle_listen else 0)
            _wait_listening(self.server, listeners, fleets)
            with Sampler(self.server, self.console) as peaks:
                steady = self.steady(store, watch, fleets) if self.args.steady_rate > 0 else None
                backlog = self.drain(store, watch, fleets)
            for fleet in fleets:
                fleet.check_alive()
        finally:
            for fleet in reversed(fleets):
                stderr += fleet.stop()
            watch.close()
        runs_of = _runs_of(busy_groups + idle_groups)
        shape = " + ".join(f"{len(gs)} x `--processes {gs[0].processes}`" for gs in runs_of)
        result = Run(
            point, round_, shape, ready_s, backlog, steady, peaks, idle, others, len(stderr),
            stderr[:STDERR_KEPT],
        )  # fmt: skip
        _progress(what, result)
        return result


def _runs_of(groups: Sequence[Group]) -> list[list[Group]]:
    """Consecutive groups of as many processes, together (for the shape shown)."""
    out: list[list[Group]] = []
    for g in groups:
        if out and out[-1][0].processes == g.processes and out[-1][0].queue == g.queue:
            out[-1].append(g)
        else:
            out.append([g])
    return out


def _wait_listening(server: Server, n: int, fleets: Sequence[Fleet]) -> None:
    """Until ``n`` LISTEN sessions are open (a worker's first wake-up is not missed)."""

    def listening() -> bool:
        for fleet in fleets:
            fleet.check_alive()
        return sum(b.listening for b in server.backends()) >= n

    wait_for(listening, f"{n} LISTEN sessions", timeout=60, every=0.2)


def _progress(what: str, run: Run) -> None:
    """A line on stderr about a finished run."""
    b, s, p = run.backlog, run.steady, run.peaks
    line = (
        f"  {what}: {b.rate:,.0f} jobs/s, p99 enqueue->end {b.p99:.2f} s,"
        f" PostgreSQL {b.server_cpu / b.seconds:.2f} cores, {p.sessions} sessions"
        f" ({p.listening} LISTEN, {p.addresses} addresses)"
    )
    if s:
        line += f"; steady p99 enqueue->start {s.p99 * 1000:.0f} ms at {s.enqueue_rate:,.0f}/s"
    problems = b.problems + (s.problems if s else [])
    log(line + (f"; PROBLEMS: {problems}" if problems else ""))
    if run.stderr:
        log(f"  {run.stderr_lines} stderr line(s), first: {run.stderr[0]}")


# --- main ---------------------------------------------------------------------------------


def plan(args: argparse.Namespace) -> list[Point]:
    """Every run, in order: per round, per process count, both modes (their order
    reversed every other round); then the idle section."""
    points = []
    for round_ in range(args.rounds):
        modes = args.modes if round_ % 2 == 0 else list(reversed(args.modes))
        points += [Point(mode, n) for n in args.processes for mode in modes]
    if args.idle:
        points += [
            Point("pooled", args.busy, "idle"),
            Point("pooled", args.busy, "idle", args.idle),
            Point("pooled", args.busy, "idle", args.idle, idle_listen=True),
        ]
    return points


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line's options."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--processes", type=csv_ints, default=[1, 2, 4, 8, 16],
                   help="busy worker processes a point (default 1,2,4,8,16)")  # fmt: skip
    p.add_argument("--modes", type=lambda t: t.split(","), default=["direct", "pooled"])
    p.add_argument("--per-namespace", type=int, default=2, help="processes a namespace")
    p.add_argument("--concurrency", type=int, default=32, help="busy workers' slots")
    p.add_argument("--tasks", type=int, default=20_000, help="the backlog's no-op tasks")
    p.add_argument("--steady-rate", type=float, default=1000.0, help="tasks/s (0: no phase)")
    p.add_argument("--steady-seconds", type=float, default=10.0)
    p.add_argument("--rounds", type=int, default=2, help="runs of each scale point")
    p.add_argument("--idle", type=int, default=200, help="idle processes (0: no section)")
    p.add_argument("--idle-groups", type=int, default=10, help="namespaces of idle ones")
    p.add_argument("--busy", type=int, default=4, help="busy processes beside the idle")
    p.add_argument("--idle-window", type=float, default=20.0, help="seconds, idle alone")
    p.add_argument("--pool-size", type=int, default=20, help="PgBouncer's default_pool_size")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds a phase may take")
    p.add_argument("--start-timeout", type=float, default=600.0,
                   help="seconds workers may take to register")  # fmt: skip
    p.add_argument("--max-minutes", type=float, default=30.0, help="the whole run's bound")
    p.add_argument("--quiet-below", type=float, default=None, metavar="PERCENT",
                   help="before each run wait (up to 120 s) until others keep under"
                   " PERCENT %% of the CPU busy")  # fmt: skip
    p.add_argument("--json", default=str(HERE / "scale_out.json"), help="results file")
    p.add_argument("--png", default=str(HERE / "scale_out.png"), help="the plot ('': none)")
    p.add_argument("--label", default="", help="a name for this run, in the report")
    args = p.parse_args(argv)
    if not set(args.modes) <= {"direct", "pooled"}:
        p.error("--modes: of direct,pooled")
    if args.idle and (args.idle % args.idle_groups or args.idle_groups < 1):
        p.error("--idle must be a multiple of --idle-groups")
    needed = max(
        math.ceil(max(args.processes) / args.per_namespace),
        math.ceil(args.busy / args.per_namespace),
    )
    if args.idle:
        needed = max(needed, math.ceil(args.busy / args.per_namespace) + args.idle_groups)
    if needed > _netns.MAX_NAMESPACES:
        p.error(f"{needed} namespaces needed, at most {_netns.MAX_NAMESPACES}")
    args.namespaces = needed
    return args


def measure(args: argparse.Namespace, began: float, load_before: str) -> tuple[list[Run], dict]:
    """Set everything up, run the plan, tear everything down (in reverse order, however
    it ends): the runs, and the setting they ran in."""
    runs: list[Run] = []
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="jobq-scale-"))
        namespaces = stack.enter_context(_netns.namespaces(args.namespaces))
        hosts = [ns.host_address for ns in namespaces]
        log(f"{len(namespaces)} namespaces: {namespaces[0].name} ... {namespaces[-1].name}")
        postgres = stack.enter_context(hosted_postgres(hosts))
        bouncer = stack.enter_context(hosted_bouncer(postgres.url, args.pool_size, hosts))
        _netns.check_tcp(namespaces, [postgres.port, bouncer.port])
        log(f"PostgreSQL on {postgres.port}, PgBouncer on {bouncer.port}: reachable from all")
        Database(own_url(bouncer.direct_url), "PostgreSQL").store.dispose()  # migrates
        server = Server(postgres.url, bouncer.database)
        stack.callback(server.close)
        user = sa.make_url(bouncer.direct_url).username or "postgres"
        console = Console(bouncer.port, user, bouncer.database)
        stack.callback(console.close)
        pycache = os.path.join(tmp, "pycache")
        url = own_url(bouncer.direct_url)
        bench = Bench(namespaces, postgres, bouncer, url, server, console, pycache, args)
        bench.warm_up()
        points = plan(args)
        for i, point in enumerate(points):
            log(f"run {i + 1} of {len(points)}: {point.label} (load {load()})")
            runs.append(bench.run(point, sum(r.point == point for r in runs)))
        setting = bench.setting()
    setting.update(load_before=load_before, load_after=load(), seconds=time.monotonic() - began)
    return runs, setting


def main(argv: list[str] | None = None) -> int:
    """Run it all and report; 1 if a task was lost or ran twice, 2 on another failure."""
    args = parse(argv)
    if os.geteuid() != 0:
        log("scale_out.py needs root (ip netns, veth pairs)")
        return 2
    _netns.exit_on_signals()

    def too_long(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError(f"the run passed --max-minutes {args.max_minutes:g}")

    signal.signal(signal.SIGALRM, too_long)
    signal.alarm(max(1, int(args.max_minutes * 60)))
    began, load_before = time.monotonic(), load()
    try:
        runs, setting = measure(args, began, load_before)
    except Exception:
        log(traceback.format_exc())
        return 2
    finally:
        signal.alarm(0)
    payload = {"args": {k: v for k, v in vars(args).items()}, "setting": setting,
               "label": args.label, "runs": [asdict(r) for r in runs]}  # fmt: skip
    Path(args.json).write_text(json.dumps(payload, indent=1) + "\n")
    print("\n".join(report(payload)))
    if args.png:
        draw(args.json, args.png)
    problems = [
        p for r in runs for p in r.backlog.problems + (r.steady.problems if r.steady else [])
    ]
    return 1 if problems else 0


def draw(results: str, png: str) -> None:
    """Plot with scale_out_plot.py in benchmarks/.venv-peers, which has matplotlib."""
    if not PEERS_PYTHON.exists():
        log(f"no {PEERS_PYTHON} (bash benchmarks/peers.sh): plot skipped")
        return
    command = [str(PEERS_PYTHON), str(HERE / "scale_out_plot.py"), results, png]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    log(done.stderr.strip() or f"plot: {png}")


if __name__ == "__main__":
    sys.exit(main())
