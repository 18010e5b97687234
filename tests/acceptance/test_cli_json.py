"""`jobq status --json`, `list --json`, `show ID --json` and `jobq workers [--json]`:
documents for scripts, holding exactly what the rows hold (see jobq/cli/json_output.py).

The commands run as a user runs them (tests.acceptance.test_cli.Cli), several at once.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

import jobq
from jobq.cli import main
from jobq.cli.json_output import dumps, task_document
from jobq.cli.workers import LISTED
from jobq.db.tasks import Status, Task, Undecodable
from jobq.dialects.schema import tasks, workers
from tests.acceptance.test_cli import Cli, Done, cli, failure, rows_of, sqlite_only, status_scene
from tests.acceptance.test_cli_cron import synced
from tests.helpers import set_columns

__all__ = ["cli"]  # the fixture, shared with test_cli

#: Every field of jobq.Task as the documents name them.
TASK_KEYS = ["queue" if f.name == "queue_id" else f.name for f in fields(jobq.Task)]


def document(done: Done) -> Any:
    """The one JSON document a command printed: ASCII only, nothing on stderr."""
    assert (done.returncode, done.stderr) == (0, ""), (done.args, done.stderr)
    assert done.stdout.isascii()
    return json.loads(done.stdout)


def moment(text: str | None) -> datetime | None:
    """A document's time, which must be ISO 8601 in UTC with its offset."""
    if text is None:
        return None
    assert text.endswith("+00:00"), text
    return datetime.fromisoformat(text)


def expected(task: Task) -> dict[str, Any]:
    """What a task's document must hold, written out from the row as Store.get reads it."""
    values: dict[str, Any] = {}
    for f in fields(task):
        value = getattr(task, f.name)
        if isinstance(value, datetime):
            value = value.astimezone(UTC)
        values["queue" if f.name == "queue_id" else f.name] = value
    return values


def read(doc: dict[str, Any]) -> dict[str, Any]:
    """A task's document with its times parsed back, to compare with expected()."""
    assert list(doc)[: len(TASK_KEYS)] == TASK_KEYS
    times = {"run_at", "locked_until", "created_at", "started_at", "finished_at"}
    times.add("cancel_requested_at")
    return {key: moment(doc[key]) if key in times else doc[key] for key in TASK_KEYS}


def four_tasks(store: jobq.Store) -> dict[str, int]:
    """A done task with a result, a failed one whose error held NUL and a lone surrogate,
    a running one whose cancel was requested, and a running one with progress."""
    done = store.enqueue("add", {"numbers": [1, 2], "label": "é"}, unique_key="sum")
    (run,) = store.capture(1, worker_id="w-7")
    assert store.set_status(done, run.attempt, "done", result={"ok": True, "sum": 3, "ü": None})
    failed = store.enqueue("boom", {"path": "/tmp/x"}, queue="files", retries=0)
    (run,) = store.capture(1, worker_id="w-7")
    assert store.set_status(failed, run.attempt, "failed", error="bad\x00byte in \udcff.csv")
    running = store.enqueue("slow", {}, queue="bulk", priority=5, lock_key="slow:1")
    (run,) = store.capture(1, worker_id="w-1")
    assert store.cancel(running)
    progress = store.enqueue("resize", {"n": 100}, queue="bulk", timeout=30.0)
    (run,) = store.capture(1, worker_id="w-1")
    set_columns(store, progress, progress={"current": 40, "total": 100, "message": "résumé"})
    return {"done": done, "failed": failed, "running": running, "progress": progress}


