"""`jobq why ID [--json]`, run as a user runs it, on every database."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import jobq
from tests.acceptance.test_cli import Cli, failure


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


def test_why_says_the_reason_in_text_and_json(cli: Cli, db_url: str, store: jobq.Store) -> None:
    later = store.enqueue("t", {}, delay=600, queue="mail")
    running = store.enqueue("t", {})
    store.register_worker("w1", host="h", pid=1, queues=None, concurrency=1)
    store.capture(1, queues="default", worker_id="w1")
    text, as_json, runs = cli.many(
        db_url, [["why", str(later)], ["why", str(later), "--json"], ["why", str(running)]]
    )
    assert (text.returncode, text.stderr) == (0, ""), text
    first, *rest = text.stdout.splitlines()
    assert first == f"task {later}: due_later"
    assert rest[0].startswith("  due in ") and len(rest) == 1, text.stdout

    assert (as_json.returncode, as_json.stderr) == (0, ""), as_json
    document = json.loads(as_json.stdout)
    assert set(document) == {"task_id", "reason", "lines", "details"}
    assert (document["task_id"], document["reason"]) == (later, "due_later")
    assert document["details"]["queue"] == "mail"
    assert document["lines"][0].startswith("due in ")

    assert runs.returncode == 0, runs
    assert runs.stdout.splitlines()[0] == f"task {running}: running"
    assert "  running on worker w1 since " in runs.stdout


def test_why_an_unknown_id_is_one_error_line(cli: Cli, db_url: str, store: jobq.Store) -> None:
    text, as_json = cli.many(db_url, [["why", "987654321"], ["why", "987654321", "--json"]])
    assert failure(text) == "error: no task with id 987654321"
    assert failure(as_json) == "error: no task with id 987654321"
