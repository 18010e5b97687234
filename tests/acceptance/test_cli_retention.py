"""`jobq queues retain` and retention in `jobq queues list`, `jobq prune --queue`, and
`jobq worker --retain` as the command line takes them."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import jobq
from tests.acceptance.test_cli import Cli, rows_of, sqlite_only, terminally_failed, usage_error
from tests.acceptance.test_cli_limits import succeeded
from tests.helpers import all_rows, set_columns

pytestmark = sqlite_only


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


def test_retain_sets_a_queues_time_forever_or_back_to_the_default(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    thirty, forever, listed, as_json = cli.many(
        db_url,
        [["queues", "retain", "scratch", "30m"], ["queues", "retain", "audit", "forever"]],
    ) + cli.many(db_url, [["queues", "list"], ["queues", "list", "--json"]])
    assert succeeded(thirty) == "queue 'scratch' keeps finished tasks for 30m\n"
    assert succeeded(forever) == "queue 'audit' keeps finished tasks forever\n"
    assert store.retentions() == {"scratch": 1800.0, "audit": math.inf}
    header, *lines = rows_of(succeeded(listed))
    assert header.split()[-2:] == ["retain", "workers"]
    assert {line.split()[0]: line.split()[-2] for line in lines} == {
        "audit": "forever", "scratch": "30m",
    }  # fmt: skip
    assert {q["queue"]: q["retain"] for q in json.loads(succeeded(as_json))} == {
        "audit": "forever", "scratch": 1800.0,
    }  # fmt: skip

    back, again = cli.many(
        db_url,
        [["queues", "retain", "scratch", "--default"], ["queues", "retain", "x", "--default"]],
    )
    assert succeeded(back) == "queue 'scratch' keeps finished tasks for the workers' --retain\n"
    assert succeeded(again) == "queue 'x' already kept finished tasks for the workers' --retain\n"
    assert store.retentions() == {"audit": math.inf}


def test_retain_refuses_what_keeps_nothing_and_changes_nothing(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    zero, garbage, neither, both = cli.many(
        db_url,
        [
            ["queues", "retain", "a", "0s"],
            ["queues", "retain", "a", "7x"],
            ["queues", "retain", "a"],
            ["queues", "retain", "a", "1d", "--default"],
        ],
    )
    invalid = "Error: Invalid value for '[DURATION]'"
    assert usage_error(zero) == f"{invalid}: '0s' keeps nothing: give a duration over 0, or forever"
    assert usage_error(garbage).startswith(f"{invalid}: '7x' is not a duration")
    both_or_neither = "Error: give either DURATION (say 30d, or forever) or --default"
    assert usage_error(neither) == usage_error(both) == both_or_neither
    assert store.retentions() == {}


def test_prune_of_one_queue(cli: Cli, db_url: str, store: jobq.Store) -> None:
    old = datetime.now(UTC) - timedelta(days=9)
    a, b = terminally_failed(store, "x", queue="a"), terminally_failed(store, "x", queue="b")
    for task_id in (a, b):
        set_columns(store, task_id, finished_at=old)
    done = cli(db_url, "prune", "--older-than", "7d", "--queue", "a")
    assert succeeded(done) == "deleted 1 task\n"
    assert [row["id"] for row in all_rows(store)] == [b]


def test_worker_retain_refuses_zero(cli: Cli, db_url: str) -> None:
    done = cli(db_url, "worker", "--app", "tests.apps.mixed:app", "--retain", "0")
    assert usage_error(done).startswith("Error: Invalid value for '--retain': '0' keeps nothing")
