"""`jobq cron list | run | disable | enable`, run as a user runs them, on every database.

The schedules are stored as a worker stores them when it starts: an App defines them with
``@app.periodic`` and ``sync_schedules`` writes them. Their runs are captured and ended in
this process through the Store; the commands run in subprocesses.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa

import jobq
from jobq import Status
from jobq.cron.schedule import Cron
from jobq.dialects.schema import schedules
from jobq.engine import migrations
from tests.acceptance.test_cli import UNREACHABLE, Cli, Done, failure, usage_error
from tests.helpers import all_rows, expire_lease, set_columns

HEADERS = ["name", "cron", "task", "queue", "next run", "last run", "last status"]
COMMANDS = ["run", "disable", "enable"]
PARIS = ZoneInfo("Europe/Paris")
ENQUEUED = re.compile(r"enqueued task (\d+) \(a run of schedule '([^']+)'\)\n")


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


def defined_app(db_url: str, store: jobq.Store) -> jobq.App:
    """An app with three schedules: every 5 minutes (with arguments), 9:00 Paris, midnight UTC.

    Its Store is the test's, so the schedules it syncs are the ones the test reads.
    """
    app = jobq.App(db_url)
    app.store = store

    @app.periodic(cron="*/5 * * * *", queue="reports", kwargs={"day": "monday", "n": 3})
    @app.task(retries=0, priority=7, lease=45)
    def report(day: str, n: int) -> None:
        """Writes a report (never runs here)."""

    @app.periodic(cron="0 9 * * *", timezone="Europe/Paris", name="morning-mail")
    @app.task(queue="outbox", retries=2)
    def mail() -> None:
        """Sends the morning mail (never runs here)."""

    @app.periodic(cron="0 0 * * *", name="nightly")
    def cleanup() -> None:
        """Cleans up (never runs here)."""

    return app


def synced(db_url: str, store: jobq.Store) -> jobq.App:
    """The app, its schedules stored as a starting worker stores them."""
    app = defined_app(db_url, store)
    store.sync_schedules(app.schedules.values())
    return app


def undefine(store: jobq.Store, app: jobq.App, name: str) -> None:
    """Sync again without schedule ``name``, as a worker whose app no longer has it does."""
    report = store.sync_schedules(s for key, s in app.schedules.items() if key != name)
    assert report.removed == [name]


def schedule_row(store: jobq.Store, name: str) -> dict[str, Any]:
    """The task row of schedule ``name``."""
    (state,) = [state for state in store.schedules() if state.name == name]
    (row,) = [row for row in all_rows(store) if row["id"] == state.task_id]
    return row


def schedule_rows(store: jobq.Store) -> list[dict[str, Any]]:
    """Every jobq_schedules row, by name: for 'nothing changed' assertions."""
    with store.engine.connect() as conn:
        query = sa.select(schedules).order_by(schedules.c.name)
        return [dict(row._mapping) for row in conn.execute(query)]


def start_run(store: jobq.Store, name: str) -> jobq.Task:
    """Make schedule ``name``'s tick due and capture its row, as a worker would."""
    row = schedule_row(store, name)
    set_columns(store, row["id"], run_at=datetime.now(UTC) - timedelta(minutes=1))
    (run,) = store.capture(10, queues=row["queue_id"], worker_id="worker-1")
    assert run.id == row["id"] and run.recurring
    return run


