"""Bodies of the OS processes that the concurrency tests start (importable under spawn),
and run_processes, which starts them."""

from __future__ import annotations

import json
import multiprocessing
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa

import jobq
from jobq.db.tasks import Completion


def run_processes(
    target: Callable[..., None],
    arg_lists: list[tuple[Any, ...]],
    tmp_path: Path | None = None,
    *,
    timeout: float = 300,
) -> list[Any]:
    """Start one spawned process per argument tuple, release them together (a start event
    is their next argument), and wait for all; any still alive after ``timeout`` s is
    killed, and each must exit 0. With ``tmp_path``, each also gets the path of a file
    ``out-<n>.json`` there to write, and their JSON outputs are returned."""
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    outs = [tmp_path / f"out-{i}.json" for i in range(len(arg_lists))] if tmp_path else []
    processes = [
        ctx.Process(target=target, args=(*args, start, *([str(outs[i])] if outs else [])))
        for i, args in enumerate(arg_lists)
    ]
    for process in processes:
        process.start()
    start.set()
    for process in processes:
        process.join(timeout=timeout)
    for process in processes:
        if process.is_alive():
            process.kill()
            process.join()
    assert [p.exitcode for p in processes] == [0] * len(processes)
    return [json.loads(out.read_text()) for out in outs]


def capture_and_complete(url: str, worker_id: str, seed: int, start: Any, out: str) -> None:
    """Capture with random limits 1..100 until nothing is left, completing each capture."""
    store = jobq.Store(url)
    rng = random.Random(seed)
    captured: list[tuple[int, int]] = []
    refused = 0
    start.wait()
    while batch := store.capture(rng.randint(1, 100), worker_id=worker_id, lease=600):
        for task in batch:
            captured.append(task.fence)
            if not store.set_status(task.id, task.attempt, jobq.Status.DONE):
                refused += 1
    Path(out).write_text(json.dumps({"captured": captured, "refused": refused}))
    store.dispose()


def enqueue_unique(url: str, keys: list[str], rounds: int, start: Any, out: str) -> None:
    """Enqueue every key ``rounds`` times as fast as possible, recording the ids returned."""
    store = jobq.Store(url)
    ids: dict[str, list[int]] = {key: [] for key in keys}
    start.wait()
    for _ in range(rounds):
        for key in keys:
            ids[key].append(store.enqueue("unique", {"key": key}, unique_key=key))
    Path(out).write_text(json.dumps(ids))
    store.dispose()


def store_with_isolation(url: str, isolation: str | None) -> jobq.Store:
    """A Store on ``url``; with ``isolation``, on an engine of the caller's own at that
    isolation level (jobq uses the engine as given), else on one jobq creates."""
    if isolation is None:
        return jobq.Store(url)
    engine = jobq.Store(url).engine  # the URL with jobq's default driver filled in
    return jobq.Store(sa.create_engine(engine.url, isolation_level=isolation))


def produce(url: str, isolation: str | None, tag: int, count: int, start: Any, out: str) -> None:
    """Enqueue ``count`` tasks: half one at a time (every tenth with a unique key of its
    own), half in batches of 50; record every id returned."""
    store = store_with_isolation(url, isolation)
    ids: list[int] = []
    start.wait()
    for n in range(count // 2):
        key = f"{tag}-{n}" if n % 10 == 0 else None
        ids.append(store.enqueue("work", {"tag": tag, "n": n}, unique_key=key))
    for first in range(count // 2, count, 50):
        batch = [{"tag": tag, "n": n} for n in range(first, min(first + 50, count))]
        ids.extend(store.enqueue_many("work", batch))
    Path(out).write_text(json.dumps({"ids": ids}))
    store.dispose()


def consume(
    url: str, isolation: str | None, seed: int, produced: Any, start: Any, out: str
) -> None:
    """Capture (1..50 at a time) and complete, alternating complete_and_capture with
    capture and set_status, until the producers are done and nothing is left (or two
    minutes have passed: the test then finds tasks missing)."""
    store = store_with_isolation(url, isolation)
    rng = random.Random(seed)
    captured: list[tuple[int, int]] = []
    ends: list[Completion] = []
    refused = 0
    start.wait()
    idle = 0
    deadline = time.monotonic() + 120
    while idle < 3 and time.monotonic() < deadline:
        limit = rng.randint(1, 50)
        if rng.random() < 0.5:
            applied, batch = store.complete_and_capture(ends, limit, worker_id=f"w{seed}")
            refused += len(ends) - applied
            ends = []
        else:
            batch = store.capture(limit, worker_id=f"w{seed}")
        captured += [task.fence for task in batch]
        ends += [Completion(task.id, task.attempt, jobq.Status.DONE) for task in batch]
        if rng.random() < 0.3:
            for end in ends:
                refused += not store.set_status(end.id, end.attempt, jobq.Status.DONE)
            ends = []
        idle = idle + 1 if not batch and produced.is_set() else 0
        if not batch:
            time.sleep(0.01)
    refused += len(ends) - store.set_statuses(ends)
    Path(out).write_text(json.dumps({"captured": captured, "refused": refused}))
    store.dispose()
