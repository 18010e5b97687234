"""The chaos scenario, shared by tests/chaos and benchmarks/soak.py.

Worker processes (`jobq worker` on tests/apps/chaos.py) drain tasks from a private
PostgreSQL server while the scenario kills one of them with kill -9 every few seconds
and starts a new one, restarts PostgreSQL itself, and optionally sends the workers'
connections through a proxy that cuts them at random. Then it reads the database and
counts what a user would care about: tasks not done, runs beyond one per capture,
duplicated side effects and whether each is explained by a kill or a lapsed lease,
tasks stuck in progress, leases outstanding, limiter slots held.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa

import jobq
from jobq.dialects import schema
from jobq.dialects.schema import locks, tasks
from jobq.upkeep.chores import LEASE_INTERVALS
from tests.apps import chaos
from tests.chaos.proxy import CuttingProxy
from tests.postgres_server import PostgresServer

ROOT = Path(__file__).resolve().parents[2]
CONCURRENCY = 8  # per worker
#: The fair queue's keys (tenants); the queue each task is enqueued in (the app's).
FAIR_KEYS = 7
QUEUES = {"effect": "default", "leased_effect": "default", "limited_effect": "limited",
          "fair_effect": "fair"}  # fmt: skip
#: A worker that logs either of these refused or dropped an outcome whose lease had
#: lapsed: its task ran again elsewhere, so one more side effect is expected.
_STALE = re.compile(r"(\d+) outcome\(s\) were stale")
_LOST = re.compile(r"lease lost")


@dataclass
class Report:
    """What one scenario run did and found."""

    tasks: int = 0
    seconds: float = 0.0
    kills: int = 0
    killed_pids: set[int] = field(default_factory=set)
    db_restarts: int = 0
    graceful_stops: int = 0
    proxy_cuts: int = 0
    revived: int = 0  # workers that exited by themselves (see Fleet.revive) and restarted
    not_done: int = 0  # tasks in any state but done at the end
    wrong_results: int = 0  # done tasks whose result is not their own
    runs_per_capture_over_one: int = 0  # (task, attempt) pairs with two side effects
    missing_final_effect: int = 0  # done tasks whose final attempt left no side effect
    duplicates: int = 0  # side effects beyond the first, per task
    explained_by_kills: int = 0  # ... by an earlier attempt in a killed worker
    unexplained: int = 0  # ... by anything else
    stale_or_lost: int = 0  # outcomes the workers logged as stale or lost
    retries_spent: int = 0  # retries_left below the task's own, summed
    stuck_in_progress: int = 0
    leases_outstanding: int = 0
    limiter_slots_held: int = 0
    done_by_queue: Counter[str] = field(default_factory=Counter)  # tasks done, by queue
    listen_reconnected: bool | None = None  # every live worker LISTENs again after a restart
    worker_errors: list[str] = field(default_factory=list)  # tracebacks in worker logs
    memory: list[tuple[float, int]] = field(default_factory=list)  # (seconds, KiB) of one worker

    @property
    def lost(self) -> int:
        return self.not_done + self.missing_final_effect

    def summary(self) -> str:
        return (
            f"tasks {self.tasks} in {self.seconds:.1f} s ({self.tasks / self.seconds:.0f}/s): "
            f"kills {self.kills}, database restarts {self.db_restarts}, proxy cuts "
            f"{self.proxy_cuts}, graceful stops {self.graceful_stops}, workers revived "
            f"{self.revived}; lost {self.lost}, "
            f"duplicates {self.duplicates} ({self.explained_by_kills} after kills, "
            f"{self.unexplained} otherwise, {self.stale_or_lost} stale or lost outcomes "
            f"logged), retries spent {self.retries_spent}, stuck {self.stuck_in_progress}, "
            f"leases {self.leases_outstanding}, limiter slots {self.limiter_slots_held}; "
            f"done by queue {dict(sorted(self.done_by_queue.items()))}"
        )


class Fleet:
    """``count`` `jobq worker` processes; each slot's process can be killed and replaced."""

    def __init__(
        self, url: str, effects_url: str, count: int, log_dir: Path, concurrency: int = CONCURRENCY
    ) -> None:
        self.url = url
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "JOBQ_DATABASE_URL": url,
                    "CHAOS_EFFECTS_URL": effects_url, "PYTHONFAULTHANDLER": "1"}  # fmt: skip
        self.concurrency = concurrency
        self.log_dir = log_dir
        self.logs: list[Path] = []
        self.processes: list[subprocess.Popen[bytes]] = [self._start() for _ in range(count)]

    def _start(self) -> subprocess.Popen[bytes]:
        log = self.log_dir / f"worker-{len(self.logs)}.log"
        self.logs.append(log)
        with log.open("wb") as out:
            return subprocess.Popen(
                [sys.executable, "-m", "jobq.cli", "worker", "--app", "tests.apps.chaos:app",
                 "--queues", "default,limited,fair", "--concurrency", str(self.concurrency),
                 "--poll-interval", "1", "--grace", "30", "--log-level", "WARNING"],
                env=self.env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip

    def kill_one(self, rng: random.Random, slots: range | None = None) -> int:
        """kill -9 one worker (of ``slots``, default all), start another in its place; its pid."""
        slot = rng.choice(slots or range(len(self.processes)))
        victim = self.processes[slot]
        victim.kill()
        victim.wait()
        self.processes[slot] = self._start()
        return victim.pid

    def revive(self) -> int:
        """Start a new worker in place of each that exited by itself (as systemd's
        Restart=always would: a worker that starts while the database is down exits
        with a one-line error); how many."""
        exited = [slot for slot, p in enumerate(self.processes) if p.poll() is not None]
        for slot in exited:
            self.processes[slot] = self._start()
        return len(exited)

    def stop(self, store: jobq.Store, timeout: float = 60) -> list[int]:
        """SIGTERM every worker and wait for all; their exit codes (-9 if one hung).

        It first waits until each has registered, since a SIGTERM is only graceful once
        its handler is installed (a process still importing just dies, holding nothing).
        """

        def registered() -> bool:
            try:
                pids = {w.pid for w in store.live_workers()}
            except jobq.DatabaseUnavailable:
                return False
            return all(p.pid in pids for p in self.processes if p.poll() is None)

        wait_for(registered, timeout=60)
        for process in self.processes:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        codes = []
        for process in self.processes:
            try:
                codes.append(process.wait(timeout=max(deadline - time.monotonic(), 0.1)))
            except subprocess.TimeoutExpired:
                process.send_signal(signal.SIGABRT)  # PYTHONFAULTHANDLER logs every stack
                process.wait(timeout=30)
                codes.append(-9)
        return codes

    def restart_all(self) -> None:
        self.processes = [self._start() for _ in self.processes]

    def rss_kib(self, slot: int) -> int:
        status = Path(f"/proc/{self.processes[slot].pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+)", status).group(1))  # type: ignore[union-attr]

    def kill_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait()