def utc(moment: datetime) -> datetime:
    """A stored datetime as aware UTC (SQLite gives naive UTC back)."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def printed(moment: datetime) -> str:
    """A moment as the commands print it: UTC, to the second."""
    return utc(moment).isoformat(sep=" ", timespec="seconds")


def listed(done: Done) -> dict[str, dict[str, str]]:
    """`jobq cron list`'s table by schedule name, each line's cells by header, in order.

    Cells may hold spaces ("0 9 * * * (Europe/Paris)"), so each column is cut where its
    header starts; the header must be exactly HEADERS.
    """
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    header, *lines = done.stdout.rstrip("\n").split("\n")
    assert header.split("  ") != [header], header  # columns at least two spaces apart
    starts, position = [], 0
    for label in HEADERS:
        position = header.index(label, position)
        starts.append(position)
        position += len(label)
    assert header[starts[0] :].split() == " ".join(HEADERS).split(), header
    found: dict[str, dict[str, str]] = {}
    for line in lines:
        for start in starts[1:]:
            assert line[start - 2 : start] == "  ", (line, start)  # nothing spills over
        ends = [*starts[1:], None]
        cells = [line[start:end].strip() for start, end in zip(starts, ends, strict=True)]
        assert cells[0] not in found, done.stdout
        found[cells[0]] = dict(zip(HEADERS, cells, strict=True))
    return found


# --- list ---------------------------------------------------------------------------------


def test_list_with_no_schedules_says_so(cli: Cli, db_url: str, store: jobq.Store) -> None:
    """A database with plain tasks but no schedule lists "no schedules"; plain tasks are not."""
    store.enqueue("report", {"day": "monday"}, queue="reports")
    done = cli(db_url, "cron", "list")
    assert (done.returncode, done.stdout, done.stderr) == (0, "no schedules\n", "")


def test_list_shows_every_schedule_at_its_next_tick(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    """One line per schedule, by name, under the header: its expression (with the timezone
    when not UTC), task, queue, the tick stored as its next run, and no run yet."""
    synced(db_url, store)
    store.enqueue("report", {}, queue="reports")  # a plain task is no schedule
    done = cli(db_url, "cron", "list")
    found = listed(done)
    assert list(found) == ["morning-mail", "nightly", "report"]  # by name
    assert {name: (row["cron"], row["task"], row["queue"]) for name, row in found.items()} == {
        "morning-mail": ("0 9 * * * (Europe/Paris)", "mail", "outbox"),
        "nightly": ("0 0 * * *", "cleanup", "default"),
        "report": ("*/5 * * * *", "report", "reports"),
    }
    expressions = {
        "morning-mail": Cron("0 9 * * *", "Europe/Paris"),
        "nightly": Cron("0 0 * * *"),
        "report": Cron("*/5 * * * *"),
    }
    for name, row in found.items():
        stored = schedule_row(store, name)
        assert row["next run"] == printed(stored["run_at"]), name
        # The tick is the first one after the schedule was stored, in its own timezone.
        assert utc(stored["run_at"]) == expressions[name].next_after(utc(stored["created_at"]))
        assert (row["last run"], row["last status"]) == ("-", "-"), name
    paris = datetime.fromisoformat(found["morning-mail"]["next run"]).astimezone(PARIS)
    assert (paris.hour, paris.minute) == (9, 0)


def test_list_shows_a_run_under_way_then_how_each_run_ended(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    """A captured schedule shows "running" in both columns; once its run ends done, then
    failed (no retries), the last run is when that run started and the last status its end,
    and the next run is the next tick stored for it."""
    synced(db_url, store)
    first = start_run(store, "report")
    assert first.started_at is not None
    found = listed(cli(db_url, "cron", "list"))
    running = found["report"]
    assert (running["next run"], running["last status"]) == ("running", "running")
    assert running["last run"] == printed(first.started_at)
    assert (found["nightly"]["last run"], found["nightly"]["last status"]) == ("-", "-")

    assert store.set_status(first.id, first.attempt, Status.DONE, result={"rows": 3})
    done = listed(cli(db_url, "cron", "list"))["report"]
    row = schedule_row(store, "report")
    # The run's end moved it to the first tick after the end (the database's now).
    assert row["status"] == "done" and row["finished_at"] is not None
    assert utc(row["run_at"]) == Cron("*/5 * * * *").next_after(utc(row["finished_at"]))
    assert done == {
        "name": "report", "cron": "*/5 * * * *", "task": "report", "queue": "reports",
        "next run": printed(row["run_at"]), "last run": printed(first.started_at),
        "last status": "done",
    }  # fmt: skip

    second = start_run(store, "report")
    assert second.started_at is not None and second.attempt == first.attempt + 1
    assert store.set_status(second.id, second.attempt, Status.FAILED, error="boom")
    failed = listed(cli(db_url, "cron", "list"))["report"]
    row = schedule_row(store, "report")
    assert row["status"] == "done" and row["finished_at"] is not None
    assert utc(row["run_at"]) == Cron("*/5 * * * *").next_after(utc(row["finished_at"]))
    assert failed["next run"] == printed(row["run_at"])
    assert (failed["last run"], failed["last status"]) == (printed(second.started_at), "failed")


def test_list_shows_disabled_and_no_longer_defined_schedules(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    """A disabled schedule shows "disabled" as its next run, and one a later sync no longer
    defines shows "disabled (no longer defined)"; the others keep their ticks."""
    app = synced(db_url, store)
    store.set_schedule_enabled("nightly", False)
    undefine(store, app, "morning-mail")
    found = listed(cli(db_url, "cron", "list"))
    assert list(found) == ["morning-mail", "nightly", "report"]  # kept, and listed
    assert found["morning-mail"]["next run"] == "disabled (no longer defined)"
    assert found["morning-mail"]["cron"] == "0 9 * * * (Europe/Paris)"
    assert found["nightly"]["next run"] == "disabled"
    assert found["report"]["next run"] == printed(schedule_row(store, "report")["run_at"])
    for row in found.values():
        assert (row["last run"], row["last status"]) == ("-", "-")


# --- run ----------------------------------------------------------------------------------


def test_run_enqueues_a_one_off_copy_and_leaves_the_schedule_as_it_is(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    """`run` prints the id of a new queued, non-recurring, due task with the schedule's task,
    arguments, queue and options; the schedule's own row, idle or running, is unchanged."""
    synced(db_url, store)
    running = start_run(store, "nightly")
    before = all_rows(store)
    before_schedules = schedule_rows(store)
    started = datetime.now(UTC)
    idle_done, running_done = cli.many(
        db_url, [["cron", "run", "report"], ["cron", "run", "nightly"]]
    )
    copies = {}
    for name, done in [("report", idle_done), ("nightly", running_done)]:
        assert (done.returncode, done.stderr) == (0, ""), done.stderr
        match = ENQUEUED.fullmatch(done.stdout)
        assert match is not None and match[2] == name, done.stdout
        copies[name] = int(match[1])

    after = all_rows(store)
    assert [row for row in after if row["id"] not in copies.values()] == before
    assert schedule_rows(store) == before_schedules
    rows = {row["id"]: row for row in after}
    report = rows[copies["report"]]
    assert (report["name"], report["args"], report["queue_id"]) == (
        "report", {"day": "monday", "n": 3}, "reports",
    )  # fmt: skip
    assert (report["priority"], report["lease"], report["retries_left"]) == (7, 45, 0)
    nightly = rows[copies["nightly"]]
    assert (nightly["name"], nightly["args"], nightly["queue_id"]) == ("cleanup", {}, "default")
    for copy in (report, nightly):
        assert (copy["status"], copy["recurring"], copy["attempt"]) == ("queued", False, 0)
        assert utc(copy["run_at"]) <= datetime.now(UTC)
        assert utc(copy["run_at"]) >= started - timedelta(seconds=5)
    schedule = rows[running.id]
    assert (schedule["status"], schedule["attempt"]) == ("in_progress", running.attempt)

    # The copies are due now, apart from the schedule's rows (the idle one may fall due too
    # if a five-minute tick passed during the test; the running one is still held).
    captured = store.capture(10, worker_id="worker-2")
    assert {task.id for task in captured if not task.recurring} == set(copies.values())
    assert running.id not in {task.id for task in captured}


