"""Bodies of the OS processes that the concurrency tests start (importable under spawn)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import jobq


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
