"""Concurrency claims, proven with real OS processes hammering one database."""

from __future__ import annotations

import json
import multiprocessing
import random
from collections import Counter
from pathlib import Path

import pytest

import jobq
from jobq import Status
from tests import procs, shared_database
from tests.helpers import all_rows

#: One migrated database per backend for the module, emptied before each test.
backend, shared_url, db_url = shared_database.FIXTURES

pytestmark = pytest.mark.slow


def run_processes(
    target, arg_lists: list[tuple], tmp_path: Path, prefix: str = "out"
) -> list[dict]:  # type: ignore[no-untyped-def, type-arg]
    """Start one spawned process per argument tuple, release them together, collect output
    (each writes ``<prefix>-<n>.json`` in ``tmp_path``)."""
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    outs = [tmp_path / f"{prefix}-{i}.json" for i in range(len(arg_lists))]
    processes = [
        ctx.Process(target=target, args=(*args, start, str(out)))
        for args, out in zip(arg_lists, outs, strict=True)
    ]
    for p in processes:
        p.start()
    start.set()
    for p in processes:
        p.join(timeout=300)
    assert [p.exitcode for p in processes] == [0] * len(processes)
    return [json.loads(out.read_text()) for out in outs]


def test_eight_processes_capture_each_of_20000_tasks_exactly_once(
    store: jobq.Store, db_url: str, tmp_path: Path
) -> None:
    ids = store.enqueue_many("work", [{"i": i} for i in range(20_000)])
    seeds = random.Random(2026).sample(range(10**6), 8)
    results = run_processes(
        procs.capture_and_complete,
        [(db_url, f"worker-{n}", seed) for n, seed in enumerate(seeds)],
        tmp_path,
    )
    captured = [tuple(fence) for r in results for fence in r["captured"]]
    counts = Counter(task_id for task_id, _ in captured)
    assert len(captured) == 20_000, "a task was captured twice or missed"
    assert set(counts) == set(ids) and set(counts.values()) == {1}
    assert {attempt for _, attempt in captured} == {1}
    assert sum(r["refused"] for r in results) == 0
    assert all(len(r["captured"]) > 0 for r in results), "some process never captured"
    assert store.counts() == {("default", Status.DONE): 20_000}


def test_concurrent_enqueue_with_unique_keys_makes_one_row_per_key(
    store: jobq.Store, db_url: str, tmp_path: Path
) -> None:
    keys = [f"key-{k}" for k in range(20)]
    results = run_processes(
        procs.enqueue_unique,
        [(db_url, random.Random(n).sample(keys, len(keys)), 5) for n in range(6)],
        tmp_path,
    )
    rows = all_rows(store)
    assert sorted(r["unique_key"] for r in rows) == sorted(keys)
    by_key = {r["unique_key"]: r["id"] for r in rows}
    for result in results:
        for key, returned in result.items():
            assert set(returned) == {by_key[key]}
