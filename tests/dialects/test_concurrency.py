"""Concurrency claims, proven with real OS processes hammering one database."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

import jobq
from jobq import Status
from tests import procs, shared_database
from tests.helpers import all_rows
from tests.procs import run_processes

#: One migrated database per backend for the module, emptied before each test.
backend, shared_url, db_url = shared_database.FIXTURES

pytestmark = pytest.mark.slow


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
