"""The runs of a schedule and the schedules in `jobq status`, with real `jobq worker`
processes and the commands run as a user runs them, on every database.

- `jobq cron list --runs NAME`: the last runs of schedule NAME (up to 20), newest first,
  after a worker has run it; its errors' main lines printable whatever they hold.
- `jobq status`: the schedules per queue; a schedule's resting row (between ticks, or
  disabled) is no task there, cancelled or done.
- A worker whose app defines a bad cron expression does not start, naming the field.
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import jobq
from jobq import Status
from jobq.cron.runs import KEPT_RUNS
from jobq.cron.schedule import Cron
from jobq.engine import migrations
from tests.acceptance.test_cli import Cli, Done, failure, rows_of, sqlite_only, usage_error
from tests.acceptance.test_cli_cron import start_run, synced, undefine
from tests.acceptance.test_cron_workers import stop, store_with_empty_log
from tests.acceptance.test_worker_processes import wait_until
from tests.apps import cron as cron_app
from tests.helpers import all_rows, set_columns

ROOT = Path(__file__).resolve().parents[2]
RUN_HEADERS = ["started", "ended", "status", "error"]
TRACEBACK = "Traceback (most recent call last):"


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


@pytest.fixture
def app_store(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[jobq.Store]:
    """A Store on ``db_url``, with the cron test app's (empty) runs table beside it."""
    yield from store_with_empty_log(db_url, monkeypatch)


