"""`jobq queues fair` and `unfair`, fairness in `jobq queues list`, and `jobq enqueue
--fair-key`, as the command line takes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import jobq
from tests.acceptance.test_cli import Cli, rows_of, sqlite_only, usage_error
from tests.acceptance.test_cli_limits import succeeded

pytestmark = sqlite_only


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


def test_fair_weighs_keys_lists_them_and_unfair_goes_back(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    made = cli(
        db_url, "queues", "fair", "reports", "--weight", "acme=3", "--weight", "b=2",
        "--default-weight", "2", "--max-running-per-key", "4",
    )  # fmt: skip
    assert succeeded(made) == (
        "queue 'reports': fair, default weight 2, at most 4 running per key\n"
        "  key 'acme': weight 3\n  key 'b': weight 2\n"
    )
    enqueued = cli(db_url, "enqueue", "report", "--queue", "reports", "--fair-key", "acme")
    task_id = int(enqueued.stdout)
    assert store.get(task_id).fair_key == "acme"
    listed, as_json = cli.many(db_url, [["queues", "list"], ["queues", "list", "--json"]])
    header, *lines = rows_of(succeeded(listed))
    assert header.split()[-3:] == ["fair", "retain", "workers"]
    (line,) = lines
    assert "weight 2, 4/key, 1 keys" in line
    (queue,) = json.loads(succeeded(as_json))
    assert queue["fair"] == {"default_weight": 2, "max_running_per_key": 4, "keys_with_work": 1}
    assert (
        succeeded(cli(db_url, "queues", "unfair", "reports")) == "queue 'reports' is plain again\n"
    )
    assert succeeded(cli(db_url, "queues", "unfair", "reports")) == "queue 'reports' was not fair\n"
    assert store.fair_queues.shares() == {}


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--weight", "acme"], "is not KEY=N"),
        (["--weight", "acme=x"], "is not KEY=N"),
        (["--weight", "acme=0"], "is not a positive integer"),
        (["--default-weight", "0"], "0 is not in the range x>=1"),
        (["--max-running-per-key", "-1"], "-1 is not in the range x>=1"),
    ],
)
def test_a_bad_setting_is_refused_with_its_reason_and_nothing_is_written(
    cli: Cli, db_url: str, store: jobq.Store, args: list[str], named: str
) -> None:
    done = cli(db_url, "queues", "fair", "reports", *args)
    said = usage_error(done) if done.returncode == 2 else done.stderr
    assert named in said, said
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert store.fair_queues.shares() == {}
