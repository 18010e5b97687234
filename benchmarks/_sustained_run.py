"""sustained_load.py's series: one jobq worker, one producer, the steps, the samples.

A series is one (database, slots) pair on a database of its own: a real ``jobq worker``
process at ``--concurrency`` slots, the producer process (_producer.py) told each step's
offered rate, and a sampler thread reading the queue's state every few seconds. The
series' phases, in order:

1. ramp: each ``--rates`` rate for ``--step-seconds``;
2. the sustainable rate: the best completed/s of a ramp step that kept up (offered at
   least 99% of its target, and completed at least 95% of that or ended with no more
   than a second's arrivals waiting);
3. drain: nothing offered until the backlog is down to the slots (at most a minute);
4. the latency step: 50% of the sustainable rate for one step;
5. overload: 2.5x the sustainable rate (``--overload``) for ``--overload-seconds``, in
   steps of ``--step-seconds``.

Everything is read from jobq's rows, the database's clock: a step's completed/s counts
the rows that finished in its window; its claim latency is started_at - created_at of
the rows it enqueued (rows not started by the end are counted, never guessed). The task
records nothing of its own. PostgreSQL adds the dead tuples of jobq_tasks
(pg_stat_user_tables) and its capture index's size.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, Any, Protocol

import sqlalchemy as sa

import jobq
from benchmarks._machine import Poller
from benchmarks._table_stats import read_table
from benchmarks.harness import (
    ROOT,
    jobq_worker_cmd,
    log,
    percentile,
    stop,
    tail,
    utc,
    worker_env,
)
from jobq.dialects.schema import WAITING, tasks, workers

CAPTURE_INDEX = "jobq_tasks_capture_any_queue"
#: A ramp step kept up if it completed this share of what it offered ...
KEPT_UP = 0.95
#: ... (or ended with at most this many seconds of arrivals, and a batch, waiting) ...
BACKLOG_SECONDS = 1.0
BATCH = 128
#: ... and its producer offered this share of its target.
OFFERED = 0.99


@dataclass
class Sample:
    """The queue every few seconds: completions a second since the previous sample."""

    at: float  # epoch seconds
    rate: float
    depth: int  # waiting rows
    running: int
    dead: int | None  # PostgreSQL: n_dead_tup of jobq_tasks


@dataclass
class Step:
    """One step: what the producer offered, what the rows say of it."""

    phase: str  # ramp | latency | overload
    rate: float  # offered rows a second (the target)
    seconds: float
    offered: int = 0
    unoffered: int = 0
    start: float = 0.0  # epoch seconds
    end: float = 0.0
    completed: int = 0  # rows that finished in [start, end)
    depth: int = 0  # waiting rows at the step's end
    dead: int | None = None
    capture_index: int | None = None  # bytes
    latencies: list[float] = field(default_factory=list)  # started_at - created_at, s
    not_started: int = 0  # rows enqueued in the step, not started by the end
    min_sampled: float | None = None  # the lowest completions/s among the step's samples

    @property
    def completed_rate(self) -> float:
        return self.completed / (self.end - self.start) if self.end > self.start else 0.0

    @property
    def offered_rate(self) -> float:
        return self.offered / (self.end - self.start) if self.end > self.start else 0.0

    @property
    def kept_up(self) -> bool:
        """The producer offered what it should and the worker kept up: it completed 95% of
        that in the step's window, or the step ended with no more waiting than a second's
        arrivals (a polling worker finishes the last second's rows after the window)."""
        return self.offered >= OFFERED * (self.offered + self.unoffered) and (
            self.completed_rate >= KEPT_UP * self.offered_rate
            or self.depth <= self.rate * BACKLOG_SECONDS + BATCH
        )

    def latency(self, p: float) -> float | None:
        """The ``p``th percentile of the step's claim latency, s; None if rows not started
        could be in it (they have no latency yet, only a lower bound)."""
        n = len(self.latencies) + self.not_started
        if not self.latencies or (n - len(self.latencies)) > n * (1 - p / 100):
            return None
        return percentile(self.latencies + [float("inf")] * self.not_started, p)


@dataclass
class Series:
    """One (database, slots) series and what it found."""

    database: str
    slots: int
    task: str
    queue: str = "jobq"
    steps: list[Step] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    sustainable: float | None = None
    drain_seconds: float = 0.0
    #: Whether the backlog drained before the latency step (else its latencies wait behind it).
    drained: bool = True
    worker_stderr: list[str] = field(default_factory=list)


def _when(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


class Probe(Protocol):
    """What a series reads of a queue's tables (jobq's: JobqProbe; the peers':
    _sustained_peers.PeerProbe); times are epoch seconds, compared on the database."""

    def state(self, since: float) -> tuple[int, int, int]: ...
    def dead(self) -> tuple[int | None, int | None]: ...
    def completed(self, start: float, end: float) -> int: ...
    def latencies(self, start: float, end: float) -> tuple[list[float], int]: ...
    def ready(self) -> bool: ...


@dataclass
class Queue:
    """What a series runs: a worker command, a producer command, their environment, and
    how to read the queue's tables."""

    label: str
    worker: list[str]
    producer: list[str]
    env: dict[str, str]
    probe: Probe
    close: Callable[[], None] = lambda: None


class JobqProbe:
    """The series' own reads of jobq's table (cheap ones: the capture index, finished_at's)."""

    def __init__(self, store: jobq.Store, url: str) -> None:
        self.store, self.url = store, url
        self.postgres = store.engine.dialect.name == "postgresql"
        self._lock = threading.Lock()

    def state(self, since: float) -> tuple[int, int, int]:
        """Rows finished after ``since`` (epoch s), waiting rows, running rows."""
        with self._lock, self.store.engine.connect() as conn:
            done = conn.scalar(
                sa.select(sa.func.count()).where(tasks.c.finished_at >= _when(since))
            )
            depth = conn.scalar(sa.select(sa.func.count()).select_from(tasks).where(WAITING))
            running = conn.scalar(sa.select(sa.func.count()).where(tasks.c.status == "in_progress"))
        return int(done or 0), int(depth or 0), int(running or 0)

    def dead(self) -> tuple[int | None, int | None]:
        """PostgreSQL: dead tuples of jobq_tasks and its capture index's bytes."""
        if not self.postgres:
            return None, None
        stats = read_table(self.url)
        return stats.dead, stats.index_sizes.get(CAPTURE_INDEX)

    def completed(self, start: float, end: float) -> int:
        with self.store.engine.connect() as conn:
            window = tasks.c.finished_at.between(_when(start), _when(end))
            return int(conn.scalar(sa.select(sa.func.count()).where(window)) or 0)

    def latencies(self, start: float, end: float) -> tuple[list[float], int]:
        """started_at - created_at (s) of the rows created in [start, end); how many of
        them had not started."""
        window = sa.and_(tasks.c.created_at >= _when(start), tasks.c.created_at < _when(end))
        query = sa.select(tasks.c.created_at, tasks.c.started_at).where(window)
        out, waiting = [], 0
        with self.store.engine.connect() as conn:
            for created, started in conn.execute(query):
                if started is None:
                    waiting += 1
                else:
                    out.append((utc(started) - utc(created)).total_seconds())
        return out, waiting

    def ready(self) -> bool:
        """The worker registered."""
        with self.store.engine.connect() as conn:
            return bool(conn.scalar(sa.select(sa.func.count()).select_from(workers)))


class Sampler(Poller):
    """Every ``every`` s: completions a second since the last look, depth, dead tuples."""

    def __init__(self, probe: Probe, samples: list[Sample], every: float) -> None:
        super().__init__(every, join_timeout=30)
        self.probe, self.samples = probe, samples
        self._last = time.time()

    def look(self) -> None:
        now = time.time()
        done, depth, running = self.probe.state(self._last)
        dead, _ = self.probe.dead()
        self.samples.append(Sample(now, done / max(now - self._last, 1e-6), depth, running, dead))
        self._last = now


class Producer:
    """The producer process, told one step at a time."""

    def __init__(self, cmd: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self._read()  # {"ready": true}: connected, imported

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the producer exited {self.proc.wait()}")
        result: dict[str, Any] = json.loads(line)
        return result

    def step(self, rate: float, seconds: float) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{rate} {seconds}\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.proc.stdin is not None and self.proc.poll() is None:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
        stop([self.proc], grace=30)


@dataclass
class Plan:
    """What a series runs (from sustained_load.py's options)."""

    rates: list[int]
    step_seconds: float
    overload: float
    overload_seconds: float
    sample_seconds: float
    batch: int
    drain_timeout: float
    task_logs: bool


def jobq_queue(url: str, slots: int, task: str, plan: Plan) -> Queue:
    """jobq on the migrated, empty database at ``url``: ``jobq worker --concurrency
    SLOTS`` and the producer of _producer.py, ``task`` with ``{"ms": 1}``."""
    options = ["--concurrency", str(slots)]
    if not plan.task_logs:
        options += ["--log-level", "warning"]
    producer = [sys.executable, "-m", "benchmarks._producer", "--url", url, "--task", task]
    producer += ["--args", json.dumps({"ms": 1}), "--batch", str(plan.batch)]
    store = jobq.Store(url)
    probe = JobqProbe(store, url)
    return Queue("jobq", jobq_worker_cmd(*options), producer, worker_env(url), probe, store.dispose)


def run_series(queue: Queue, database: str, slots: int, task: str, plan: Plan) -> Series:
    """One series of ``queue`` on its empty tables."""
    series = Series(database, slots, task, queue.label)
    probe = queue.probe
    with tempfile.TemporaryFile() as stderr:
        worker = subprocess.Popen(
            queue.worker, cwd=ROOT, env=queue.env, stdout=subprocess.DEVNULL, stderr=stderr
        )
        producer = None
        try:
            _wait(probe.ready, worker, stderr, "the worker to start")
            producer = Producer(queue.producer, queue.env)
            with Sampler(probe, series.samples, plan.sample_seconds):
                _phases(series, plan, producer, probe, worker, stderr)
        finally:
            if producer is not None:
                producer.close()
            stop([worker], grace=5)
            stderr.seek(0)
            series.worker_stderr = stderr.read().decode(errors="replace").splitlines()
    for s in series.steps:
        s.latencies, s.not_started = probe.latencies(s.start, s.end)
        within = [x.rate for x in series.samples if s.start + plan.sample_seconds <= x.at <= s.end]
        s.min_sampled = min(within, default=None)
    queue.close()
    return series


def _phases(
    series: Series, plan: Plan, producer: Producer, probe: Probe, worker: Any, stderr: IO[bytes]
) -> None:
    def run(phase: str, rate: float) -> Step:
        if worker.poll() is not None:
            tail(stderr, f"{series.queue} worker", 60)
            raise RuntimeError(f"the worker exited {worker.returncode}")
        got = producer.step(rate, plan.step_seconds)
        s = Step(phase, rate, plan.step_seconds, got["offered"], got["unoffered"])
        s.start, s.end = got["start"], got["end"]
        s.completed = probe.completed(s.start, s.end)
        s.depth = probe.state(s.end)[1]
        s.dead, s.capture_index = probe.dead()
        series.steps.append(s)
        log(
            f"  {series.queue}, {series.database}, {series.slots} slots, {phase} {rate:,.0f}/s: "
            f"offered {s.offered_rate:,.0f}/s, completed {s.completed_rate:,.0f}/s, "
            f"depth {s.depth:,}" + (f", dead {s.dead:,}" if s.dead is not None else "")
        )
        return s

    # The ramp ends at its first step that did not keep up: the steps above it would only
    # pile up a backlog (700,000 rows at 12,000/s offered to 16 slots) that the latency
    # step would then wait behind; the overload steps show what a backlog does.
    ramp: list[Step] = []
    for rate in plan.rates:
        ramp.append(run("ramp", rate))
        if not ramp[-1].kept_up:
            break
    kept = [s.completed_rate for s in ramp if s.kept_up]
    if not kept:
        log("  no ramp step kept up: no sustainable rate, no latency or overload steps")
        return
    series.sustainable = max(kept)
    start = time.monotonic()
    while probe.state(time.time())[1] > series.slots:
        if time.monotonic() - start > plan.drain_timeout:
            log(f"  the backlog did not drain within {plan.drain_timeout:g} s")
            series.drained = False
            break
        time.sleep(0.5)  # the drain's poll
    series.drain_seconds = time.monotonic() - start
    run("latency", round(series.sustainable / 2))
    for _ in range(max(1, round(plan.overload_seconds / plan.step_seconds))):
        run("overload", round(series.sustainable * plan.overload))


def _wait(ready: Any, proc: Any, stderr: IO[bytes], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            tail(stderr, "the worker", 60)
            raise RuntimeError(f"waiting for {what}: the worker exited or took too long")
        time.sleep(0.1)  # the wait's poll
