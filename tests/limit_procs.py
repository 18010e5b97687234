"""Bodies of the OS processes that capture from limited queues at once (importable under spawn).

Each writes what it did as JSON to ``out`` when it is done.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

import jobq
from jobq.dialects.schema import tasks


def capture_rounds(
    url: str,
    worker_id: str,
    queues: list[str] | None,
    rounds: int,
    seed: int,
    complete: bool,
    start: Any,
    out: str,
) -> None:
    """Capture ``rounds`` times, 1..4 tasks at a time; hold them, or complete each at once.

    Records every run captured as [id, attempt, queue].
    """
    store = jobq.Store(url)
    rng = random.Random(seed)
    captured: list[list[Any]] = []
    start.wait()
    for _ in range(rounds):
        for task in store.capture(rng.randint(1, 4), queues=queues, worker_id=worker_id, lease=600):
            captured.append([task.id, task.attempt, task.queue_id])
            if complete:
                assert store.set_status(task.id, task.attempt, jobq.Status.DONE)
        time.sleep(rng.uniform(0, 0.004))
    Path(out).write_text(json.dumps({"captured": captured}))
    store.dispose()


def capture_in_lockstep(
    url: str,
    worker_id: str,
    queues: list[str],
    also: list[str],
    complete: bool,
    seed: int,
    barrier: Any,
    start: Any,
    out: str,
) -> None:
    """For each queue in turn, wait for every other process, then capture 1..4 tasks of it
    (and of the queues ``also``) at the same moment; hold them, or complete each at once.

    Records every run captured as [id, attempt, queue].
    """
    store = jobq.Store(url)
    rng = random.Random(seed)
    captured: list[list[Any]] = []
    store.limited_queues()  # read the limits before the race, not during it
    start.wait()
    for queue in queues:
        barrier.wait(timeout=120)
        for task in store.capture(
            rng.randint(1, 4), queues=[queue, *also], worker_id=worker_id, lease=600
        ):
            captured.append([task.id, task.attempt, task.queue_id])
            if complete:
                assert store.set_status(task.id, task.attempt, jobq.Status.DONE)
    Path(out).write_text(json.dumps({"captured": captured}))
    store.dispose()


def drain_sampling(
    url: str, worker_id: str, queues: list[str] | None, queue: str, seed: int, start: Any, out: str
) -> None:
    """Capture, count the runs of ``queue`` in progress while holding them, complete them;
    until nothing of ``queue`` is left to run.

    Records every run captured, and each count taken (each while this process held at
    least one run of ``queue``).
    """
    store = jobq.Store(url)
    rng = random.Random(seed)
    in_progress = (
        sa.select(sa.func.count())
        .select_from(tasks)
        .where(tasks.c.queue_id == queue, tasks.c.status == jobq.Status.IN_PROGRESS.value)
    )
    unfinished = (
        sa.select(sa.func.count())
        .select_from(tasks)
        .where(tasks.c.queue_id == queue, tasks.c.status != jobq.Status.DONE.value)
    )
    captured: list[list[Any]] = []
    counts: list[int] = []
    start.wait()
    for _ in range(100_000):
        batch = store.capture(rng.randint(1, 4), queues=queues, worker_id=worker_id, lease=600)
        captured += [[task.id, task.attempt, task.queue_id] for task in batch]
        if any(task.queue_id == queue for task in batch):
            with store.engine.connect() as conn:
                counts.append(conn.execute(in_progress).scalar_one())
        time.sleep(rng.uniform(0, 0.003))
        for task in batch:
            assert store.set_status(task.id, task.attempt, jobq.Status.DONE)
        if not batch:
            with store.engine.connect() as conn:
                if conn.execute(unfinished).scalar_one() == 0:
                    break
            time.sleep(0.002)
    Path(out).write_text(json.dumps({"captured": captured, "counts": counts}))
    store.dispose()


def set_limits(url: str, index: int, rounds: int, start: Any, out: str) -> None:
    """Set the limit of one queue ``rounds`` times, clearing it every other time, and of a
    new queue each round, as every process of a fleet starting at once might.

    Records the errors raised, as text.
    """
    store = jobq.Store(url)
    errors: list[str] = []
    start.wait()
    for n in range(rounds):
        attempt(errors, store.set_limit, "shared", concurrency=index + 1)
        attempt(errors, store.set_limit, f"fresh-{n}", concurrency=index + 1, rate="10/1m")
        if n % 2:
            attempt(errors, store.clear_limit, "shared")
    Path(out).write_text(json.dumps({"errors": errors}))
    store.dispose()


def attempt(errors: list[str], call: Any, *args: Any, **kwargs: Any) -> None:
    """``call(*args, **kwargs)``; an exception it raises is added to ``errors`` as text."""
    try:
        call(*args, **kwargs)
    except Exception as error:
        errors.append(f"{type(error).__name__}: {str(error).splitlines()[0]}")
