"""Per-task lock keys (``@app.task(lock=...)``): two runs of one key never overlap.

Capture takes no row whose key an in_progress row holds, and of the due rows of one key
only the earliest; a row of a busy key just waits, spending no retry. Checked on one
Store, and with four `jobq worker` processes recording when each run entered and left.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

import jobq
from jobq import Status
from tests.acceptance.test_worker_processes import stop_workers, wait_until, worker
from tests.apps import mixed
from tests.helpers import all_rows

HOLDERS = 5
TASKS = 200


@pytest.fixture
def app_store(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[jobq.Store]:
    """The mixed app's Store on ``db_url``, with an empty intervals table beside it."""
    monkeypatch.setenv("JOBQ_DATABASE_URL", db_url)
    monkeypatch.setattr(mixed, "_effects_engine", None)
    store = jobq.Store(db_url)
    monkeypatch.setattr(mixed.app, "_store", store)
    mixed.create_intervals_table()
    with mixed.effects().begin() as conn:
        conn.execute(sa.delete(mixed.INTERVALS))
    yield store
    store.dispose()
    mixed.effects().dispose()


def intervals() -> list[dict[str, Any]]:
    """Every recorded run of ``ledger``: holder, n, pid, entered, exited."""
    with mixed.effects().connect() as conn:
        return [dict(r._mapping) for r in conn.execute(sa.select(mixed.INTERVALS))]


def overlaps(runs: list[dict[str, Any]]) -> list[tuple[int, int, int]]:
    """(holder, n, n) of each run that entered before the run of its holder before it left."""
    found = []
    for holder in {run["holder"] for run in runs}:
        mine = sorted((r for r in runs if r["holder"] == holder), key=lambda r: r["entered"])
        for before, after in itertools.pairwise(mine):
            if after["entered"] < before["exited"]:
                found.append((holder, before["n"], after["n"]))
    return found


# --- one Store --------------------------------------------------------------------------


def test_capture_takes_one_row_per_lock_key_and_the_next_once_it_is_free(
    store: jobq.Store,
) -> None:
    """Capture takes only the earliest due row of a key; the rest wait, spending nothing."""
    first = store.enqueue("post", {"n": 1}, lock_key="ledger:1", retries=2)
    second = store.enqueue("post", {"n": 2}, lock_key="ledger:1", retries=2)
    other = store.enqueue("post", {"n": 3}, lock_key="ledger:2", retries=2)
    free = store.enqueue("post", {"n": 4}, retries=2)

    taken = store.capture(10, worker_id="w1")
    assert sorted(t.id for t in taken) == [first, other, free]
    assert store.capture(10, worker_id="w2") == []  # ledger:1 is held
    waiting = store.get(second)
    assert waiting is not None
    assert (waiting.status, waiting.attempt, waiting.retries_left) == (Status.QUEUED, 0, 2)

    assert store.set_status(first, 1, Status.DONE)
    (again,) = store.capture(10, worker_id="w2")
    assert (again.id, again.attempt, again.retries_left, again.locked_by) == (second, 1, 2, "w2")
    assert again.lock_key == "ledger:1"


def test_a_key_held_by_a_failed_run_waiting_to_retry_blocks_later_rows_once_due(
    store: jobq.Store,
) -> None:
    """A failed row of a key keeps its place: once due it goes before later rows of the key."""
    first = store.enqueue("post", {"n": 1}, lock_key="k", retries=1)
    second = store.enqueue("post", {"n": 2}, lock_key="k", retries=1)
    (run,) = store.capture(10, worker_id="w")
    assert run.id == first
    assert store.set_status(first, 1, Status.FAILED, error="boom", retry_delay=0)
    (retry,) = store.capture(10, worker_id="w")  # the retry, not the second row
    assert (retry.id, retry.attempt, retry.retries_left) == (first, 2, 0)
    assert store.set_status(first, 2, Status.DONE)
    (then,) = store.capture(10, worker_id="w")
    assert (then.id, then.attempt) == (second, 1)


def test_lock_template_fills_lock_key_from_the_arguments(app: jobq.App) -> None:
    """The template becomes each row's lock_key, one per entry of enqueue_many too."""

    @app.task(lock="ledger:{holder}")
    def post(holder: int, amount: int = 0) -> None: ...

    one = post.enqueue(holder=7)
    many = post.enqueue_many([{"holder": 8}, {"holder": 7, "amount": 2}])
    keys = {r["id"]: r["lock_key"] for r in all_rows(app.store)}
    assert [keys[i] for i in [one, *many]] == ["ledger:7", "ledger:8", "ledger:7"]