def test_list_and_show_hold_every_field_of_each_task(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    ids = four_tasks(store)
    listed, *shown = cli.many(
        db_url, [["list", "--json"], *(["show", str(i), "--json"] for i in ids.values())]
    )
    docs = document(listed)
    assert [doc["id"] for doc in docs] == sorted(ids.values(), reverse=True)
    for doc, show in zip(reversed(docs), shown, strict=True):
        task = store.get(doc["id"])
        assert task is not None
        assert read(doc) == expected(task)
        one = document(show)
        assert list(one) == [*TASK_KEYS, "notes", "after"]
        assert {key: one[key] for key in TASK_KEYS} == doc

    by_id = {doc["id"]: doc for doc in docs}
    done, failed = by_id[ids["done"]], by_id[ids["failed"]]
    assert (done["queue"], done["name"], done["status"], done["attempt"]) == (
        "default",
        "add",
        "done",
        1,
    )
    assert done["args"] == {"numbers": [1, 2], "label": "é"}
    assert done["result"] == {"ok": True, "sum": 3, "ü": None}
    assert (done["unique_key"], done["locked_by"], done["error"]) == ("sum", None, None)
    assert moment(done["finished_at"]) >= moment(done["started_at"])  # type: ignore[operator]
    assert (failed["status"], failed["retries_left"], failed["queue"]) == ("failed", 0, "files")
    # The row holds the error escaped (PostgreSQL's text has no NUL): exactly that.
    assert failed["error"] == "bad\\x00byte in \\udcff.csv"
    running, progress = by_id[ids["running"]], by_id[ids["progress"]]
    assert (running["status"], running["locked_by"], running["priority"]) == (
        "in_progress",
        "w-1",
        5,
    )
    assert running["lock_key"] == "slow:1" and running["cancel_requested_at"] is not None
    assert moment(running["locked_until"]) > moment(running["started_at"])  # type: ignore[operator]
    assert progress["progress"] == {"current": 40, "total": 100, "message": "résumé"}
    assert (progress["timeout"], progress["lease"], progress["result"]) == (30.0, None, None)

    notes = {doc["id"]: doc["notes"] for doc in map(document, shown)}
    assert notes[ids["done"]] == notes[ids["failed"]] == notes[ids["progress"]] == []
    (note,) = notes[ids["running"]]
    assert note.startswith("cancel requested at ") and "stops the run within a second" in note


def test_show_notes_a_run_past_its_timeout(cli: Cli, db_url: str, store: jobq.Store) -> None:
    task_id = store.enqueue("slow", {}, timeout=5.0)
    store.capture(1, worker_id="w")
    set_columns(store, task_id, started_at=datetime.now(UTC) - timedelta(minutes=2))
    (note,) = document(cli(db_url, "show", str(task_id), "--json"))["notes"]
    assert note.startswith("timed out after 5 s and still running (2m")


def test_list_filters_by_status_and_queue_and_limits(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    store.enqueue("a", {}, queue="emails")
    wanted = store.enqueue("b", {}, queue="emails")
    store.cancel(store.enqueue("c", {}, queue="emails"))  # wrong status
    store.enqueue("d", {}, queue="default")  # wrong queue
    limited, queued, nothing = cli.many(
        db_url,
        [["list", "--json", "--status", "queued", "--queue", "emails", "--limit", "1"],
         ["list", "--json", "--status", "queued", "--queue", "emails"],
         ["list", "--json", "--status", "failed"]],
    )  # fmt: skip
    assert [doc["id"] for doc in document(limited)] == [wanted]
    assert [(doc["name"], doc["status"]) for doc in document(queued)] == [
        ("b", "queued"), ("a", "queued"),
    ]  # fmt: skip
    assert document(nothing) == []


def test_list_filters_by_name_as_text_and_as_json(cli: Cli, db_url: str, store: jobq.Store) -> None:
    first = store.enqueue("send", {}, queue="emails")
    store.enqueue("sendall", {}, queue="emails")  # another name, though it starts alike
    second = store.enqueue("send", {}, queue="default")
    as_json, as_text, other_queue = cli.many(
        db_url,
        [["list", "--json", "--name", "send"], ["list", "--name", "send"],
         ["list", "--json", "--name", "send", "--queue", "nowhere"]],
    )  # fmt: skip
    assert [(doc["id"], doc["name"]) for doc in document(as_json)] == [
        (second, "send"), (first, "send"),
    ]  # fmt: skip
    assert (as_text.returncode, as_text.stderr) == (0, "")
    header, *lines = as_text.stdout.splitlines()
    assert header.split()[:3] == ["id", "queue", "name"]
    assert [line.split()[:3] for line in lines] == [
        [str(second), "default", "send"], [str(first), "emails", "send"],
    ]  # fmt: skip
    assert document(other_queue) == []


def test_show_of_an_unknown_id_is_the_same_error(cli: Cli, db_url: str) -> None:
    as_json, as_text = cli.many(db_url, [["show", "123", "--json"], ["show", "123"]])
    assert failure(as_json) == failure(as_text) == "error: no task with id 123"


def test_status_holds_counts_oldest_waiting_schedules_and_workers(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    def schedules() -> None:
        synced(db_url, store)
        store.set_schedule_enabled("nightly", False)

    status_scene(store, schedules)

    as_json, as_text = cli.many(db_url, [["status", "--json"], ["status"]])
    doc = document(as_json)
    assert list(doc) == ["queues", "schedules", "workers", "upkeep"]
    assert doc["upkeep"] is None  # no worker ran here
    default, emails = doc["queues"]
    counts = {"queued": 1, "in_progress": 0, "done": 1, "failed": 0, "cancelled": 1, "blocked": 0}
    assert {key: default[key] for key in ("queue", "counts", "total")} == {
        "queue": "default", "counts": counts, "total": 3,
    }  # fmt: skip
    assert 3 * 3600 + 600 <= default["oldest_waiting_seconds"] < 3 * 3600 + 660
    assert emails == {
        "queue": "emails",
        "counts": {**dict.fromkeys(counts, 0), "queued": 1},
        "total": 1,
        "oldest_waiting_seconds": None,
    }
    # The schedules as the text form counts them, line for line.
    _, schedules_table, _ = as_text.stdout.split("\n\n")
    assert [" ".join(str(value) for value in row.values()) for row in doc["schedules"]] == rows_of(
        schedules_table
    )[1:]
    assert {row["queue"]: row["disabled"] for row in doc["schedules"]}["default"] == 1

    alive, stale = doc["workers"]
    assert {key: alive[key] for key in ("id", "host", "pid", "queues", "concurrency")} == {
        "id": "w-1", "host": "alpha", "pid": 111, "queues": ["emails", "default"],
        "concurrency": 4,
    }  # fmt: skip
    assert (alive["state"], alive["alive"], alive["timed_out"]) == ("alive", True, 0)
    assert (stale["id"], stale["queues"], stale["state"], stale["alive"]) == (
        "w-2", None, "stale", False,
    )  # fmt: skip
    seen = datetime.now(UTC) - moment(stale["last_seen"])  # type: ignore[operator]
    assert timedelta(minutes=10) < seen < timedelta(minutes=12)
    assert moment(alive["started_at"]) <= moment(alive["last_seen"])  # type: ignore[operator]


def test_status_of_an_empty_database(cli: Cli, db_url: str) -> None:
    assert document(cli(db_url, "status", "--json")) == {
        "queues": [], "schedules": [], "workers": [], "upkeep": None,
    }  # fmt: skip


def running_on(store: jobq.Store, worker_id: str, n: int, queue: str = "default") -> list[Task]:
    for i in range(n):
        store.enqueue(f"job{i}", {"i": i}, queue=queue)
    return store.capture(n, worker_id=worker_id, queues=[queue])


def test_workers_lists_each_worker_with_the_tasks_it_runs(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    store.register_worker("w-1", host="alpha", pid=111, queues=["a"], concurrency=20)
    store.register_worker(
        "w-2", host="beta", pid=222, queues=None, concurrency=2, supervisor_pid=220
    )
    store.register_worker("w-3", host="gamma", pid=333, queues=["b"], concurrency=1)
    many = running_on(store, "w-1", LISTED + 3, queue="a")
    one = running_on(store, "w-3", 1, queue="b")
    ghost = running_on(store, "ghost", 2, queue="c")  # captured, registry row gone
    store.enqueue("waiting", {}, queue="a")  # not running: listed nowhere
    with store.engine.begin() as conn:
        conn.execute(
            sa.update(workers)
            .where(workers.c.worker_id == "w-3")
            .values(last_seen=datetime.now(UTC) - timedelta(minutes=5))
        )

    as_json, as_text = cli.many(db_url, [["workers", "--json"], ["workers"]])
    docs = document(as_json)
    assert [(d["id"], d["state"], d["alive"]) for d in docs] == [
        ("w-1", "alive", True), ("w-2", "alive", True), ("w-3", "stale", False),
        ("ghost", "unregistered", False),
    ]  # fmt: skip
    assert (docs[0]["host"], docs[0]["pid"], docs[0]["queues"], docs[0]["concurrency"]) == (
        "alpha", 111, ["a"], 20,
    )  # fmt: skip
    for doc, tasks_run in zip(docs, [many, [], one, ghost], strict=True):
        assert doc["running_count"] == len(tasks_run)
        assert [r["id"] for r in doc["running"]] == [t.id for t in tasks_run]
        for listed, task in zip(doc["running"], tasks_run, strict=True):
            row = store.get(task.id)
            assert row is not None
            assert listed == {
                "id": row.id, "name": row.name, "queue": row.queue_id, "attempt": 1,
                "started_at": listed["started_at"], "locked_until": listed["locked_until"],
            }  # fmt: skip
            assert moment(listed["started_at"]) == row.started_at
            assert moment(listed["locked_until"]) == row.locked_until
    assert docs[3]["host"] is None and docs[3]["started_at"] is None
    assert [doc["supervisor"] for doc in docs] == [None, {"host": "beta", "pid": 220}, None, None]

    table, *blocks = as_text.stdout.rstrip("\n").split("\n\n")
    assert (as_text.returncode, as_text.stderr) == (0, "")
    header, w1, w2, w3, unregistered = rows_of(table)
    assert header == (
        "worker host pid supervisor queues concurrency last seen state timed out running"
    )
    assert re.fullmatch(rf"w-1 alpha 111 - a 20 \d+s ago alive 0 {LISTED + 3}", w1)
    assert re.fullmatch(r"w-2 beta 222 beta:220 all 2 \d+s ago alive 0 0", w2)
    assert re.fullmatch(r"w-3 gamma 333 - b 1 5m( \d+s)? ago stale 0 1", w3)
    assert unregistered == "ghost - - - - - - unregistered - 2"
    first, third, fourth = (block.splitlines() for block in blocks)
    assert first[0] == f"w-1 runs {LISTED + 3} tasks:"
    assert rows_of(first[1])[0] == "id name queue attempt started locked until"
    assert [line.split()[0] for line in first[2:-1]] == [str(t.id) for t in many[:LISTED]]
    assert first[-1] == "  +3 more (jobq workers --json lists them all)"
    assert all(line.startswith("  ") for line in first[1:])
    assert third[0] == "w-3 runs 1 task:" and third[2].split()[:4] == [
        str(one[0].id),
        "job0",
        "b",
        "1",
    ]
    assert fourth[0] == "ghost runs 2 tasks:" and len(fourth) == 4


def test_workers_without_any(cli: Cli, db_url: str) -> None:
    as_json, as_text = cli.many(db_url, [["workers", "--json"], ["workers"]])
    assert document(as_json) == []
    assert (as_text.returncode, as_text.stdout) == (0, "no workers\n")


@sqlite_only
def test_undecodable_arguments_are_said_to_be_so(cli: Cli, db_url: str, store: jobq.Store) -> None:
    # A row written by hand: SQLite's JSON columns are text, so they hold any text.
    task_id = store.enqueue("t", {})
    with store.engine.begin() as conn:
        conn.execute(
            sa.update(tasks).where(tasks.c.id == task_id).values(args=sa.literal_column("'{nope'"))
        )
    listed, shown = cli.many(db_url, [["list", "--json"], ["show", str(task_id), "--json"]])
    (doc,) = document(listed)
    args = doc["args"]
    assert (args["undecodable"], args["text"]) == (True, "{nope")
    assert args["reason"]
    assert document(shown)["args"] == args


def test_any_text_makes_valid_ascii_json() -> None:
    """No row's value makes a command crash or print what is not JSON: NUL, lone
    surrogates, NaN (which Python's json reads from a row written by hand)."""
    now = datetime.now(UTC)
    task = Task(
        1, "q\udcff", "n\x00", {"a": "\udcff\x00", "nan": math.nan, "inf": [-math.inf]},
        Status.FAILED, 0, now, 0, 1, None, None, None, None, None, None,
        Undecodable("\udcff{", "bad"), "err \x00 \ud800", False, now, None, None,
    )  # fmt: skip
    text = dumps(task_document(task))
    text.encode("utf-8")  # raises if not
    assert text.isascii()
    doc = json.loads(text)
    assert (doc["queue"], doc["name"], doc["error"]) == ("q\udcff", "n\x00", "err \x00 \ud800")
    assert doc["args"] == {"a": "\udcff\x00", "nan": "NaN", "inf": ["-Infinity"]}
    assert doc["result"] == {"undecodable": True, "reason": "bad", "text": "\udcff{"}
    naive = replace(task, run_at=now.replace(tzinfo=None))  # read as UTC
    assert dumps(task_document(naive)).count("+00:00") == 2


@pytest.mark.parametrize("command", [["status"], ["list"], ["show"], ["workers"]])
def test_help_describes_the_json_shape(command: list[str]) -> None:
    result = CliRunner().invoke(main, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert "--json" in result.output and "With --json" in result.output
    assert '"notes"' in result.output if command == ["show"] else '"id"' in result.output