def worker(db_url: str, app: str, variant: str = "ticks") -> subprocess.Popen[str]:
    """Start `jobq worker --app APP`, schedules ``variant`` for tests/apps/cron.py."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JOBQ_DATABASE_URL": db_url}
    env.update(JOBQ_TEST_CRON=variant, PYTHONFAULTHANDLER="1")
    env.pop("JOBQ_TEST_CRON_HANG", None)
    return subprocess.Popen(
        [sys.executable, "-m", "jobq.cli", "worker", "--app", app, "--poll-interval", "0.05",
         "--log-level", "error"],
        env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def run_until(store: jobq.Store, db_url: str, app: str, name: str, runs: int) -> None:
    """Run a worker on ``app`` until schedule ``name`` has ``runs`` runs, then stop it."""
    process = worker(db_url, app)
    try:
        wait_until(lambda: any(s.name == name for s in store.schedules()), timeout=60)
        wait_until(lambda: len(store.schedule_runs(name)) >= runs, timeout=60)
    finally:
        stop(process)


def runs_listed(done: Done) -> list[dict[str, str]]:
    """`jobq cron list --runs`'s table, each line's cells by header, newest first.

    Cells hold spaces (times, "lease expired"), so each column is cut where its header
    starts.
    """
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    header, *lines = done.stdout.rstrip("\n").split("\n")
    starts, position = [], 0
    for label in RUN_HEADERS:
        position = header.index(label, position)
        starts.append(position)
        position += len(label)
    assert header.split() == RUN_HEADERS, header
    ends = [*starts[1:], None]
    bounds = list(zip(starts, ends, strict=True))
    return [
        dict(zip(RUN_HEADERS, (line[a:b].strip() for a, b in bounds), strict=True))
        for line in lines
    ]


def printed(moment: datetime) -> str:
    """A moment as the commands print it: UTC, to the second."""
    return moment.astimezone(UTC).isoformat(sep=" ", timespec="seconds")


# --- cron list --runs ---------------------------------------------------------------------


@pytest.mark.slow
def test_runs_lists_the_runs_a_worker_ran_newest_first(
    cli: Cli, db_url: str, app_store: jobq.Store
) -> None:
    """A worker runs the every-second schedule ``tick`` a few times: `--runs tick` prints
    each run the store holds, newest first, with its start and end (to the second), its
    status and no error; `cron list` agrees on the last run."""
    run_until(app_store, db_url, "tests.apps.cron:app", "tick", 3)
    runs = app_store.schedule_runs("tick")
    assert 3 <= len(runs) <= KEPT_RUNS
    done_runs = [run for run in runs if run.status == "done"]
    # A run under way when the worker stopped is put back: released, its tick kept.
    assert len(done_runs) >= 2 and {run.status for run in runs} <= {"done", "released"}, runs
    state = next(s for s in app_store.schedules() if s.name == "tick")
    assert all(run.task_id == state.task_id for run in runs)
    newest = runs[0].attempt
    assert [run.attempt for run in runs] == list(range(newest, newest - len(runs), -1))
    for newer, older in itertools.pairwise(runs):
        assert newer.started_at >= older.finished_at >= older.started_at, (newer, older)

    listed = runs_listed(cli(db_url, "cron", "list", "--runs", "tick"))
    assert listed == [
        {
            "started": printed(run.started_at), "ended": printed(run.finished_at),
            "status": run.status, "error": "-",
        }
        for run in runs
    ]  # fmt: skip
    # Each done run ran the task's code: it recorded itself in the app's own table too.
    with cron_app.LOG.engine().connect() as conn:
        ran = conn.execute(cron_app.RUNS.select()).all()
    assert {(r.task_id, r.attempt) for r in ran} >= {(r.task_id, r.attempt) for r in done_runs}


@pytest.mark.slow
def test_runs_print_the_exception_line_of_an_error_that_a_terminal_cannot_print(
    cli: Cli, db_url: str, app_store: jobq.Store
) -> None:
    """A task raising FileNotFoundError with an undecodable file name and a NUL in a
    message of two lines: each run shows failed with the exception's line, escaped
    (\\udcff, \\x00), and `jobq cron list --runs` prints it and exits 0."""
    run_until(app_store, db_url, "tests.apps.cron_poison:app", "poison", 2)
    done = cli(db_url, "cron", "list", "--runs", "poison")
    listed = runs_listed(done)
    assert "Traceback" not in done.stderr
    assert len(listed) >= 2
    line = "FileNotFoundError: cannot open report-\\udcff.csv\\x00"
    for run in listed:
        assert (run["status"], run["error"]) == ("failed", line), done.stdout
    assert "second line" not in done.stdout
    (stored,) = app_store.schedule_runs("poison", 1)
    assert stored.error is not None and stored.error.startswith("Traceback")
    assert "\\udcff" in stored.error and "the second line of the message" in stored.error


def test_runs_of_each_kind_of_end(cli: Cli, db_url: str, store: jobq.Store) -> None:
    """Runs ended through the Store every way a worker ends them print their statuses and
    their errors' first lines; a schedule without runs says so."""
    synced(db_url, store)
    empty = cli(db_url, "cron", "list", "--runs", "nightly")
    assert (empty.returncode, empty.stdout, empty.stderr) == (
        0, "no runs of schedule 'nightly' yet\n", "",
    )  # fmt: skip
    ends = [
        (Status.DONE, None, "done", "-"),
        (Status.FAILED, "timed out after 2 s", "timed out", "timed out after 2 s"),
        (Status.CANCELLED, "not today\nsecond line", "cancelled", "not today"),
        (Status.QUEUED, None, "released", "-"),
        (Status.FAILED, f"{TRACEBACK}\nKeyError: 'x'\nmore", "failed", "KeyError: 'x'"),
    ]  # fmt: skip
    for status, error, _, _ in ends:
        run = start_run(store, "nightly")  # retries=3: a failure keeps its tick
        assert store.set_status(run.id, run.attempt, status, error=error, retry_delay=0)
    run = start_run(store, "nightly")
    set_columns(store, run.id, locked_until=datetime.now(UTC) - timedelta(minutes=1))
    assert store.rescue() == 1
    listed = runs_listed(cli(db_url, "cron", "list", "--runs", "nightly"))
    expected = [(shown, error) for _, _, shown, error in ends] + [
        ("lease expired", "lease expired")
    ]
    assert [(r["status"], r["error"]) for r in reversed(listed)] == expected
    # The row's capture count (1 to 6 here, across three ticks) is stored, not shown: the
    # header is RUN_HEADERS exactly (runs_listed).
    assert [run.attempt for run in store.schedule_runs("nightly")] == list(range(6, 0, -1))