def prepare(url: str) -> jobq.Store:
    """Migrate, empty every table the scenario uses, limit the queue ``limited`` and make
    the queue ``fair`` fair, at most 2 runs of a key at once."""
    store = jobq.Store(url)
    store.migrate()
    with store.engine.begin() as conn:
        for table in (schema.tasks, schema.locks, schema.limits, schema.limit_starts,
                      schema.workers, schema.fair_keys):  # fmt: skip
            conn.execute(sa.delete(table))
    chaos.EFFECTS.drop(store.engine, checkfirst=True)
    chaos.EFFECTS.create(store.engine)
    store.set_limit("limited", concurrency=3)
    store.fair_queues.make_fair("fair", max_running_per_key=2)
    return store


def enqueue(store: jobq.Store, count: int, first: int = 0) -> None:
    """``count`` tasks: 70 % ``effect``, 10 % each ``limited_effect``, ``leased_effect``
    and ``fair_effect`` (over FAIR_KEYS keys)."""
    names = {0: "limited_effect", 1: "leased_effect", 2: "fair_effect"}
    by_name: dict[tuple[str, str | None], list[dict[str, int]]] = {}
    for n in range(first, first + count):
        name = names.get(n % 10, "effect")
        key = f"tenant-{n % FAIR_KEYS}" if name == "fair_effect" else None
        by_name.setdefault((name, key), []).append({"n": n})
    for (name, key), kwargs in by_name.items():
        for start in range(0, len(kwargs), 1000):
            batch = kwargs[start : start + 1000]
            store.enqueue_many(name, batch, retries=chaos.RETRIES, queue=QUEUES[name], fair_key=key)


