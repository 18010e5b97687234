"""bench_worker.py's bulk-enqueue comparison: jobq's bulk paths versus PGQueuer's.

Each measures N no-op tasks with arguments ``{"n": i}``, on empty tables, best of
``repeat`` runs (the table emptied, untimed, between runs):

* jobq ``Store.enqueue_many``, ``per_call`` tasks per call, timed in this process around
  the calls alone (a pooled connection already open);
* ``jobq enqueue --file`` of an N-line JSON-lines file (``{"name": ..., "kwargs": ...}`` a
  line) with ``--app benchmarks.noop_app:app``, so every line is checked against the task's
  signature as users run it; timed from spawn to exit, start-up included;
* PGQueuer's bulk ``Queries.enqueue(entrypoints, payloads, priorities)``, ``per_call`` jobs
  per call (payload: the same JSON as bytes), timed inside peer_worker.py around the
  calls alone (connected beforehand).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass, field

import jobq
from benchmarks._drains import peer, peer_label, run_jobq
from benchmarks.harness import APP_PATH, SYNC_TASK, jobq_cmd, log, reset, status_counts


@dataclass
class Enqueue:
    """One bulk enqueue of ``tasks`` tasks: its best run's ``seconds``, every run's too."""

    who: str
    database: str
    tasks: int
    seconds: float
    note: str
    #: For the targets: "jobq-many", "jobq-file", "pgqueuer-asyncpg", "pgqueuer-psycopg".
    kind: str
    runs: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.tasks / self.seconds


def _check(store: jobq.Store, n: int, what: str) -> None:
    counts = status_counts(store)
    if counts != {"queued": n}:
        raise RuntimeError(f"{what}: the table holds {counts}, not {n} queued")


def store_enqueue(url: str, database: str, n: int, per_call: int, repeat: int) -> Enqueue:
    """``Store.enqueue_many`` of ``n`` tasks, ``per_call`` a call, timed around the calls."""
    store = jobq.Store(url)
    try:
        store.migrate()
        args = [{"n": i} for i in range(n)]
        chunks = [args[start : start + per_call] for start in range(0, n, per_call)]
        if len(chunks) > 1:
            what = f"Store.enqueue_many, {per_call:,} per call"
        else:
            what = f"Store.enqueue_many, one call of {n:,}"
        log(f"jobq {what}/{database}: {n} tasks")
        runs: list[float] = []
        for _ in range(repeat):
            reset(store)
            status_counts(store)  # the pool holds an open connection before the clock starts
            start = time.perf_counter()
            for chunk in chunks:
                store.enqueue_many(SYNC_TASK, chunk)
            runs.append(time.perf_counter() - start)
            _check(store, n, what)
        note = "calls alone, in process; at most 5,000 rows a statement"
        return Enqueue(f"jobq {what}", database, n, min(runs), note, "jobq-many", runs)
    finally:
        store.dispose()


def _write_lines(path: str, n: int) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps({"name": SYNC_TASK, "kwargs": {"n": i}}) + "\n")


def file_enqueue(url: str, database: str, n: int, repeat: int, timeout: float) -> Enqueue:
    """``jobq enqueue --file`` of an ``n``-line file, timed from spawn to exit."""
    store = jobq.Store(url)
    try:
        store.migrate()
        with tempfile.TemporaryDirectory() as tmp:
            lines, one = os.path.join(tmp, "tasks.jsonl"), os.path.join(tmp, "one.jsonl")
            _write_lines(lines, n)
            _write_lines(one, 1)
            cmd = jobq_cmd("enqueue", "--file", lines, "--app", APP_PATH)
            log(f"jobq enqueue --file/{database}: {n} lines")
            runs: list[float] = []
            for _ in range(repeat):
                reset(store)
                runs.append(run_jobq(url, cmd, timeout, forward=False).seconds)
                _check(store, n, "jobq enqueue --file")
            reset(store)
            one_cmd = jobq_cmd("enqueue", "--file", one, "--app", APP_PATH)
            startup = run_jobq(url, one_cmd, timeout, forward=False).seconds
            _check(store, 1, "jobq enqueue --file (one line)")
        note = f"spawn to exit, checked against the app; a one-line file takes {startup:.2f} s"
        who = f"jobq enqueue --file ({n:,} lines)"
        return Enqueue(who, database, n, min(runs), note, "jobq-file", runs)
    finally:
        store.dispose()


def pgqueuer_enqueue(
    driver: str, dsn: str, n: int, per_call: int, repeat: int, timeout: float
) -> Enqueue:
    """PGQueuer's bulk enqueue of ``n`` jobs, ``per_call`` a call, on fresh tables."""
    label = peer_label("pgqueuer", driver)
    per_call = min(per_call, n)
    log(f"{label} bulk enqueue: {n} jobs, {per_call} per call")
    peer("pgqueuer", "setup", dsn, timeout, driver=driver)
    result = peer(
        "pgqueuer", "enqueue", dsn, timeout, tasks=n, batch=per_call, repeat=repeat,
        driver=driver,
    )  # fmt: skip
    if result["enqueued"] != n:
        raise RuntimeError(f"{label}: enqueued {result['enqueued']} of {n}")
    who = f"{label} Queries.enqueue, {per_call:,} per call"
    note = "calls alone, in process (connected beforehand)"
    return Enqueue(
        who, "PostgreSQL", n, result["seconds"], note, f"pgqueuer-{driver}", result["runs"]
    )
