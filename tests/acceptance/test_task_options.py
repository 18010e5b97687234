"""What ``@app.task(...)`` says holds however the task was enqueued (issue 18).

`jobq enqueue` applies a task's definition when it has the app (--app or $JOBQ_APP), for
one task and for --file alike, and says on stderr what it could not apply without one;
the worker applies the definition's lease and timeout to rows that set none, while a
lease or timeout given at enqueue wins; a name the worker does not know fails once.
Everything runs as users run it: `jobq` commands and `jobq worker` processes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

import jobq
from tests.acceptance.test_cli import Cli, Done, failure
from tests.acceptance.test_worker_processes import wait_until
from tests.helpers import all_rows
from tests.worker_processes import Workers

APP = "tests.apps.defined:app"


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


@pytest.fixture
def workers(db_url: str, tmp_path: Path) -> Iterator[Workers]:
    started = Workers(APP, db_url, tmp_path)
    yield started
    started.kill_all()


def held_for(task: jobq.Task) -> float:
    """Seconds of the lease ``task``'s capture gave it."""
    assert task.locked_until is not None and task.started_at is not None
    return (task.locked_until - task.started_at).total_seconds()


def ok(done: Done) -> str:
    assert done.returncode == 0, (done.args, done.stdout, done.stderr)
    return done.stdout


def write_lines(path: Path, *lines: dict[str, object]) -> str:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


# --- jobq enqueue with an app -------------------------------------------------------------


@pytest.mark.parametrize("app_from", ["--app", "JOBQ_APP"])
def test_enqueue_with_an_app_applies_unique_queue_priority_retries_and_lock(
    cli: Cli, db_url: str, tmp_path: Path, app_from: str
) -> None:
    """Two `report` enqueues for one day make one row; `ledger` gets its lock key."""
    args, env = (["--app", APP], None) if app_from == "--app" else ([], {"JOBQ_APP": APP})
    report = ["enqueue", "report", "--kwargs", '{"day": "2026-11-24"}', *args]
    first, second = (cli(db_url, *report, env=env) for _ in range(2))
    assert ok(first) == ok(second)
    assert first.stderr == second.stderr == ""
    ok(cli(db_url, "enqueue", "ledger", "--kwargs", '{"account": "a1", "amount": 3}', *args,
           env=env))  # fmt: skip
    lines = write_lines(
        tmp_path / "tasks.jsonl",
        {"name": "report", "kwargs": {"day": "2026-11-24"}},
        {"name": "report", "kwargs": {"day": "2026-11-25"}, "priority": 9},
        {"name": "ledger", "kwargs": {"account": "b2", "amount": 1}},
    )
    assert ok(cli(db_url, "enqueue", "--file", lines, *args, env=env)) == "enqueued 3 tasks\n"
    rows = {(row["name"], json.dumps(row["args"])): row for row in all_rows(jobq.Store(db_url))}
    assert len(rows) == 4  # the second day-24 report is the first one
    day24 = rows[("report", '{"day": "2026-11-24"}')]
    assert (day24["unique_key"], day24["queue_id"], day24["priority"], day24["retries_left"]) == (
        "report:2026-11-24", "reports", 5, 0,
    )  # fmt: skip
    assert rows[("report", '{"day": "2026-11-25"}')]["priority"] == 9  # the line's own wins
    assert rows[("ledger", '{"account": "a1", "amount": 3}')]["lock_key"] == "ledger:a1"
    assert rows[("ledger", '{"account": "b2", "amount": 1}')]["lock_key"] == "ledger:b2"
    assert all(row["lease"] is None for row in rows.values())  # the worker's definition's
    # The timeout is stored, for `jobq status` to tell a run past it.
    assert {row["name"]: row["timeout"] for row in rows.values()} == {"report": None, "ledger": 60}


def test_enqueue_options_given_explicitly_win_over_the_definition(cli: Cli, db_url: str) -> None:
    done = cli(
        db_url, "enqueue", "report", "--app", APP, "--kwargs", '{"day": "d"}',
        "--queue", "urgent", "--priority", "1", "--retries", "4", "--unique", "mine",
    )  # fmt: skip
    (row,) = all_rows(jobq.Store(db_url))
    assert row["id"] == int(ok(done))
    assert (row["queue_id"], row["priority"], row["retries_left"], row["unique_key"]) == (
        "urgent", 1, 4, "mine",
    )  # fmt: skip


