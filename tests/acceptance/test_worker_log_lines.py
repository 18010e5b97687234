"""What a real `jobq worker --burst` says in its log, and when it exits.

- A failed run's line says which attempt of how many it was and whether, when and at
  what time the task runs again; JSON lines carry the same as fields, and ``queue``.
- The "stopped" line is a sentence (JSON: ``worker_id`` and ``counts`` fields).
- --burst waits for tasks falling due within --burst-wait seconds (a retry a moment
  away), not for those due later, and says how many it leaves and when the next is due.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import jobq
from jobq import Status
from tests.acceptance.test_cli import Cli, sqlite_only

pytestmark = pytest.mark.slow

APP = "tests.apps.mixed:app"
#: The local time of a text log line (jobq.worker.logs.TEXT_FORMAT).
STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d{3} ")


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


def get(store: jobq.Store, task_id: int) -> jobq.Task:
    task = store.get(task_id)
    assert task is not None
    return task


def one_line(lines: list[str], *parts: str) -> str:
    """The one line holding every one of ``parts``."""
    found = [line for line in lines if all(part in line for part in parts)]
    assert len(found) == 1, f"{len(found)} lines hold {parts}:\n" + "\n".join(lines)
    return found[0]


def seconds_between(line: str, clock: str) -> float:
    """Seconds from ``line``'s own time to ``clock`` (HH:MM:SS, the same day or the next)."""
    stamp = STAMP.match(line)
    assert stamp is not None, line
    logged = datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S")
    at = datetime.combine(logged.date(), datetime.strptime(clock, "%H:%M:%S").time())
    if at < logged - timedelta(hours=12):
        at += timedelta(days=1)
    return (at - logged).total_seconds()


@sqlite_only
def test_a_failure_line_says_which_attempt_of_how_many_and_when_it_runs_again(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    again = store.enqueue("retry_after", {"delay": 30}, queue="mail", retries=3)
    final = store.enqueue("sleep", {"seconds": "not a number"}, retries=0)
    done = cli(db_url, "worker", "--app", APP, "--burst", "--queues", "mail,default")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()

    retrying = one_line(lines, f"WARNING jobq.task: task {again} retry_after failed in ")
    found = re.search(
        r" ms \(attempt 1 of 4\), retrying in 30\.0s at (\d\d:\d\d:\d\d): Retry: again in 30 s$",
        retrying,
    )
    assert found is not None, retrying
    assert 29 <= seconds_between(retrying, found.group(1)) <= 31, retrying
    for_good = one_line(lines, f"WARNING jobq.task: task {final} sleep failed for good in ")
    assert re.search(r" ms \(attempt 1 of 1\): TypeError: ", for_good), for_good
    assert (get(store, again).status, get(store, again).retries_left) == (Status.FAILED, 3)

    stopped = one_line(lines, "INFO jobq.worker: worker ", " stopped: ")
    assert stopped.endswith(" stopped: captured 2 tasks (2 failed)"), stopped


@sqlite_only
def test_json_lines_carry_the_queue_the_retry_and_the_stopped_counts(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    again = store.enqueue("retry_after", {"delay": 30}, queue="mail", retries=1)
    final = store.enqueue("sleep", {"seconds": "not a number"}, retries=0)
    ok = store.enqueue("double", {"n": 2}, queue="mail")
    done = cli(db_url, "worker", "--app", APP, "--burst", "--log-format", "json")
    assert done.returncode == 0, done.stderr
    records: list[dict[str, Any]] = [json.loads(line) for line in done.stderr.splitlines()]

    tasks = [r for r in records if r["logger"] == "jobq.task"]
    queues = {r["task_id"]: r["queue"] for r in tasks}
    assert queues == {again: "mail", final: "default", ok: "mail"}
    ends = {r["task_id"]: r for r in tasks if "status" in r}
    retrying, for_good = ends[again], ends[final]
    assert (retrying["attempt"], retrying["max_attempts"], retrying["final"]) == (1, 2, False)
    assert retrying["retry_in"] == 30.0 and retrying["error"] == "Retry: again in 30 s"
    logged = datetime.fromisoformat(retrying["time"])
    retry_at = datetime.fromisoformat(retrying["retry_at"])
    assert retry_at.tzinfo == UTC and 29 <= (retry_at - logged).total_seconds() <= 31
    assert (for_good["max_attempts"], for_good["final"]) == (1, True)
    assert "retry_in" not in for_good and "retry_at" not in for_good
    assert "max_attempts" not in ends[ok] and ends[ok]["status"] == "done"

    stopped = [r for r in records if " stopped: " in r["message"]]
    assert len(stopped) == 1, records
    assert stopped[0]["counts"] == {"captured": 3, "done": 1, "failed": 2}, stopped
    assert stopped[0]["message"].endswith(" stopped: captured 3 tasks (1 done, 2 failed)")
    assert stopped[0]["worker_id"] in stopped[0]["message"]


def test_burst_waits_for_a_retry_due_within_burst_wait_and_leaves_later_tasks(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    soon = store.enqueue("retry_after", {"delay": 1}, retries=1)
    later = store.enqueue("double", {"n": 1}, delay=60)

    # --burst-wait 0: the retry, due in a second, is left like the task due in a minute.
    done = cli(db_url, "worker", "--app", APP, "--burst", "--burst-wait", "0")
    assert done.returncode == 0, done.stderr
    assert (get(store, soon).status, get(store, soon).attempt) == (Status.FAILED, 1)
    assert "burst over: nothing due within 0 s; 2 task(s) left, the next due in " in done.stderr

    # By default (5 s) the worker waits for the retry and runs it, then exits without
    # waiting for the task due in a minute.
    done = cli(db_url, "worker", "--app", APP, "--burst")
    assert done.returncode == 0, done.stderr
    assert (get(store, soon).status, get(store, soon).attempt) == (Status.DONE, 2)
    assert get(store, soon).result == "done at last"
    assert (get(store, later).status, get(store, later).attempt) == (Status.QUEUED, 0)
    exit_line = one_line(done.stderr.splitlines(), "burst over: ")
    found = re.search(
        r"nothing due within 5 s; 1 task\(s\) left, the next due in (\d+\.\d)s at \d\d:\d\d:\d\d$",
        exit_line,
    )
    assert found is not None, exit_line
    assert 30 < float(found.group(1)) < 60, exit_line  # it did not wait for the late task


def test_burst_wait_is_documented_in_the_help(cli: Cli) -> None:
    done = cli(None, "worker", "--help")
    assert done.returncode == 0, done.stderr
    words = " ".join(done.stdout.split())
    assert "--burst-wait SECONDS With --burst: seconds ahead" in words, done.stdout
    assert "before it exits. [default: 5.0" in words, done.stdout