def test_runs_of_an_unknown_schedule_is_one_error_line(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    """A name no schedule has (a schedule's task's name, another case) exits 1 with one
    line; nothing is written."""
    synced(db_url, store)
    before = all_rows(store)
    commands = [["cron", "list", "--runs", name] for name in ["x", "cleanup", "NIGHTLY"]]
    for args, done in zip(commands, cli.many(db_url, commands), strict=True):
        assert failure(done) == f"error: No schedule named {args[3]!r} (see `jobq cron list`)."
    assert all_rows(store) == before


@sqlite_only
def test_runs_of_an_empty_or_overlong_name_is_a_usage_error(cli: Cli, db_url: str) -> None:
    commands = [["cron", "list", "--runs", name] for name in ["", "n" * 256]]
    reasons = ["'' is not a non-empty string", "longer than 255 characters"]
    for reason, done in zip(reasons, cli.many(db_url, commands), strict=True):
        assert usage_error(done) == f"Error: Invalid value for '--runs': {reason}"
        assert done.stderr.startswith("Usage: jobq cron list "), done.stderr


# --- status -------------------------------------------------------------------------------


def test_status_lists_schedules_and_counts_their_rows_only_while_they_run(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    """Three schedules: nightly (default) disabled, morning-mail (outbox) no longer
    defined, report (reports) running. The tasks table counts the plain tasks and the
    running schedule's row only: no queue shows a paused schedule as a cancelled task, nor
    a resting one as done. The schedules table shows each queue's."""
    app = synced(db_url, store)
    store.set_schedule_enabled("nightly", False)
    undefine(store, app, "morning-mail")
    start_run(store, "report")
    queued = store.enqueue("plain", {}, queue="default", delay=600)
    cancelled = store.enqueue("plain", {}, queue="default")
    assert store.cancel(cancelled) and queued

    done = cli(db_url, "status")
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    tasks_table, schedules_table, workers = done.stdout.rstrip("\n").split("\n\n")
    assert rows_of(tasks_table) == [
        "queue queued in_progress done failed cancelled blocked total oldest waiting",
        "default 1 0 0 0 1 0 2 -",
        "reports 0 1 0 0 0 0 1 -",
    ]
    assert rows_of(schedules_table) == [
        "queue schedules running disabled no longer defined",
        "default 1 0 1 0",
        "outbox 1 0 0 1",
        "reports 1 1 0 0",
    ]
    assert workers == "no workers"
    # The rows are there all the same, as `jobq list` shows them.
    statuses = sorted(row["status"] for row in all_rows(store) if row["recurring"])
    assert statuses == ["cancelled", "cancelled", "in_progress"]


def test_status_with_schedules_only_says_no_tasks(cli: Cli, db_url: str, store: jobq.Store) -> None:
    """Schedules resting between their ticks are no tasks; a disabled one counts disabled."""
    synced(db_url, store)
    store.set_schedule_enabled("report", False)
    done = cli(db_url, "status")
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    first, schedules_table, last = done.stdout.rstrip("\n").split("\n\n")
    assert (first, last) == ("no tasks", "no workers")
    assert rows_of(schedules_table)[1:] == ["default 1 0 0 0", "outbox 1 0 0 0", "reports 1 0 1 0"]


# --- a bad expression ---------------------------------------------------------------------


def test_a_worker_whose_app_has_a_bad_expression_does_not_start_and_names_the_field(
    db_url: str, app_store: jobq.Store
) -> None:
    """tests/apps/cron.py ``bad`` defines ``* * * * * 61``: the worker exits 1 with one line
    naming the app module's line that defines it and the sixth field (seconds), and stores
    no schedule."""
    process = worker(db_url, "tests.apps.cron:app", "bad")
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 1, stderr
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert re.fullmatch(
        r"error: Cannot load the app 'tests\.apps\.cron:app': importing 'tests\.apps\.cron' "
        r"raised InvalidOption at tests/apps/cron\.py, line \d+: Option 'cron' is invalid: "
        r"cron expression '\* \* \* \* \* 61': second field '61' is out of range 0-59",
        lines[0],
    ), stderr
    assert app_store.schedules() == []
    assert all_rows(app_store) == []


def test_runs_on_a_database_from_before_the_runs_table_says_to_run_jobq_migrate(
    cli: Cli, empty_url: str
) -> None:
    """A database at revision 0007 has schedules but no jobq_schedule_runs: `--runs` says
    to run `jobq migrate`, in one line, and creates nothing."""
    store = jobq.Store(empty_url)
    with store.engine.begin() as conn:
        migrations.upgrade(conn, "0007")
    cron = Cron("0 0 * * *")
    store.sync_schedules([jobq.Schedule(name="nightly", cron=cron, task="t", queue="default")])
    done = cli(empty_url, "cron", "list", "--runs", "nightly")
    line = failure(done)
    assert line.startswith("error: The jobq tables are missing or out of date"), line
    assert line.endswith("; run `jobq migrate`."), line
    with store.engine.connect() as conn:
        assert migrations.current(conn) == "0007"
    store.dispose()