def test_a_file_checked_against_the_app_is_refused_whole_at_its_first_bad_line(
    cli: Cli, db_url: str, tmp_path: Path
) -> None:
    good = {"name": "report", "kwargs": {"day": "d"}}
    for bad, says in [
        ({"name": "ghost", "kwargs": {"x": 1}}, "No task named 'ghost' is registered in this app"),
        ({"name": "ledger", "kwargs": {"amount": 1}},
         "task 'ledger': missing a required argument: 'account'"),
        ({"name": "report", "kwargs": {"day": "d", "extra": 1}},
         "task 'report': got an unexpected keyword argument 'extra'"),
    ]:  # fmt: skip
        lines = write_lines(tmp_path / "tasks.jsonl", good, bad)
        line = failure(cli(db_url, "enqueue", "--file", lines, "--app", APP))
        assert line.startswith(f"error: {lines} line 2: {says}"), line
    assert all_rows(jobq.Store(db_url)) == []


# --- jobq enqueue without an app ----------------------------------------------------------


def test_enqueue_without_an_app_says_what_it_could_not_apply(
    cli: Cli, db_url: str, tmp_path: Path
) -> None:
    done = cli(db_url, "enqueue", "report", "--kwargs", '{"day": "d"}', "--queue", "reports")
    ok(done)
    assert done.stderr == (
        "warning: no app given (--app or $JOBQ_APP), so task 'report''s own priority, "
        "retries, unique key, fair key, lock key from its @app.task definition could not be "
        "applied; jobq's defaults stand where the command gave none\n"
    )
    lines = write_lines(tmp_path / "tasks.jsonl", {"name": "report", "kwargs": {"day": "e"}})
    from_file = cli(db_url, "enqueue", "--file", lines)
    assert ok(from_file) == "enqueued 1 task\n"
    assert "warning: no app given (--app or $JOBQ_APP), so the tasks' own queue, " in (
        from_file.stderr
    )
    (row, _) = all_rows(jobq.Store(db_url))
    assert (row["queue_id"], row["retries_left"], row["unique_key"]) == ("reports", 3, None)


# --- the worker applies its definition ----------------------------------------------------


def test_a_killed_workers_run_comes_back_after_the_definitions_lease(
    cli: Cli, db_url: str, store: jobq.Store, workers: Workers
) -> None:
    """`sleepy` says lease=2: enqueued by name, its run is held 2 s, not 30, and after
    kill -9 another worker runs it once the 2 s have passed."""
    task_id = int(ok(cli(db_url, "enqueue", "sleepy", "--kwargs", '{"seconds": 60}')))
    first = workers.start()
    wait_until(lambda: store.get(task_id).status is jobq.Status.IN_PROGRESS)  # type: ignore[union-attr]
    running = store.get(task_id)
    assert running is not None and running.lease is None
    assert 1.5 <= held_for(running) <= 2.5
    first.process.kill()
    first.process.wait(timeout=30)
    killed_at = datetime.now(running.locked_until.tzinfo)  # type: ignore[union-attr]
    workers.start()
    wait_until(lambda: store.get(task_id).attempt == 2)  # type: ignore[union-attr]
    again = store.get(task_id)
    assert again is not None and again.started_at is not None
    assert again.started_at >= running.locked_until  # type: ignore[operator]
    assert (again.started_at - killed_at).total_seconds() < 25  # far sooner than 30 s


def test_a_lease_and_timeout_given_at_enqueue_win_over_the_definitions(
    store: jobq.Store, workers: Workers
) -> None:
    held = store.enqueue("sleepy", {"seconds": 60}, lease=7)
    timed = store.enqueue("nap", {"seconds": 3}, timeout=0.5, retries=0)
    workers.start()
    wait_until(lambda: store.get(held).status is jobq.Status.IN_PROGRESS)  # type: ignore[union-attr]
    assert 6.5 <= held_for(store.get(held)) <= 7.5  # type: ignore[arg-type]
    wait_until(lambda: store.get(timed).status is jobq.Status.FAILED)  # type: ignore[union-attr]
    failed = store.get(timed)
    assert failed is not None and (failed.error or "").startswith("timed out after 0.5")


