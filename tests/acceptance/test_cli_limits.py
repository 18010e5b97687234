"""`jobq limits set | show | clear`, run as a user runs them, on every database.

Runs of the limited queues are captured in this process through the Store; the commands
run in subprocesses. Also `jobq worker --limiter`'s own checks.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import jobq
from jobq.limits import Limit, Rate, parse_rate
from tests.acceptance.test_cli import (
    UNREACHABLE,
    Cli,
    Done,
    failure,
    rows_of,
    sqlite_only,
    usage_error,
)

HEADER = "queue concurrency rate running started in period"


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


def succeeded(done: Done) -> str:
    """The output of a command that worked: status 0, nothing on stderr."""
    assert (done.returncode, done.stderr) == (0, ""), (done.args, done.stdout, done.stderr)
    return done.stdout


def shown(done: Done) -> dict[str, list[str]]:
    """`jobq limits show`'s table: each queue's cells (concurrency, rate, running, started)."""
    header, *lines = rows_of(succeeded(done))
    assert header == HEADER, done.stdout
    found = {}
    for line in lines:
        queue, *cells = line.split(" ")
        assert len(cells) == 4 and queue not in found, done.stdout
        found[queue] = cells
    return found


def same_limit(limit: Limit, concurrency: int | None, rate: Rate | None) -> bool:
    return (limit.concurrency, limit.rate) == (concurrency, rate)


# --- set ---------------------------------------------------------------------------------------


def test_set_a_concurrency_a_rate_or_both(cli: Cli, db_url: str, store: jobq.Store) -> None:
    conc, rated, bare, both = cli.many(
        db_url,
        [
            ["limits", "set", "emails", "--concurrency", "3"],
            ["limits", "set", "api", "--rate", "10/2s"],
            ["limits", "set", "pings", "--rate", "5/s"],
            ["limits", "set", "reports", "--concurrency", "1", "--rate", "100/1m"],
        ],
    )
    assert succeeded(conc) == "queue 'emails' limited: concurrency 3\n"
    assert succeeded(rated) == "queue 'api' limited: rate 10/2s\n"
    assert succeeded(bare) == "queue 'pings' limited: rate 5/1s\n"
    assert succeeded(both) == "queue 'reports' limited: concurrency 1, rate 100/1m\n"
    found = store.limits()
    assert sorted(found) == ["api", "emails", "pings", "reports"]
    assert same_limit(found["emails"], 3, None)
    assert same_limit(found["api"], None, Rate(10, 2.0))
    assert same_limit(found["pings"], None, Rate(5, 1.0))
    assert same_limit(found["reports"], 1, Rate(100, 60.0))


def test_set_replaces_the_queues_limit(cli: Cli, db_url: str, store: jobq.Store) -> None:
    store.set_limit("emails", concurrency=3, rate="10/2s")
    done = cli(db_url, "limits", "set", "emails", "--rate", "3/1h30m")
    assert succeeded(done) == "queue 'emails' limited: rate 3/1h30m\n"
    (limit,) = store.limits().values()
    assert same_limit(limit, None, Rate(3, 5400.0))  # the concurrency went with the old limit
    done = cli(db_url, "limits", "set", "emails", "--concurrency", "7")
    assert succeeded(done) == "queue 'emails' limited: concurrency 7\n"
    assert same_limit(store.limits()["emails"], 7, None)


def test_a_limit_set_on_the_command_line_holds_captures(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    store.enqueue_many("t", [{}] * 5, queue="emails")
    succeeded(cli(db_url, "limits", "set", "emails", "--concurrency", "2"))
    store.queue_limits.forget()  # as a running worker's copy after LIMITS_REFRESH
    assert len(store.capture(10, worker_id="w")) == 2
    assert store.capture(10, worker_id="w") == []


def test_a_rate_is_printed_as_it_is_enforced(cli: Cli, db_url: str, store: jobq.Store) -> None:
    """`set` and `show` print the stored period in full: 1h30m15s is not 1h30m."""
    done = cli(db_url, "limits", "set", "slow", "--rate", "1/1h30m15s")
    stored = store.limits()["slow"].rate
    assert stored == Rate(1, 5415.0)
    printed = succeeded(done).removeprefix("queue 'slow' limited: rate ").strip()
    assert parse_rate(printed) == stored, done.stdout
    (_, rate, _, _) = shown(cli(db_url, "limits", "show"))["slow"]
    assert parse_rate(rate) == stored, rate


# --- show --------------------------------------------------------------------------------------


def test_show_without_limits_says_so(cli: Cli, db_url: str, store: jobq.Store) -> None:
    store.enqueue("t", {}, queue="emails")
    assert succeeded(cli(db_url, "limits", "show")) == "no limits\n"


def test_show_lists_each_limit_with_its_runs_and_starts(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    store.set_limit("emails", concurrency=3)
    store.set_limit("api", rate="10/1m")
    store.set_limit("reports", concurrency=2, rate="4/1h")
    store.set_limit("idle", concurrency=5)
    for queue in ("emails", "api", "reports"):
        store.enqueue_many("t", [{}] * 6, queue=queue)
    store.enqueue_many("t", [{}] * 3, queue="free")
    captured = store.capture(100, worker_id="w", lease=600)
    assert len(captured) == 3 + 6 + 2 + 3
    api = [task for task in captured if task.queue_id == "api"]
    for task in api[:4]:  # ended runs: no longer running, still started
        assert store.set_status(task.id, task.attempt, jobq.Status.DONE)

    found = shown(cli(db_url, "limits", "show"))
    assert found == {
        "api": ["-", "10/1m", "2", "6"],
        "emails": ["3", "-", "3", "-"],
        "idle": ["5", "-", "0", "-"],
        "reports": ["2", "4/1h", "2", "2"],
    }
    assert list(found) == sorted(found)  # by queue name


# --- clear -------------------------------------------------------------------------------------


def test_clear_removes_the_limit(cli: Cli, db_url: str, store: jobq.Store) -> None:
    store.set_limit("emails", concurrency=3)
    kept = store.set_limit("api", rate="1/s")
    done = cli(db_url, "limits", "clear", "emails")
    assert succeeded(done) == "queue 'emails' is no longer limited\n"
    assert store.limits() == {"api": kept}
    assert list(shown(cli(db_url, "limits", "show"))) == ["api"]
    succeeded(cli(db_url, "limits", "clear", "api"))
    assert succeeded(cli(db_url, "limits", "show")) == "no limits\n"


def test_clear_of_a_queue_without_a_limit_is_one_error_line(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    kept = store.set_limit("api", rate="1/s")
    done = cli(db_url, "limits", "clear", "emails")
    assert failure(done) == "error: Queue 'emails' has no limit (see `jobq limits show`)."
    assert store.limits() == {"api": kept}


# --- usage errors --------------------------------------------------------------------------------


@sqlite_only
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["set", "emails"], "Error: give --concurrency, --rate, or both"),
        (["set", "emails", "--concurrency", "0"], "Error: Invalid value for '--concurrency': 0 "),
        (["set", "emails", "--concurrency", "-1"], "Error: Invalid value for '--concurrency': -1"),
        (["set", "emails", "--concurrency", "two"], "Error: Invalid value for '--concurrency'"),
        (["set", "emails", "--concurrency", str(2**31)],
         "Error: Invalid value for '--concurrency'"),
        (["set", "emails", "--rate", "10/abc"], "Error: Invalid value for '--rate': '10/abc'"),
        (["set", "emails", "--rate", "0/2s"], "Error: Invalid value for '--rate': count 0 "),
        (["set", "emails", "--rate", "10/0s"], "Error: Invalid value for '--rate': period 0"),
        (["set", "emails", "--rate", "10"], "Error: Invalid value for '--rate': '10' is not N/"),
        (["set", "emails", "--rate", ""], "Error: Invalid value for '--rate'"),
        (["set", "", "--concurrency", "1"], "Error: Invalid value for 'QUEUE'"),
        (["set", "q" * 256, "--concurrency", "1"], "Error: Invalid value for 'QUEUE'"),
        (["set", "--concurrency", "1"], "Error: Missing argument 'QUEUE'"),
        (["clear"], "Error: Missing argument 'QUEUE'"),
        (["clear", ""], "Error: Invalid value for 'QUEUE'"),
        (["show", "emails"], "Error: Got unexpected extra argument (emails)"),
        (["frobnicate"], "Error: No such command 'frobnicate'"),
    ],
)  # fmt: skip
def test_usage_errors_exit_2_and_change_nothing(
    cli: Cli, db_url: str, store: jobq.Store, args: list[str], message: str
) -> None:
    kept = store.set_limit("emails", concurrency=4)
    done = cli(db_url, "limits", *args)
    assert usage_error(done).startswith(message), done.stderr
    assert done.stdout == ""
    assert store.limits() == {"emails": kept}


def test_a_rate_too_large_to_store_is_refused_as_a_usage_error_or_stored(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    """The count is a 32-bit column: the command says so (status 2), or stores it exactly;
    never a traceback."""
    done = cli(db_url, "limits", "set", "emails", "--rate", f"{2**31}/1s")
    assert "Traceback" not in done.stderr, done.stderr.splitlines()[-3:]
    if done.returncode == 2:
        assert "--rate" in usage_error(done)
        assert store.limits() == {}
    else:
        assert succeeded(done) == f"queue 'emails' limited: rate {2**31}/1s\n"
        assert store.limits()["emails"].rate == Rate(2**31, 1.0)


# --- databases that cannot be used ---------------------------------------------------------------

COMMANDS = [
    ["limits", "set", "emails", "--concurrency", "3"],
    ["limits", "set", "emails", "--rate", "10/2s"],
    ["limits", "show"],
    ["limits", "clear", "emails"],
]


def test_an_unreachable_database_is_one_line_without_the_password(cli: Cli) -> None:
    for args, done in zip(COMMANDS, cli.many(UNREACHABLE, COMMANDS), strict=True):
        line = failure(done)
        assert line.startswith("error: Cannot connect to database 'x' on 127.0.0.1:1: "), args
        assert "secret" not in done.stderr, args
        assert "Traceback" not in done.stderr, args


def test_a_bad_url_is_one_line_without_the_password(cli: Cli) -> None:
    commands = [*COMMANDS]
    for args, done in zip(commands, cli.many("oracle://scott:tiger@db/x", commands), strict=True):
        assert "does not run on 'oracle'" in failure(done), args
        assert "tiger" not in done.stderr, args
    done = cli("not a url", "limits", "show")
    assert failure(done).startswith("error: The database URL 'not a url' is not valid")


def test_an_unmigrated_database_says_to_run_jobq_migrate(cli: Cli, empty_url: str) -> None:
    for args, done in zip(COMMANDS, cli.many(empty_url, COMMANDS), strict=True):
        line = failure(done)
        assert line.startswith("error: The jobq tables are missing or out of date"), args
        assert line.endswith("; run `jobq migrate`."), args


@sqlite_only
def test_the_url_comes_from_jobq_database_url(
    db_url: str, store: jobq.Store, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = Cli(elsewhere)(
        None, "limits", "set", "emails", "--concurrency", "2", env={"JOBQ_DATABASE_URL": db_url}
    )
    assert succeeded(done) == "queue 'emails' limited: concurrency 2\n"
    assert same_limit(store.limits()["emails"], 2, None)
    assert not (elsewhere / "jobq.db").exists()


# --- worker --limiter ----------------------------------------------------------------------------


@sqlite_only
def test_worker_limiter_tigerbeetle_needs_addresses(cli: Cli, db_url: str) -> None:
    cli.env.pop("JOBQ_TIGERBEETLE_ADDRESSES", None)
    done = cli(db_url, "worker", "--app", "tests.apps.mixed:app", "--limiter", "tigerbeetle")
    error = usage_error(done)
    assert error == "Error: --limiter tigerbeetle needs --tigerbeetle-addresses", done.stderr
    assert done.stdout == ""


@sqlite_only
def test_worker_refuses_an_unknown_limiter(cli: Cli, db_url: str) -> None:
    done = cli(db_url, "worker", "--app", "tests.apps.mixed:app", "--limiter", "redis")
    error = usage_error(done)
    assert error.startswith("Error: Invalid value for '--limiter': 'redis' is not one of")
    assert "'sql'" in error and "'tigerbeetle'" in error