# --- disable and enable -------------------------------------------------------------------


def test_disable_rests_the_schedule_and_enable_wakes_it_at_its_next_tick(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    """`disable` cancels the schedule's row, so even a due tick is not captured; `enable`
    returns it to done at a future tick and prints that tick."""
    synced(db_url, store)
    done = cli(db_url, "cron", "disable", "nightly")
    assert (done.returncode, done.stdout, done.stderr) == (0, "disabled schedule 'nightly'\n", "")
    row = schedule_row(store, "nightly")
    assert row["status"] == "cancelled"
    assert listed(cli(db_url, "cron", "list"))["nightly"]["next run"] == "disabled"
    set_columns(store, row["id"], run_at=datetime.now(UTC) - timedelta(hours=1))
    assert store.capture(10, queues="default", worker_id="worker-1") == []

    before = datetime.now(UTC)
    done = cli(db_url, "cron", "enable", "nightly")
    after = datetime.now(UTC)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    row = schedule_row(store, "nightly")
    assert (row["status"], row["retries_left"], row["recurring"]) == ("done", 3, True)
    midnight = Cron("0 0 * * *")
    assert midnight.next_after(before) <= utc(row["run_at"]) <= midnight.next_after(after)
    assert done.stdout == f"enabled schedule 'nightly'; next run {printed(row['run_at'])}\n"
    assert listed(cli(db_url, "cron", "list"))["nightly"]["next run"] == printed(row["run_at"])
    assert store.capture(10, queues="default", worker_id="worker-1") == []  # not due yet


def test_disable_lets_a_run_under_way_finish(cli: Cli, db_url: str, store: jobq.Store) -> None:
    """Disabling a running schedule leaves its run to end normally (recorded as its last
    status); the row then rests cancelled until `enable`."""
    synced(db_url, store)
    run = start_run(store, "report")
    done = cli(db_url, "cron", "disable", "report")
    assert (done.returncode, done.stdout) == (0, "disabled schedule 'report'\n"), done.stderr
    assert schedule_row(store, "report")["status"] == "in_progress"
    shown = listed(cli(db_url, "cron", "list"))["report"]
    assert (shown["next run"], shown["last status"]) == ("disabled", "running")

    assert store.set_status(run.id, run.attempt, Status.DONE)
    assert schedule_row(store, "report")["status"] == "cancelled"
    shown = listed(cli(db_url, "cron", "list"))["report"]
    assert (shown["next run"], shown["last status"]) == ("disabled", "done")

    before = datetime.now(UTC)
    done = cli(db_url, "cron", "enable", "report")
    assert done.returncode == 0, done.stderr
    row = schedule_row(store, "report")
    assert row["status"] == "done" and utc(row["run_at"]) > before
    assert done.stdout == f"enabled schedule 'report'; next run {printed(row['run_at'])}\n"


def test_a_schedule_disabled_during_a_run_that_fails_is_not_retried(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    """The run under way finishes, but a disabled schedule starts no new attempt: a run that
    fails with retries left rests like one disabled after the failure (which `disable`
    cancels), and is not captured again until `enable`."""
    synced(db_url, store)
    run = start_run(store, "nightly")  # retries=3: a failure is retried
    done = cli(db_url, "cron", "disable", "nightly")
    assert (done.returncode, done.stdout) == (0, "disabled schedule 'nightly'\n"), done.stderr
    assert store.set_status(run.id, run.attempt, Status.FAILED, error="boom", retry_delay=0)
    shown = listed(cli(db_url, "cron", "list"))["nightly"]
    assert (shown["next run"], shown["last status"]) == ("disabled", "failed")
    captured = store.capture(10, queues="default", worker_id="worker-2")
    assert captured == [], f"disabled schedule 'nightly' ran again: {captured}"
    assert schedule_row(store, "nightly")["status"] == "cancelled"


def test_a_schedule_disabled_during_a_run_whose_worker_died_is_not_retried(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    """A disabled schedule whose run was lost (its worker died: the lease expired) is not
    captured again as a retry, any more than one whose run failed."""
    synced(db_url, store)
    run = start_run(store, "nightly")  # retries=3
    done = cli(db_url, "cron", "disable", "nightly")
    assert (done.returncode, done.stdout) == (0, "disabled schedule 'nightly'\n"), done.stderr
    expire_lease(store, run.id)
    captured = store.capture(10, queues="default", worker_id="worker-2")
    assert captured == [], f"disabled schedule 'nightly' ran again: {captured}"


def test_enable_during_a_run_prints_no_past_next_run(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    """`enable` of a schedule whose run is under way leaves the run alone, and does not give
    the tick that run is for (already past) as the next run: `list` says "running" there."""
    synced(db_url, store)
    run = start_run(store, "report")  # its tick was moved a minute into the past
    store.set_schedule_enabled("report", False)
    before = all_rows(store)
    started = datetime.now(UTC)
    done = cli(db_url, "cron", "enable", "report")
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert done.stdout.startswith("enabled schedule 'report'"), done.stdout
    row = schedule_row(store, "report")
    assert (row["status"], row["attempt"]) == ("in_progress", run.attempt)
    assert [r for r in all_rows(store) if r["id"] != run.id] == [
        r for r in before if r["id"] != run.id
    ]
    announced = re.search(r"next run (\S+ \S+)$", done.stdout.strip())
    assert announced is None or datetime.fromisoformat(announced[1]) > started, done.stdout


def test_enable_of_an_undefined_schedule_says_it_runs_once_defined(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    """A schedule no worker's app defines any more stays at rest after `enable`, which says
    so; it runs again when a sync defines it once more."""
    app = synced(db_url, store)
    undefine(store, app, "morning-mail")
    disabled = cli(db_url, "cron", "disable", "morning-mail")
    assert disabled.stdout == "disabled schedule 'morning-mail'\n", disabled.stderr
    shown = listed(cli(db_url, "cron", "list"))["morning-mail"]
    assert shown["next run"] == "disabled"  # disabled is said before no longer defined

    done = cli(db_url, "cron", "enable", "morning-mail")
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert done.stdout == (
        "enabled schedule 'morning-mail'; it runs again once the app of the workers serving "
        "queue 'outbox' defines it\n"
    )
    assert schedule_row(store, "morning-mail")["status"] == "cancelled"
    shown = listed(cli(db_url, "cron", "list"))["morning-mail"]
    assert shown["next run"] == "disabled (no longer defined)"

    before = datetime.now(UTC)
    store.sync_schedules(app.schedules.values())
    row = schedule_row(store, "morning-mail")
    assert row["status"] == "done" and utc(row["run_at"]) > before
    assert listed(cli(db_url, "cron", "list"))["morning-mail"]["next run"] == printed(row["run_at"])


# --- names that are no schedule's ---------------------------------------------------------


def test_an_unknown_name_is_one_error_line_and_changes_nothing(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    """run, disable and enable of a name no schedule has (its task's name, another case, the
    longest name allowed) exit 1 with one line and write nothing, even while one runs."""
    synced(db_url, store)
    start_run(store, "report")
    before, before_schedules = all_rows(store), schedule_rows(store)
    commands = [
        ["cron", "run", "x"], ["cron", "run", "n" * 255], ["cron", "disable", "x"],
        ["cron", "disable", "REPORT"], ["cron", "enable", "x"], ["cron", "enable", "cleanup"],
    ]  # fmt: skip
    for args, done in zip(commands, cli.many(db_url, commands), strict=True):
        name = args[2]
        assert failure(done) == f"error: No schedule named {name!r} (see `jobq cron list`).", args
        assert "Traceback" not in done.stderr
    assert all_rows(store) == before
    assert schedule_rows(store) == before_schedules


@pytest.mark.parametrize("backend", ["sqlite"])
def test_an_empty_or_overlong_name_is_a_usage_error(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    """NAME is a key: an empty one or one over 255 characters is refused by click (exit 2)
    before the database is touched."""
    synced(db_url, store)
    before, before_schedules = all_rows(store), schedule_rows(store)
    commands = [["cron", command, name] for command in COMMANDS for name in ["", "n" * 256]]
    for args, done in zip(commands, cli.many(db_url, commands), strict=True):
        line = usage_error(done)
        assert done.stderr.startswith(f"Usage: jobq cron {args[1]} "), done.stderr
        reason = "'' is not a non-empty string" if args[2] == "" else "longer than 255 characters"
        assert line == f"Error: Invalid value for 'NAME': {reason}", args
    assert all_rows(store) == before
    assert schedule_rows(store) == before_schedules


# --- the database -------------------------------------------------------------------------

EVERY_COMMAND = [["cron", "list"], *(["cron", command, "nightly"] for command in COMMANDS)]


def test_an_unreachable_database_is_one_line_without_the_password(cli: Cli) -> None:
    """Every cron command reports an unreachable server in one line, the password hidden."""
    for args, done in zip(EVERY_COMMAND, cli.many(UNREACHABLE, EVERY_COMMAND), strict=True):
        line = failure(done)
        assert line.startswith("error: Cannot connect to database 'x' on 127.0.0.1:1: "), args
        assert "secret" not in done.stderr + done.stdout, args


def test_a_bad_url_is_one_line_without_the_password(cli: Cli) -> None:
    """An unsupported URL is one error line for every cron command, an unparseable one too."""
    oracle = cli.many("oracle://scott:tiger@db/x", EVERY_COMMAND)
    for args, done in zip(EVERY_COMMAND, oracle, strict=True):
        assert "does not run on 'oracle'" in failure(done), args
        assert "tiger" not in done.stderr, args
    garbled = cli("not a url", "cron", "list")
    assert "expected dialect://user:password@host:port/database" in failure(garbled)


def test_an_unmigrated_database_says_to_run_jobq_migrate(cli: Cli, empty_url: str) -> None:
    """Every cron command on a database without jobq's tables says to run `jobq migrate`."""
    for args, done in zip(EVERY_COMMAND, cli.many(empty_url, EVERY_COMMAND), strict=True):
        line = failure(done)
        assert line.startswith("error: The jobq tables are missing or out of date"), args
        assert line.endswith("; run `jobq migrate`."), args


def test_a_database_from_before_schedules_says_to_run_jobq_migrate(
    cli: Cli, empty_url: str
) -> None:
    """A database migrated up to the revision before jobq_schedules (0004) has a tasks
    table but no schedules: every cron command says to run `jobq migrate`."""
    engine = sa.create_engine(empty_url)
    with engine.begin() as conn:
        migrations.upgrade(conn, "0004")
    engine.dispose()
    for args, done in zip(EVERY_COMMAND, cli.many(empty_url, EVERY_COMMAND), strict=True):
        line = failure(done)
        assert line.startswith("error: The jobq tables are missing or out of date"), args
        assert line.endswith("; run `jobq migrate`."), args


@pytest.mark.parametrize("backend", ["sqlite"])
def test_the_url_comes_from_jobq_database_url(
    db_url: str, store: jobq.Store, tmp_path: Path
) -> None:
    """Without --database-url, the cron commands use $JOBQ_DATABASE_URL (run elsewhere than
    the test database's directory, so the default sqlite:///jobq.db cannot be it)."""
    synced(db_url, store)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cli, env = Cli(elsewhere), {"JOBQ_DATABASE_URL": db_url}
    ran, shown = cli.many(None, [["cron", "run", "nightly"], ["cron", "list"]], env=env)
    assert ran.returncode == 0, ran.stderr
    match = ENQUEUED.fullmatch(ran.stdout)
    assert match is not None and store.get(int(match[1])) is not None
    assert list(listed(shown)) == ["morning-mail", "nightly", "report"]
    assert not (elsewhere / "jobq.db").exists()