def test_a_task_enqueued_by_name_gets_the_definitions_timeout(
    cli: Cli, db_url: str, store: jobq.Store, workers: Workers
) -> None:
    # --retries 0: one attempt shows the timeout; the row's default three retries would
    # sit through three more 3 s naps and their backoffs (19 s, not 4).
    args = ["enqueue", "short_nap", "--kwargs", '{"seconds": 3}', "--retries", "0"]
    task_id = int(ok(cli(db_url, *args)))
    assert store.get(task_id).timeout is None  # type: ignore[union-attr]
    finished = workers.start("--burst")
    assert finished.process.wait(timeout=60) == 0, finished.stderr()
    task = store.get(task_id)
    assert task is not None and task.status is jobq.Status.FAILED
    assert task.error == "timed out after 0.5 s", task.error
    assert (task.attempt, task.retries_left) == (1, 0)


def test_a_name_the_worker_does_not_know_fails_once_for_good(
    cli: Cli, db_url: str, store: jobq.Store, workers: Workers
) -> None:
    task_id = int(ok(cli(db_url, "enqueue", "ghost", "--retries", "3")))
    finished = workers.start("--burst")
    assert finished.process.wait(timeout=60) == 0, finished.stderr()
    task = store.get(task_id)
    assert task is not None
    assert (task.status, task.attempt, task.retries_left) == (jobq.Status.FAILED, 1, 0)
    assert task.error == "task 'ghost' is not registered in this worker"
    assert store.capture(10, worker_id="w") == []  # not to be tried again


def test_retries_zero_from_the_definition_means_one_attempt(
    cli: Cli, db_url: str, store: jobq.Store, workers: Workers
) -> None:
    """Enqueued with the app, `report` (retries=0) fails once and stays failed."""
    task_id = int(ok(cli(db_url, "enqueue", "report", "--app", APP, "--kwargs", '{"day": "d"}')))
    finished = workers.start("--burst", env={"JOBQ_TEST_FAIL_REPORT": "1"})
    assert finished.process.wait(timeout=60) == 0, finished.stderr()
    task = store.get(task_id)
    assert task is not None and (task.status, task.attempt) == (jobq.Status.FAILED, 1)


def test_a_number_as_backoff_is_honoured_and_the_tasks_own_error_is_stored(
    cli: Cli, db_url: str, store: jobq.Store, workers: Workers
) -> None:
    """`unlucky` says retries=1, backoff=1: its retry starts a second after its first
    failure, both failures log their line, and the error stored is the task's own."""
    task_id = int(ok(cli(db_url, "enqueue", "unlucky", "--app", APP, "--kwargs", '{"name": "x"}')))
    finished = workers.start("--burst", "--log-format", "json")
    assert finished.process.wait(timeout=60) == 0, finished.stderr()
    task = store.get(task_id)
    assert task is not None and (task.status, task.attempt) == (jobq.Status.FAILED, 2)
    assert task.error is not None and "RuntimeError: no luck for x" in task.error
    assert "has no attribute" not in task.error
    lines: list[dict[str, Any]] = [json.loads(line) for line in finished.stderr().splitlines()]
    assert not [line for line in lines if line["logger"] == "jobq.retry"]  # no fallback
    runs = [line for line in lines if line.get("task_id") == task_id]
    starts = {line["attempt"]: line for line in runs if line["message"].endswith("started")}
    ends = {line["attempt"]: line for line in runs if line.get("status") == "failed"}
    assert sorted(starts) == sorted(ends) == [1, 2], runs
    assert ends[1]["error"] == ends[2]["error"] == "RuntimeError: no luck for x"
    assert (ends[1]["retry_in"], ends[1]["final"], ends[2]["final"]) == (1.0, False, True)
    waited = datetime.fromisoformat(starts[2]["time"]) - datetime.fromisoformat(ends[1]["time"])
    # The end is recorded (run_at = the database's now + 1 s) after its line is logged.
    assert waited.total_seconds() >= 0.95, (ends[1], starts[2])
