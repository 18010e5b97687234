"""Fair queues with real `jobq worker` processes (tests/apps/fair.py), on every database:
a tenant's backlog of 20,000 does not hold up 50 small tenants, weights share the starts,
and a key's cap holds across workers, counted from the runs' own clocks."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import jobq
from jobq import Status
from jobq.dialects.schema import tasks
from tests.acceptance.test_worker_processes import wait_until
from tests.apps import fair
from tests.worker_processes import Workers

pytestmark = pytest.mark.slow

c = tasks.c
STARTED = (Status.IN_PROGRESS.value, Status.DONE.value)


@pytest.fixture
def store(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[jobq.Store]:
    """A Store on ``db_url``, which the app (and its workers) use too."""
    monkeypatch.setenv("JOBQ_DATABASE_URL", db_url)
    fair.app.store = store = jobq.Store(db_url)
    yield store
    store.dispose()


@pytest.fixture
def workers(db_url: str, tmp_path: Path) -> Iterator[Workers]:
    started = Workers("tests.apps.fair:app", db_url, tmp_path, ["--log-level", "warning"])
    yield started
    started.kill_all()


def enqueue(tenant: str, n: int, ms: float = 0.0) -> None:
    fair.work.enqueue_many([{"tenant": tenant, "ms": ms}] * n)


def started_by_key(store: jobq.Store, since: Any = None, until: Any = None) -> Counter[str]:
    """Runs started (running or done) by fair key; those started after ``since`` and at
    ``until`` or before, if given."""
    stmt = sa.select(c.fair_key, sa.func.count()).where(c.status.in_(STARTED))
    if since is not None:
        stmt = stmt.where(c.started_at > since)
    if until is not None:
        stmt = stmt.where(c.started_at <= until)
    with store.engine.connect() as conn:
        return Counter(dict(conn.execute(stmt.group_by(c.fair_key)).all()))


@pytest.mark.parametrize("is_fair", [True, False], ids=["fair", "plain"])
def test_small_tenants_start_before_a_big_backlog_takes_a_thousand_more(
    store: jobq.Store, workers: Workers, is_fair: bool
) -> None:
    if is_fair:
        fair.app.fair_queue("shared")
    enqueue("big", 20_000)
    workers.start("--concurrency", "8")
    wait_until(lambda: started_by_key(store)["big"] >= 100, timeout=60)
    small = [f"t{n:02}" for n in range(50)]
    for tenant in small:
        enqueue(tenant, 20)
    with store.engine.connect() as conn:
        arrived = conn.execute(sa.select(sa.func.max(c.created_at))).scalar()

    def small_started() -> int:
        counts = started_by_key(store)
        return sum(counts[tenant] for tenant in small)

    if is_fair:
        wait_until(lambda: small_started() == 50 * 20, timeout=120)
        # Counted up to the last small start, from the rows: once the small tenants are
        # done, the backlog has the worker to itself (thousands a second) until this
        # test's poll sees it, which proves nothing about fairness.
        with store.engine.connect() as conn:
            last = sa.select(sa.func.max(c.started_at)).where(c.fair_key.in_(small))
            last_small = conn.execute(last).scalar()
        assert started_by_key(store, arrived, last_small)["big"] < 50 * 20
    else:  # the control: in plain order the backlog goes first
        wait_until(lambda: started_by_key(store, arrived)["big"] >= 50 * 20, timeout=120)
        assert small_started() == 0


def test_weights_share_the_starts_over_a_long_run(store: jobq.Store, workers: Workers) -> None:
    fair.app.fair_queue("shared", weights={"a": 3})
    enqueue("a", 3_000)
    enqueue("b", 3_000)
    for _ in range(2):
        workers.start("--concurrency", "8")
    wait_until(lambda: sum(started_by_key(store).values()) >= 2_000, timeout=120)
    for worker in workers.started:
        worker.process.terminate()
    for worker in workers.started:
        worker.process.wait(timeout=60)
    # The first 2,000 starts, from the rows: the workers go on until stopped, and "a",
    # which gets three in four, must not run out before the count is taken.
    first = (
        sa.select(c.fair_key).where(c.status.in_(STARTED)).order_by(c.started_at, c.id).limit(2_000)
    )
    with store.engine.connect() as conn:
        counts = Counter(conn.execute(first).scalars())
    assert 3 * 0.9 <= counts["a"] / counts["b"] <= 3 * 1.1, counts


def test_a_key_never_runs_more_than_its_cap_across_workers(
    store: jobq.Store, workers: Workers
) -> None:
    fair.app.fair_queue("shared", max_running_per_key=2)
    for tenant in ("a", "b", "c", "d"):
        enqueue(tenant, 30, ms=30)
    for _ in range(2):
        workers.start("--concurrency", "8")
    wait_until(lambda: store.counts().get(("shared", Status.DONE), 0) == 120, timeout=120)
    with store.engine.connect() as conn:
        rows = conn.execute(sa.select(c.fair_key, c.result)).all()
    most: Counter[str] = Counter()
    for key in ("a", "b", "c", "d"):
        spans = [row.result for row in rows if row.fair_key == key]
        events = sorted(
            [(span["began"], 1) for span in spans] + [(span["ended"], -1) for span in spans],
            key=lambda event: (event[0], event[1]),  # an end before a start at one instant
        )
        running = 0
        for _, change in events:
            running += change
            most[key] = max(most[key], running)
    assert max(most.values()) == 2, most  # the cap was reached, and never passed