def done_count(store: jobq.Store) -> int:
    return sum(n for (_, status), n in store.counts().items() if status is jobq.Status.DONE)


def listening(server_url: str) -> int:
    """How many connections are waiting on LISTEN on the server."""
    engine = sa.create_engine(server_url)
    try:
        with engine.connect() as conn:
            return int(
                conn.execute(
                    sa.text("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %'")
                ).scalar_one()
            )
    finally:
        engine.dispose()


def wait_for(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@dataclass
class Faults:
    """Which faults to inject, and how often."""

    kill_every: float | None = 2.0  # seconds between two kill -9
    restart_db_at: tuple[float, ...] = (0.5,)  # fractions of the tasks done
    restart_db_every: float | None = None  # seconds between two restarts (for long runs)
    proxy: bool = False
    graceful_stop_at: float | None = None  # fraction done when every worker gets SIGTERM
    spare_slots: int = 0  # the first N workers are never killed (their memory is sampled)


def run(
    server: PostgresServer,
    log_dir: Path,
    *,
    tasks_count: int,
    faults: Faults,
    workers: int = 6,
    deadline: float = 300,
    seed: int = 0,
    feed: Callable[[jobq.Store], int | None] | None = None,
) -> Report:
    """Drain ``tasks_count`` tasks (plus what ``feed`` enqueues as it goes: how many, or
    None once it has stopped for good) under ``faults``.

    The run ends when every task is done or after ``deadline`` seconds; then the
    workers are stopped with SIGTERM and the database is checked.
    """
    rng = random.Random(seed)
    store = prepare(server.url)
    enqueue(store, tasks_count)
    report = Report(tasks=tasks_count)
    proxy = CuttingProxy(server.port, seed=seed, cut_for=deadline) if faults.proxy else None
    worker_url = server.url
    if proxy is not None:
        worker_url = server.url.replace(f":{server.port}/", f":{proxy.port}/")
        proxy.cutting.set()
    fleet = Fleet(worker_url, server.url, workers, log_dir)
    restarts_left = sorted(faults.restart_db_at)
    started = next_kill = next_sample = time.monotonic()
    next_restart = started + (faults.restart_db_every or 0)
    try:
        while True:
            now = time.monotonic()
            fed = feed(store) if feed is not None else None
            report.tasks += fed or 0
            done = _done_or_none(store)
            if fed is None and done is not None and done >= report.tasks:
                break
            if now - started > deadline:
                break
            due = done is not None and restarts_left and done >= restarts_left[0] * report.tasks
            if due or (faults.restart_db_every is not None and now >= next_restart):
                if due:
                    restarts_left.pop(0)
                next_restart = now + (faults.restart_db_every or 0)
                server.restart()
                report.db_restarts += 1
                if proxy is not None:
                    proxy.cutting.clear()  # a fair check of reconnecting needs a quiet line

                # No kills until every live worker LISTENs again, so that none of them is
                # a fresh process that never lost its LISTEN.
                def all_listening() -> bool:
                    report.revived += fleet.revive()
                    return listening(server.url) >= workers

                reconnected = wait_for(all_listening, timeout=30)
                report.listen_reconnected = reconnected and report.listen_reconnected is not False
                if proxy is not None:
                    proxy.cutting.set()
                next_kill = time.monotonic() + (faults.kill_every or 0)
            if (
                faults.graceful_stop_at is not None
                and report.graceful_stops == 0
                and done is not None
                and done >= faults.graceful_stop_at * report.tasks
            ):
                codes = fleet.stop(store)
                assert codes == [0] * workers, f"graceful stop exit codes {codes}"
                report.graceful_stops += 1
                fleet.restart_all()
            report.revived += fleet.revive()
            if faults.kill_every is not None and now >= next_kill:
                report.killed_pids.add(
                    fleet.kill_one(rng, range(faults.spare_slots, workers) or None)
                )
                report.kills += 1
                next_kill = now + faults.kill_every
            if faults.spare_slots and now >= next_sample:
                report.memory.append((now - started, fleet.rss_kib(0)))
                next_sample = now + 5
            time.sleep(0.2)
        report.seconds = time.monotonic() - started
        if proxy is not None:
            proxy.cutting.clear()
        codes = fleet.stop(store)
        assert all(code == 0 for code in codes), f"exit codes after SIGTERM: {codes}"
    finally:
        fleet.kill_all()
        if proxy is not None:
            report.proxy_cuts = proxy.cuts
            proxy.stop()
    _check(store, report, fleet.logs)
    store.dispose()
    return report


def _done_or_none(store: jobq.Store) -> int | None:
    """How many tasks are done, or None while the database cannot be read."""
    try:
        return done_count(store)
    except jobq.DatabaseUnavailable:
        return None


def _leases_after_lapse(store: jobq.Store) -> int:
    """Leases still held once a killed holder's would have lapsed (live holders release)."""
    unexpired = (
        sa.select(sa.func.count()).select_from(locks).where(locks.c.expires_at > sa.func.now())
    )

    def count() -> int:
        with store.engine.connect() as conn:
            return int(conn.execute(unexpired).scalar_one())

    # The longest a lease can outlive its holder: a task's (chaos.LEASE), or the upkeep
    # election's, held by a worker killed (or cut off by the proxy) before it gave it up.
    upkeep = LEASE_INTERVALS * 5.0  # the workers run with the default rescue interval, 5 s
    wait_for(lambda: count() == 0, timeout=max(chaos.LEASE, upkeep) + 2)
    return count()


def _check(store: jobq.Store, report: Report, logs: list[Path]) -> None:
    """Fill in the report's findings from the database and the workers' logs."""
    with store.engine.connect() as conn:
        columns = ("id", "status", "attempt", "retries_left", "args", "result", "queue_id")
        rows = conn.execute(sa.select(*(tasks.c[name] for name in columns))).all()
        effects = conn.execute(
            sa.select(chaos.EFFECTS.c.task_id, chaos.EFFECTS.c.attempt, chaos.EFFECTS.c.pid)
        ).all()
    report.leases_outstanding = _leases_after_lapse(store)
    runs = Counter((task_id, attempt) for task_id, attempt, _ in effects)
    report.runs_per_capture_over_one = sum(n - 1 for n in runs.values() if n > 1)
    pids: dict[int, list[tuple[int, int]]] = {}
    for task_id, attempt, pid in effects:
        pids.setdefault(task_id, []).append((attempt, pid))
    for row in rows:
        if row.status != "done":
            report.not_done += 1
            report.stuck_in_progress += row.status == "in_progress"
            continue
        report.done_by_queue[row.queue_id] += 1
        report.wrong_results += row.result != row.args["n"]
        report.retries_spent += chaos.RETRIES - row.retries_left
        if runs[(row.id, row.attempt)] == 0:
            report.missing_final_effect += 1
        for attempt, pid in pids.get(row.id, []):
            if attempt == row.attempt:
                continue
            report.duplicates += 1
            if pid in report.killed_pids:
                report.explained_by_kills += 1
            else:
                report.unexplained += 1
    report.limiter_slots_held = store.limit_usage().get("limited", (0, 0))[0]
    for log in logs:
        text = log.read_text(errors="replace")
        report.stale_or_lost += sum(int(n) for n in _STALE.findall(text))
        report.stale_or_lost += len(_LOST.findall(text))
        if "Traceback" in text:
            report.worker_errors.append(f"{log.name}: {text[text.index('Traceback') :][:3000]}")