def test_a_lock_template_naming_an_unknown_argument_fails_at_decoration(app: jobq.App) -> None:
    """A typo in the template is an InvalidOption when the task is defined, not at run time."""
    with pytest.raises(jobq.InvalidOption, match=r"'ledger:\{holdr\}'.*'holdr'"):

        @app.task(lock="ledger:{holdr}")
        def post(holder: int) -> None: ...

    assert "post" not in app.registry


def test_a_kwargs_task_missing_its_lock_field_fails_at_enqueue_and_writes_nothing(
    app: jobq.App,
) -> None:
    """With **kwargs the field is checked per enqueue: InvalidTaskArguments, no row written."""

    @app.task(lock="ledger:{holder}")
    def post(**kwargs: Any) -> None: ...

    needs = r"task 'post': lock template 'ledger:\{holder\}' needs argument 'holder'"
    with pytest.raises(jobq.InvalidTaskArguments, match=needs):
        post.enqueue(amount=1)
    with pytest.raises(jobq.InvalidTaskArguments, match=needs):
        app.enqueue("post", {"amount": 1})
    with pytest.raises(jobq.InvalidTaskArguments, match=needs):
        post.enqueue_many([{"holder": 1}, {"amount": 1}])  # the good first entry is not kept
    assert all_rows(app.store) == []
    assert app.store.get(post.enqueue(holder=1, amount=1)).lock_key == "ledger:1"  # type: ignore[union-attr]


def test_enqueue_many_in_the_callers_transaction_writes_nothing_for_a_missing_lock_field(
    app: jobq.App,
) -> None:
    """Every entry's lock key is checked before any is written, in the caller's transaction too.

    Else a caller that handles the error and commits keeps the entries before the bad one.
    """

    @app.task(lock="ledger:{holder}")
    def post(**kwargs: Any) -> None: ...

    needs = "needs argument 'holder'"
    with app.store.engine.begin() as conn, pytest.raises(jobq.InvalidTaskArguments, match=needs):
        post.enqueue_many([{"holder": 1}, {"amount": 1}], _connection=conn)
    assert all_rows(app.store) == []


# --- worker processes ---------------------------------------------------------------------


@pytest.mark.slow
def test_four_workers_never_overlap_two_runs_of_one_lock_key(
    app_store: jobq.Store, db_url: str
) -> None:
    """200 runs over 5 keys on 4 workers: per key no overlap and id order, no retry spent."""
    ids = mixed.ledger.enqueue_many([{"holder": n % HOLDERS, "n": n} for n in range(TASKS)])
    # Warnings only: 400 INFO lines could fill a worker's stderr pipe (64 KB) before
    # communicate() reads it, and a worker blocked writing its log never stops.
    processes = [worker(db_url, "--concurrency", "4", "--log-level", "warning") for _ in range(4)]
    try:
        wait_until(
            lambda: (
                app_store.counts() == {("default", Status.DONE): TASKS}
                or any(p.poll() is not None for p in processes)
            ),
            timeout=120,
        )
    finally:
        ended = stop_workers(processes, app_store)
    for process, (_out, err) in zip(processes, ended, strict=True):
        assert process.returncode == 0, err
        assert "Traceback" not in err and " ERROR " not in err, err  # no capture failed
    assert app_store.counts() == {("default", Status.DONE): TASKS}

    rows = {r["id"]: r for r in all_rows(app_store)}
    for n, task_id in enumerate(ids):
        row = rows[task_id]
        assert (row["attempt"], row["retries_left"]) == (1, 0), row
        assert row["lock_key"] == f"ledger:{n % HOLDERS}"
    runs = intervals()
    assert sorted((r["holder"], r["n"]) for r in runs) == sorted(
        (n % HOLDERS, n) for n in range(TASKS)
    )
    assert overlaps(runs) == []
    for holder in range(HOLDERS):  # the rows of one key run in the order they were enqueued
        mine = sorted((r for r in runs if r["holder"] == holder), key=lambda r: r["entered"])
        assert [r["n"] for r in mine] == list(range(holder, TASKS, HOLDERS))
    assert len({r["pid"] for r in runs}) > 1, "more than one worker ran tasks"


@pytest.mark.slow
def test_a_burst_worker_drains_every_row_of_one_lock_key(
    app_store: jobq.Store, db_url: str
) -> None:
    """--burst exits only when nothing is left to run: not while rows wait for a key it freed."""
    mixed.ledger.enqueue_many([{"holder": 1, "n": n} for n in range(10)])
    process = worker(db_url, "--burst", "--concurrency", "4")
    _out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert app_store.counts() == {("default", Status.DONE): 10}
    assert [r["n"] for r in sorted(intervals(), key=lambda r: r["entered"])] == list(range(10))
