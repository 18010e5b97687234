"""Bad input gets a clear error naming what is wrong, and nothing is written."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

import jobq
from jobq import Status
from tests import shared_database
from tests.helpers import all_rows

#: One migrated database per backend for the module, emptied before each test.
backend, shared_url, db_url = shared_database.FIXTURES

Call = Callable[[jobq.Store, jobq.Task], Any]

BAD_CALLS: list[tuple[str, Call, type[Exception], str]] = [
    ("unknown status", lambda s, t: s.set_status(t.id, t.attempt, "finished"), jobq.UnknownStatus,
     "'finished'"),
    ("status in_progress", lambda s, t: s.set_status(t.id, t.attempt, Status.IN_PROGRESS),
     jobq.InvalidOption, "status"),
    ("non-JSON result", lambda s, t: s.set_status(t.id, t.attempt, "done", result={1, 2}),
     jobq.InvalidOption, "result"),
    ("non-JSON argument", lambda s, t: s.enqueue("t", {"ok": 1, "when": datetime.now(UTC)}),
     jobq.InvalidTaskArguments, "'when'"),
    ("NaN argument", lambda s, t: s.enqueue("t", {"ratio": math.nan}),
     jobq.InvalidTaskArguments, "'ratio'"),
    ("nested non-JSON", lambda s, t: s.enqueue("t", {"deep": {"x": [object()]}}),
     jobq.InvalidTaskArguments, "'deep'"),
    ("args not a mapping", lambda s, t: s.enqueue("t", [1, 2]),  # type: ignore[arg-type]
     jobq.InvalidTaskArguments, "mapping"),
    ("non-string argument name", lambda s, t: s.enqueue("t", {1: "x"}),  # type: ignore[dict-item]
     jobq.InvalidTaskArguments, "1"),
    ("one bad row in a batch", lambda s, t: s.enqueue_many("t", [{"a": 1}, {"a": b"x"}]),
     jobq.InvalidTaskArguments, "'a'"),
    ("negative limit", lambda s, t: s.capture(-1, worker_id="w"), jobq.InvalidOption, "limit"),
    ("negative retries", lambda s, t: s.enqueue("t", {}, retries=-1), jobq.InvalidOption,
     "retries"),
    ("negative delay", lambda s, t: s.enqueue("t", {}, delay=-5), jobq.InvalidOption, "delay"),
    ("infinite delay", lambda s, t: s.enqueue("t", {}, delay=math.inf), jobq.InvalidOption,
     "delay"),
    ("run_at and delay", lambda s, t: s.enqueue("t", {}, delay=1, run_at=datetime.now(UTC)),
     jobq.InvalidOption, "run_at"),
    ("zero lease", lambda s, t: s.enqueue("t", {}, lease=0), jobq.InvalidOption, "lease"),
    ("empty name", lambda s, t: s.enqueue("", {}), jobq.InvalidOption, "name"),
    ("long queue", lambda s, t: s.enqueue("t", {}, queue="q" * 300), jobq.InvalidOption, "queue"),
    ("bool priority", lambda s, t: s.enqueue("t", {}, priority=True), jobq.InvalidOption,
     "priority"),
    ("negative retry_delay", lambda s, t: s.set_status(t.id, t.attempt, "failed", retry_delay=-1),
     jobq.InvalidOption, "retry_delay"),
    ("run_at not a datetime", lambda s, t: s.set_status(t.id, t.attempt, "failed", run_at="soon"),
     jobq.InvalidOption, "run_at"),
    ("enqueue run_at not a datetime", lambda s, t: s.enqueue("t", {}, run_at=1700000000),
     jobq.InvalidOption, "run_at"),
    ("attempt zero", lambda s, t: s.set_status(t.id, 0, "done"), jobq.InvalidOption, "attempt"),
    ("missing worker id", lambda s, t: s.capture(1, worker_id=""), jobq.InvalidOption,
     "worker_id"),
    ("negative prune age", lambda s, t: s.prune(-1), jobq.InvalidOption, "older_than"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("call", "error", "named"), [c[1:] for c in BAD_CALLS], ids=[c[0] for c in BAD_CALLS]
)
def test_bad_input_is_refused_and_writes_nothing(
    store: jobq.Store, call: Call, error: type[Exception], named: str
) -> None:
    store.enqueue("t", {"x": 1})
    store.enqueue("u", {"y": 2}, unique_key="u")
    task = store.capture(1, worker_id="w")[0]
    before = all_rows(store)
    with pytest.raises(error) as raised:
        call(store, task)
    assert named in str(raised.value)
    assert all_rows(store) == before


def test_errors_are_also_the_builtin_kinds(store: jobq.Store) -> None:
    with pytest.raises(TypeError):
        store.enqueue("t", {"x": object()})
    with pytest.raises(ValueError):
        store.capture(-1, worker_id="w")
    with pytest.raises(ValueError):
        store.set_status(1, 1, "bogus")
