"""`jobq cancel ID | --queue Q`, `jobq purge QUEUE --yes` and what `jobq show` says of a
task's progress and cancel request, run as a user runs them, on every database; and a
purge of 200,000 waiting tasks while real workers run the same queue and another.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

import jobq
from jobq import Status
from jobq.dialects.schema import tasks
from tests.acceptance.test_cli import (
    UNREACHABLE,
    Cli,
    failure,
    sqlite_only,
    terminally_failed,
    usage_error,
)
from tests.acceptance.test_worker_processes import wait_until
from tests.apps import lifecycle_bulk
from tests.helpers import all_rows, set_columns
from tests.worker_processes import Worker, Workers


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


def shown(stdout: str) -> list[tuple[str, str]]:
    """`jobq show`'s lines as (name, text)."""
    return [(name, text) for name, text in (line.split(None, 1) for line in stdout.splitlines())]


def running(store: jobq.Store, queue: str) -> int:
    """A task of ``queue`` captured now: in_progress."""
    task_id = store.enqueue("a", {}, queue=queue, priority=2**31 - 1)  # captured first
    (task,) = store.capture(1, queues=queue, worker_id="w-1")
    assert task.id == task_id
    return task_id


# --- cancel ID ------------------------------------------------------------------------------


def test_cancel_of_a_waiting_task_cancels_it(cli: Cli, db_url: str, store: jobq.Store) -> None:
    queued = store.enqueue("a", {})
    retrying = store.enqueue("b", {}, retries=2)
    set_columns(store, retrying, status="failed", attempt=1, retries_left=1, error="boom")
    results = cli.many(db_url, [["cancel", str(queued)], ["cancel", str(retrying)]])
    for task_id, done in zip([queued, retrying], results, strict=True):
        assert (done.returncode, done.stdout) == (0, f"cancelled task {task_id}\n"), done.stderr
        task = store.get(task_id)
        assert task is not None and task.status is Status.CANCELLED
        assert task.finished_at is not None


def test_cancel_of_a_running_task_requests_it(cli: Cli, db_url: str, store: jobq.Store) -> None:
    task_id = running(store, "default")
    done = cli(db_url, "cancel", str(task_id))
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert done.stdout == (
        f"task {task_id} is running: cancel requested; its worker stops it within a second\n"
    )
    task = store.get(task_id)
    assert task is not None and task.status is Status.IN_PROGRESS
    assert task.cancel_requested_at is not None and task.finished_at is None


def test_cancel_of_an_ended_unknown_or_recurring_task_is_one_error_line(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    done_id = running(store, "default")
    assert store.set_status(done_id, 1, "done")
    failed = terminally_failed(store, "b")
    cancelled = store.enqueue("c", {})
    assert store.cancel(cancelled)
    recurring = store.enqueue("tick", {})
    set_columns(store, recurring, recurring=True, status="done")
    before = all_rows(store)
    ids = [done_id, failed, cancelled, recurring, 999]
    results = cli.many(db_url, [["cancel", str(task_id)] for task_id in ids])
    assert [failure(done) for done in results] == [
        f"error: task {done_id} has already finished (done); nothing to cancel",
        f"error: task {failed} has already finished (failed); nothing to cancel",
        f"error: task {cancelled} has already finished (cancelled); nothing to cancel",
        f"error: task {recurring} is a schedule's recurring row; it cannot be cancelled "
        "(pause the schedule with `jobq cron disable`)",
        "error: no task with id 999",
    ]
    assert all_rows(store) == before


# --- cancel --queue ---------------------------------------------------------------------------


def test_cancel_queue_cancels_its_waiting_tasks_only(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    waiting = store.enqueue_many("a", [{}] * 3, queue="emails")
    retrying = store.enqueue("b", {}, queue="emails", retries=2)
    set_columns(store, retrying, status="failed", attempt=1, retries_left=1)
    task_running = running(store, "emails")
    finished = terminally_failed(store, "c", queue="emails")
    elsewhere = store.enqueue("d", {}, queue="other")
    one = store.enqueue("e", {}, queue="one")
    before = {row["id"]: row for row in all_rows(store)}
    emails, single, empty = cli.many(
        db_url,
        [["cancel", "--queue", "emails"], ["cancel", "--queue", "one"], ["cancel", "--queue", "x"]],
    )
    assert (emails.returncode, emails.stdout) == (
        0, "cancelled 4 waiting tasks of queue 'emails'\n",
    ), emails.stderr  # fmt: skip
    assert single.stdout == "cancelled 1 waiting task of queue 'one'\n", single.stderr
    assert empty.stdout == "cancelled 0 waiting tasks of queue 'x'\n", empty.stderr
    after = {row["id"]: row for row in all_rows(store)}
    assert {i for i, row in after.items() if row["status"] == "cancelled"} == {
        *waiting,
        retrying,
        one,
    }
    for task_id in (task_running, finished, elsewhere):
        assert after[task_id] == before[task_id]


def test_cancel_queue_prints_the_count_with_thousands_separators(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    store.enqueue_many("a", [{}] * 1_234, queue="emails")
    done = cli(db_url, "cancel", "--queue", "emails")
    assert done.stdout == "cancelled 1,234 waiting tasks of queue 'emails'\n", done.stderr


@sqlite_only
def test_cancel_needs_exactly_one_of_id_or_queue(cli: Cli, db_url: str, store: jobq.Store) -> None:
    task_id = store.enqueue("a", {}, queue="q")
    before = all_rows(store)
    neither, both, empty_queue = cli.many(
        db_url, [["cancel"], ["cancel", str(task_id), "--queue", "q"], ["cancel", "--queue", ""]]
    )
    assert usage_error(neither) == "Error: give a task ID or --queue (exactly one)"
    assert usage_error(both) == "Error: give a task ID or --queue (exactly one)"
    assert usage_error(empty_queue).startswith("Error: Invalid value for '--queue'")
    assert all_rows(store) == before


# --- purge -----------------------------------------------------------------------------------


def test_purge_deletes_the_waiting_tasks_of_a_queue(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    store.enqueue_many("a", [{}] * 3, queue="emails")
    retrying = store.enqueue("b", {}, queue="emails", retries=2)
    set_columns(store, retrying, status="failed", attempt=1, retries_left=1)
    kept = [
        running(store, "emails"),
        terminally_failed(store, "c", queue="emails"),
        store.enqueue("d", {}, queue="other"),
    ]
    cancelled = store.enqueue("e", {}, queue="emails")
    assert store.cancel(cancelled)
    kept.append(cancelled)
    before = {row["id"]: row for row in all_rows(store)}
    done = cli(db_url, "purge", "emails", "--yes")
    assert (done.returncode, done.stdout) == (0, "deleted 4 waiting tasks of queue 'emails'\n")
    assert {row["id"]: row for row in all_rows(store)} == {i: before[i] for i in kept}
    again = cli(db_url, "purge", "emails", "--yes")
    assert again.stdout == "deleted 0 waiting tasks of queue 'emails'\n", again.stderr


@sqlite_only
def test_purge_without_yes_refuses_and_deletes_nothing(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    store.enqueue_many("a", [{}] * 3, queue="emails")
    before = all_rows(store)
    no_yes, no_queue, empty_queue = cli.many(
        db_url, [["purge", "emails"], ["purge", "--yes"], ["purge", "", "--yes"]]
    )
    assert usage_error(no_yes) == (
        "Error: purge deletes every waiting task of queue 'emails' for good; add --yes to do it"
    )
    assert no_yes.stdout == ""
    assert usage_error(no_queue) == "Error: Missing argument 'QUEUE'."
    assert usage_error(empty_queue).startswith("Error: Invalid value for 'QUEUE'")
    assert all_rows(store) == before


# --- show ------------------------------------------------------------------------------------


def test_show_prints_progress_and_a_cancel_request(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    with_total = running(store, "default")
    set_columns(
        store, with_total, progress={"current": 40, "total": 100, "message": "resizing images"}
    )
    assert store.cancel(with_total)
    bare = running(store, "other")
    set_columns(store, bare, progress={"current": 40.0, "total": None, "message": None})
    nothing = store.enqueue("a", {})
    first, second, third = cli.many(
        db_url, [["show", str(with_total)], ["show", str(bare)], ["show", str(nothing)]]
    )
    lines = shown(first.stdout)
    assert [name for name, _ in lines if name != "note"] == [
        name for name, _ in shown(third.stdout)
    ]
    assert dict(lines)["progress"] == "40/100 resizing images"
    requested = dict(lines)["cancel_requested_at"]
    assert requested.startswith(str(datetime.now(UTC).year))
    note = f"cancel requested at {requested}; its worker stops the run within a second"
    assert ("note", note) in lines
    assert dict(shown(second.stdout))["progress"] == "40"
    assert "note" not in dict(shown(second.stdout))
    unset = dict(shown(third.stdout))
    assert (unset["progress"], unset["cancel_requested_at"]) == ("-", "-")


# --- databases that cannot be used -------------------------------------------------------------

COMMANDS = [["cancel", "--queue", "q"], ["purge", "q", "--yes"]]


def test_an_unreachable_database_is_one_line_without_the_password(cli: Cli) -> None:
    for args, done in zip(COMMANDS, cli.many(UNREACHABLE, COMMANDS), strict=True):
        line = failure(done)
        assert line.startswith("error: Cannot connect to database 'x' on 127.0.0.1:1: "), args
        assert "secret" not in done.stderr + done.stdout, args


def test_an_unmigrated_database_says_to_run_jobq_migrate(cli: Cli, empty_url: str) -> None:
    for args, done in zip(COMMANDS, cli.many(empty_url, COMMANDS), strict=True):
        assert failure(done).startswith("error: The jobq tables are missing or out of date"), args


# --- a purge while workers run ----------------------------------------------------------------

BACKLOG = 200_000


@pytest.fixture
def app_store(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[jobq.Store]:
    """A Store on ``db_url`` (the app's too), with an empty runs table beside it."""
    monkeypatch.setenv("JOBQ_DATABASE_URL", db_url)
    lifecycle_bulk.app.store = store = jobq.Store(db_url)
    lifecycle_bulk.LOG.empty()
    yield store
    store.dispose()
    lifecycle_bulk.LOG.dispose()


@pytest.fixture
def workers(db_url: str, tmp_path: Path) -> Iterator[Workers]:
    started = Workers("tests.apps.lifecycle_bulk:app", db_url, tmp_path, ["--log-level", "warning"])
    yield started
    started.kill_all()


def statuses(store: jobq.Store, queue: str) -> dict[int, str]:
    with store.engine.connect() as conn:
        rows = conn.execute(sa.select(tasks.c.id, tasks.c.status).where(tasks.c.queue_id == queue))
        return {task_id: status for task_id, status in rows}


def running_ids(store: jobq.Store, queue: str) -> set[int]:
    stmt = sa.select(tasks.c.id).where(tasks.c.queue_id == queue, tasks.c.status == "in_progress")
    with store.engine.connect() as conn:
        return set(conn.scalars(stmt))


def runs(queue: str) -> list[int]:
    """The ids of the tasks of ``queue`` whose runs began."""
    table = lifecycle_bulk.RUNS
    with lifecycle_bulk.LOG.engine().connect() as conn:
        return list(conn.scalars(sa.select(table.c.task_id).where(table.c.queue == queue)))


def in_progress(store: jobq.Store, queue: str) -> int:
    return store.counts().get((queue, Status.IN_PROGRESS), 0)


def stop(*started: Worker) -> None:
    """SIGTERM the workers and check that each exits cleanly."""
    for worker in started:
        worker.process.terminate()
    for worker in started:
        worker.process.wait(timeout=60)
        assert worker.process.returncode == 0, worker.stderr()
        assert "Traceback" not in worker.stderr(), worker.stderr()


@pytest.mark.slow
def test_a_purge_of_200_000_tasks_leaves_every_running_one_alone(
    cli: Cli, db_url: str, app_store: jobq.Store, workers: Workers
) -> None:
    """Two workers run queue ``bulk`` (200,000 tasks waiting) and queue ``other``; a purge
    of ``bulk`` then deletes every waiting task of it, and nothing else: each task that
    ran, or was running, ends done; those and the purged ones make 200,000."""
    store = app_store
    for _ in range(0, BACKLOG, 25_000):
        store.enqueue_many("nap", [{"seconds": 0.02}] * 25_000, queue="bulk", retries=0)
    others = store.enqueue_many("nap", [{"seconds": 0.1}] * 200, queue="other", retries=0)
    bulk_worker = workers.start("--queues", "bulk", "--concurrency", "4")
    other_worker = workers.start("--queues", "other", "--concurrency", "4")
    wait_until(
        lambda: in_progress(store, "bulk") > 0 and in_progress(store, "other") > 0, timeout=60
    )
    wait_until(lambda: len(runs("bulk")) >= 20, timeout=60)
    running_before: set[int] = set()  # the last look, once it found some running

    def some_running() -> bool:
        running_before.update(running_ids(store, "bulk"))
        return bool(running_before)

    wait_until(some_running, timeout=60)

    done = cli(db_url, "purge", "bulk", "--yes")
    assert done.returncode == 0, done.stderr
    match = re.fullmatch(r"deleted ([\d,]+) waiting tasks of queue 'bulk'\n", done.stdout)
    assert match, done.stdout
    purged = int(match.group(1).replace(",", ""))
    left = statuses(store, "bulk")
    assert "queued" not in left.values() and "failed" not in left.values(), [
        store.get(task_id) for task_id, status in left.items() if status in ("queued", "failed")
    ]
    assert in_progress(store, "other") + len(runs("other")) > 0  # the other queue ran on

    # What ran, or was running, during the purge ends done; the other queue's tasks too.
    wait_until(lambda: in_progress(store, "bulk") == 0, timeout=60)
    wait_until(lambda: set(statuses(store, "other").values()) == {"done"}, timeout=60)
    stop(bulk_worker, other_worker)
    left = statuses(store, "bulk")
    ran = runs("bulk")
    assert len(ran) == len(set(ran)), "a task of bulk ran twice"
    assert running_before <= set(left)
    assert set(left.values()) == {"done"}
    assert set(left) == set(ran), "a run's row was deleted, or a row ended done unrun"
    assert purged + len(ran) == BACKLOG
    assert sorted(statuses(store, "other")) == others
    assert sorted(runs("other")) == others
