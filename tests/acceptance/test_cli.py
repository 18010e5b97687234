"""The `jobq` commands, run as a user runs them: `python -m jobq.cli` in a subprocess.

Exit statuses: 0 on success, 2 for a wrong command line (click's usage errors, ending
in one ``Error:`` line), 1 for every other expected problem (one ``error:`` line).
Commands refused before any database is opened are checked on SQLite only, and a test
that runs several commands starts them together: each start-up costs half a second.
"""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import fields
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

import jobq
from jobq.cli.json_output import RENAMED
from jobq.db.durations import MAX_SECONDS, format_duration, parse_duration
from jobq.dialects.schema import workers
from tests.helpers import all_rows, set_columns

ROOT = Path(__file__).resolve().parents[2]
UNREACHABLE = "postgresql://u:secret@127.0.0.1:1/x"

Done = subprocess.CompletedProcess[str]
#: For checks that end before any database is opened.
sqlite_only = pytest.mark.parametrize("backend", ["sqlite"])


class Cli:
    """Runs ``jobq ARGS --database-url URL`` in a directory, as a user would."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.env.pop("JOBQ_DATABASE_URL", None)

    def __call__(self, url: str | None, *args: str, env: dict[str, str] | None = None) -> Done:
        """One command; ``url=None`` leaves --database-url out."""
        return self.many(url, [args], env=env)[0]

    def many(
        self, url: str | None, commands: Sequence[Sequence[str]], env: dict[str, str] | None = None
    ) -> list[Done]:
        """Several commands, run at the same time."""
        url_args = [] if url is None else ["--database-url", url]
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "jobq.cli", *args, *url_args],
                cwd=self.cwd,
                env={**self.env, **(env or {})},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for args in commands
        ]
        try:
            return [self._wait(proc) for proc in procs]
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()

    @staticmethod
    def _wait(proc: subprocess.Popen[str]) -> Done:
        out, err = proc.communicate(timeout=60)
        return Done(proc.args, proc.returncode, out, err)


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


def usage_error(done: Done) -> str:
    """The one ``Error:`` line of a click usage error (status 2, after the usage line)."""
    assert done.returncode == 2, (done.args, done.stdout, done.stderr)
    assert done.stderr.startswith("Usage: jobq "), done.stderr
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, done.stderr
    return errors[0]


def failure(done: Done) -> str:
    """The only line of a command that failed with status 1."""
    assert done.returncode == 1, (done.args, done.stdout, done.stderr)
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


def rows_of(table: str) -> list[str]:
    """Each line of a printed table, header included, its cells one space apart."""
    return [" ".join(line.split()) for line in table.strip().splitlines()]


def terminally_failed(store: jobq.Store, name: str, *, queue: str = "default") -> int:
    task_id = store.enqueue(name, {}, queue=queue, retries=0)
    set_columns(
        store, task_id, status="failed", attempt=1, error="boom", finished_at=datetime.now(UTC)
    )
    return task_id


# --- enqueue ------------------------------------------------------------------------------


def test_enqueue_prints_the_id_of_a_task_with_every_option(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    options = ["--queue", "emails", "--delay", "5m", "--priority", "7", "--unique", "welcome:42"]
    done = cli(db_url, "enqueue", "send", "--kwargs", '{"to": "a@b.c"}', *options, "--retries", "1")
    assert done.returncode == 0, done.stderr
    task_id = int(done.stdout)
    again = cli(db_url, "enqueue", "send", "--kwargs", "{}", *options)
    assert (again.returncode, again.stdout) == (0, f"{task_id}\n")  # the key's holder

    task = store.get(task_id)
    assert task is not None
    assert (task.name, task.args, task.queue_id) == ("send", {"to": "a@b.c"}, "emails")
    assert (task.priority, task.unique_key, task.retries_left) == (7, "welcome:42", 1)
    assert 299 <= (task.run_at - task.created_at).total_seconds() <= 301
    assert len(all_rows(store)) == 1


def test_enqueue_without_options_uses_the_store_defaults(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    done = cli(db_url, "enqueue", "ping")
    assert done.returncode == 0, done.stderr
    task = store.get(int(done.stdout))
    assert task is not None
    assert (task.args, task.queue_id, task.priority, task.retries_left) == ({}, "default", 0, 3)
    assert task.unique_key is None and task.run_at == task.created_at


@sqlite_only
def test_enqueue_refuses_bad_options_and_writes_nothing(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    cases = [
        ("--kwargs", '{"to": ', "not valid JSON: Expecting value: line 1 column 8 (char 7)"),
        ("--kwargs", "[1, 2]", "must be a JSON object, not an array"),
        ("--kwargs", '"text"', "must be a JSON object, not a string"),
        ("--kwargs", '{"x": NaN}', "not valid JSON: NaN is not allowed in JSON"),
        ("--delay", "soon", "'soon' is not a duration"),
        ("--priority", str(2**40), f"{2**40} is not in the range"),
        ("--retries", "-1", "-1 is not in the range"),
        ("--queue", "", "'' is not a non-empty string"),
        ("--unique", "k" * 256, "longer than 255 characters"),
    ]
    commands = [["enqueue", "send", option, value] for option, value, _ in cases]
    *results, no_name = cli.many(db_url, [*commands, ["enqueue", ""]])
    for (option, value, reason), done in zip(cases, results, strict=True):
        assert usage_error(done).startswith(f"Error: Invalid value for '{option}': {reason}"), value
    assert usage_error(no_name) == "Error: Invalid value for '[NAME]': '' is not a non-empty string"
    assert store.counts() == {}


@sqlite_only
def test_enqueue_needs_exactly_one_of_name_or_file(
    cli: Cli, db_url: str, store: jobq.Store, tmp_path: Path
) -> None:
    (tmp_path / "tasks.jsonl").write_text('{"name": "a"}\n')
    neither, both, mixed = cli.many(
        db_url,
        [["enqueue"], ["enqueue", "a", "--file", "tasks.jsonl"],
         ["enqueue", "--file", "tasks.jsonl", "--queue", "q"]],
    )  # fmt: skip
    assert usage_error(neither) == "Error: give a task NAME or --file"
    assert usage_error(both) == "Error: give a task NAME or --file, not both"
    assert usage_error(mixed) == "Error: with --file, options go in the file's lines"
    assert store.counts() == {}


def test_enqueue_file_enqueues_every_line_in_order(
    cli: Cli, db_url: str, store: jobq.Store, tmp_path: Path
) -> None:
    lines = [
        {"name": "resize", "kwargs": {"n": 1}},
        {"name": "resize", "kwargs": {"n": 2}},
        {"name": "resize", "kwargs": {"n": 3}, "queue": "images", "priority": 5, "delay": "1h"},
        {"name": "resize", "kwargs": {"n": 4}, "queue": "images", "priority": 5, "delay": 3600},
        {"name": "report", "kwargs": {"day": 1}, "unique": "day-1", "retries": 0},
        {"name": "report", "kwargs": {"day": 1}, "unique": "day-1", "retries": 0},
        {"name": "mail"},
    ]
    text = "\n".join(json.dumps(line) for line in lines[:2]) + "\n\n"
    text += "\n".join(json.dumps(line) for line in lines[2:]) + "\n"
    (tmp_path / "tasks.jsonl").write_text(text)

    done = cli(db_url, "enqueue", "--file", "tasks.jsonl")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "enqueued 6 tasks\n"  # the two "day-1" lines are one task
    # stderr is a pipe here: no progress (test_enqueue_file_shows_progress_on_a_terminal).
    assert "enqueueing" not in done.stderr and "Traceback" not in done.stderr

    rows = all_rows(store)
    assert [(r["name"], r["args"], r["queue_id"], r["priority"]) for r in rows] == [
        ("resize", {"n": 1}, "default", 0),
        ("resize", {"n": 2}, "default", 0),
        ("resize", {"n": 3}, "images", 5),
        ("resize", {"n": 4}, "images", 5),
        ("report", {"day": 1}, "default", 0),
        ("mail", {}, "default", 0),
    ]
    delays = [(r["run_at"] - r["created_at"]).total_seconds() for r in rows]
    assert all(3599 <= delay <= 3601 for delay in delays[2:4])
    assert all(delay == 0 for delay in delays[:2] + delays[4:])
    assert [r["unique_key"] for r in rows] == [None] * 4 + ["day-1", None]
    assert [r["retries_left"] for r in rows] == [3, 3, 3, 3, 0, 3]


@sqlite_only
def test_enqueue_file_shows_progress_on_a_terminal(
    cli: Cli, db_url: str, tmp_path: Path, store: jobq.Store
) -> None:
    """Progress only where someone watches: with stderr on a terminal (a pseudo-terminal
    here) the bar is drawn; in a pipe or a log nothing is (the test above)."""
    (tmp_path / "tasks.jsonl").write_text('{"name": "a"}\n{"name": "b"}\n')
    main, terminal = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "jobq.cli", "enqueue", "--file", "tasks.jsonl",
             "--database-url", db_url],
            cwd=tmp_path, env=cli.env, stdout=subprocess.PIPE, stderr=terminal, text=True,
            timeout=60,
        )  # fmt: skip
        os.close(terminal)
        shown = b""
        while chunk := _read_pty(main):
            shown += chunk
    finally:
        os.close(main)
    assert (done.returncode, done.stdout) == (0, "enqueued 2 tasks\n")
    assert b"enqueueing" in shown, shown
    assert len(all_rows(store)) == 2


def _read_pty(fd: int) -> bytes:
    """What is left to read of a pseudo-terminal whose other end is closed; b"" at its end."""
    try:
        return os.read(fd, 4096)
    except OSError:  # EIO: the other end is closed and all was read
        return b""


@sqlite_only
def test_enqueue_file_with_a_bad_line_names_it_and_writes_nothing(
    cli: Cli, db_url: str, store: jobq.Store, tmp_path: Path
) -> None:
    cases = [
        ('{"name": "b"', "not valid JSON: Expecting ',' delimiter"),
        ('["b"]', "must be a JSON object, not an array"),
        ('{"kwargs": {}}', "'name' is missing"),
        ('{"name": ""}', "Option 'name' is invalid: '' is not a non-empty string"),
        ('{"name": "b", "kwargs": [1]}', "'kwargs' must be a JSON object, not an array"),
        ('{"name": "b", "retries": -1}', "Option 'retries' is invalid: -1 is below 0"),
        ('{"name": "b", "priority": 1.5}', "Option 'priority' is invalid: 1.5 is not an integer"),
        ('{"name": "b", "delay": "soon"}', "'delay': 'soon' is not a duration"),
        ('{"name": "b", "queue": 7}', "Option 'queue' is invalid: 7 is not a non-empty string"),
        ('{"name": "b", "colour": "red"}', "unknown key 'colour'"),
        ('{"name": "b", "kwargs": {"x": "\\ud800"}}',
         "Argument 'x' of task 'b' is not JSON-serialisable: it holds a lone surrogate"),
    ]  # fmt: skip
    good = '{"name": "a", "kwargs": {"n": 1}}'
    for number, (line, _) in enumerate(cases):
        (tmp_path / f"bad{number}.jsonl").write_text(f"{good}\n\n{good}\n{line}\n{good}\n")
    results = cli.many(db_url, [["enqueue", "--file", f"bad{n}.jsonl"] for n in range(len(cases))])
    for number, ((line, message), done) in enumerate(zip(cases, results, strict=True)):
        assert failure(done).startswith(f"error: bad{number}.jsonl line 4: {message}"), line
    assert store.counts() == {}


def enqueue_from_stdin(cli: Cli, url: str, text: str) -> Done:
    """``jobq enqueue --file -`` with ``text`` piped to it."""
    return subprocess.run(
        [sys.executable, "-m", "jobq.cli", "enqueue", "--file", "-", "--database-url", url],
        cwd=cli.cwd, env=cli.env, input=text, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_enqueue_file_streams_chunks_in_one_transaction(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    # More lines than one chunk (jobq.cli.task_file.CHUNK_LINES), read from a pipe.
    lines = [json.dumps({"name": "a", "kwargs": {"n": n}}) for n in range(12_000)]
    bad = enqueue_from_stdin(cli, db_url, "\n".join([*lines, '{"name": 7}']) + "\n")
    assert failure(bad).startswith("error: <stdin> line 12001: Option 'name' is invalid")
    assert store.counts() == {}  # the chunks enqueued before the bad line were rolled back

    good = enqueue_from_stdin(cli, db_url, "\n".join(lines) + "\n")
    assert good.returncode == 0, good.stderr
    assert good.stdout == "enqueued 12000 tasks\n"
    assert [r["args"]["n"] for r in all_rows(store)] == list(range(12_000))


# --- status and list ----------------------------------------------------------------------


def test_status_of_an_empty_database_says_so(cli: Cli, db_url: str) -> None:
    done = cli(db_url, "status")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "no tasks\n\nno workers\n"


def status_scene(store: jobq.Store, between: Callable[[], None] = lambda: None) -> None:
    """What the status tests look at: in queue default one task waiting for 3h 10m, one
    done, one cancelled; in emails one due in 10 min; worker w-1 alive (emails, default),
    w-2 unseen for 10m 30s. ``between`` runs after the tasks, before the workers."""
    waiting = store.enqueue("a", {})
    ran = store.enqueue("b", {}, priority=1)
    cancelled = store.enqueue("c", {})
    store.enqueue("d", {}, queue="emails", delay=600)  # not due: not waiting yet
    (running,) = store.capture(1, worker_id="w")
    assert running.id == ran and store.set_status(ran, running.attempt, "done")
    assert store.cancel(cancelled)
    set_columns(store, waiting, run_at=datetime.now(UTC) - timedelta(hours=3, minutes=10))
    between()
    store.register_worker("w-1", host="alpha", pid=111, queues=["emails", "default"], concurrency=4)
    store.register_worker(
        "w-2", host="beta", pid=222, queues=None, concurrency=1, supervisor_pid=200
    )
    with store.engine.begin() as conn:
        conn.execute(
            sa.update(workers)
            .where(workers.c.worker_id == "w-2")
            .values(last_seen=datetime.now(UTC) - timedelta(minutes=10, seconds=30))
        )


def test_status_shows_counts_oldest_waiting_and_workers(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    status_scene(store)
    done = cli(db_url, "status")
    assert done.returncode == 0, done.stderr
    tasks_table, workers_table = done.stdout.split("\n\n")
    assert rows_of(tasks_table) == [
        "queue queued in_progress done failed cancelled blocked total oldest waiting",
        "default 1 0 1 0 1 0 3 3h 10m",
        "emails 1 0 0 0 0 0 1 -",
    ]
    header, alive, stale = rows_of(workers_table)
    assert header == "worker host pid supervisor queues concurrency last seen state timed out"
    assert re.fullmatch(r"w-1 alpha 111 - emails,default 4 \d+s ago alive 0", alive)
    assert re.fullmatch(r"w-2 beta 222 beta:200 all 1 10m 3\ds ago stale 0", stale)


def test_list_prints_the_newest_tasks_first(cli: Cli, db_url: str, store: jobq.Store) -> None:
    first = store.enqueue("a", {}, queue="q1", retries=2)
    second = store.enqueue("b", {}, queue="q2", delay=60)
    store.cancel(second)
    done = cli(db_url, "list")
    assert done.returncode == 0, done.stderr
    a, b = store.get(first), store.get(second)
    assert a is not None and b is not None
    assert rows_of(done.stdout) == [
        "id queue name status attempt retries_left run_at",
        f"{second} q2 b cancelled 0 3 {b.run_at.replace(microsecond=0)}",
        f"{first} q1 a queued 0 2 {a.run_at.replace(microsecond=0)}",
    ]


def test_list_filters_by_status_and_queue_and_limits(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    store.enqueue("a", {}, queue="emails")
    wanted = store.enqueue("b", {}, queue="emails")
    store.cancel(store.enqueue("c", {}, queue="emails"))  # wrong status
    store.enqueue("d", {}, queue="default")  # wrong queue
    done, nothing = cli.many(
        db_url,
        [["list", "--status", "queued", "--queue", "emails", "--limit", "1"],
         ["list", "--status", "failed"]],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [row.split()[0] for row in rows_of(done.stdout)] == ["id", str(wanted)]
    assert (nothing.returncode, nothing.stdout) == (0, "no tasks\n")


@sqlite_only
def test_list_names_the_valid_statuses_for_an_unknown_one(cli: Cli, db_url: str) -> None:
    line = usage_error(cli(db_url, "list", "--status", "bogus"))
    assert "'bogus' is not one of 'queued', 'in_progress', 'done', 'failed', 'cancelled'" in line


# --- show, retry, cancel, prune -----------------------------------------------------------


def test_show_prints_every_field_with_args_and_result_as_json(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    task_id = store.enqueue("add", {"numbers": [1, 2], "label": "é"}, unique_key="sum")
    task = store.capture(1, worker_id="w-7")[0]
    store.set_status(task_id, task.attempt, "done", result={"ok": True, "sum": 3})
    done = cli(db_url, "show", str(task_id))
    assert done.returncode == 0, done.stderr
    shown = dict(line.split(None, 1) for line in done.stdout.splitlines())
    # Each field under the name --json gives it: "queue", not queue_id.
    assert list(shown) == [RENAMED.get(field.name, field.name) for field in fields(jobq.Task)]
    assert shown["queue"] == "default" and "queue_id" not in shown
    assert json.loads(shown["args"]) == {"numbers": [1, 2], "label": "é"}
    assert json.loads(shown["result"]) == {"ok": True, "sum": 3}
    assert (shown["id"], shown["name"], shown["status"], shown["attempt"]) == (
        str(task_id), "add", "done", "1",
    )  # fmt: skip
    assert (shown["unique_key"], shown["locked_by"], shown["timeout"]) == ("sum", "-", "-")
    assert shown["finished_at"].startswith(str(datetime.now(UTC).year))


def test_show_of_an_unknown_id_is_one_error_line(cli: Cli, db_url: str) -> None:
    assert failure(cli(db_url, "show", "123")) == "error: no task with id 123"


def test_retry_queues_a_failed_task_again(cli: Cli, db_url: str, store: jobq.Store) -> None:
    task_id = terminally_failed(store, "a")
    done = cli(db_url, "retry", str(task_id))
    assert (done.returncode, done.stdout) == (0, f"requeued task {task_id}\n"), done.stderr
    task = store.get(task_id)
    assert task is not None and task.status == "queued" and task.finished_at is None


def test_retry_says_why_a_task_cannot_be_retried(cli: Cli, db_url: str, store: jobq.Store) -> None:
    queued = store.enqueue("a", {})
    displaced = store.enqueue("report", {}, unique_key="day-1")
    assert store.cancel(displaced)
    store.enqueue("report", {}, unique_key="day-1")  # now holds the key
    before = all_rows(store)
    missing, not_failed, key_held = cli.many(
        db_url, [["retry", "999"], ["retry", str(queued)], ["retry", str(displaced)]]
    )
    assert failure(missing) == "error: no task with id 999"
    assert failure(not_failed) == (
        f"error: task {queued} is queued; only failed or cancelled tasks can be retried"
    )
    assert failure(key_held) == (
        f"error: task {displaced}: another pending task holds its unique key 'day-1'"
    )
    assert all_rows(store) == before


def test_retry_failed_requeues_every_terminal_failure_of_a_queue(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    in_a = [terminally_failed(store, "a", queue="qa") for _ in range(2)]
    in_b = terminally_failed(store, "b", queue="qb")
    done = cli(db_url, "retry", "--failed", "--queue", "qa")
    assert (done.returncode, done.stdout) == (0, "requeued 2 tasks\n"), done.stderr
    assert [row["status"] for row in all_rows(store)] == ["queued", "queued", "failed"]
    everywhere = cli(db_url, "retry", "--failed")
    assert (everywhere.returncode, everywhere.stdout) == (0, "requeued 1 task\n")
    assert [row["id"] for row in all_rows(store) if row["status"] == "queued"] == [*in_a, in_b]


@sqlite_only
def test_retry_needs_exactly_one_of_id_or_failed(cli: Cli, db_url: str) -> None:
    neither, both, stray_queue = cli.many(
        db_url, [["retry"], ["retry", "1", "--failed"], ["retry", "1", "--queue", "q"]]
    )
    assert usage_error(neither) == "Error: give a task ID or --failed (exactly one)"
    assert usage_error(both) == "Error: give a task ID or --failed (exactly one)"
    assert usage_error(stray_queue) == "Error: --queue goes with --failed"


def test_cancel_cancels_a_waiting_task(cli: Cli, db_url: str, store: jobq.Store) -> None:
    task_id = store.enqueue("a", {})
    done = cli(db_url, "cancel", str(task_id))
    assert (done.returncode, done.stdout) == (0, f"cancelled task {task_id}\n"), done.stderr
    task = store.get(task_id)
    assert task is not None and task.status == "cancelled" and task.finished_at is not None


def test_cancel_says_why_a_task_cannot_be_cancelled(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    task_id = store.enqueue("a", {})
    store.set_status(task_id, store.capture(1, worker_id="w")[0].attempt, "done")
    failed = terminally_failed(store, "b")
    before = all_rows(store)
    missing, done, out_of_retries = cli.many(
        db_url, [["cancel", "999"], ["cancel", str(task_id)], ["cancel", str(failed)]]
    )
    assert failure(missing) == "error: no task with id 999"
    assert failure(done) == f"error: task {task_id} has already finished (done); nothing to cancel"
    assert failure(out_of_retries) == (
        f"error: task {failed} has already finished (failed); nothing to cancel"
    )
    assert all_rows(store) == before


def test_prune_deletes_finished_tasks_older_than_the_duration(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    now = datetime.now(UTC)
    ages = {"8d": timedelta(days=8), "6d": timedelta(days=6), "2h": timedelta(hours=2)}
    finished = {}
    for label, age in ages.items():
        finished[label] = terminally_failed(store, label)
        set_columns(store, finished[label], finished_at=now - age)
    waiting = store.enqueue("waiting", {})

    done = cli(db_url, "prune", "--older-than", "1w")
    assert (done.returncode, done.stdout) == (0, "deleted 1 task\n"), done.stderr
    assert [r["id"] for r in all_rows(store)] == [finished["6d"], finished["2h"], waiting]
    done = cli(db_url, "prune", "--older-than", "3h")
    assert (done.returncode, done.stdout) == (0, "deleted 1 task\n"), done.stderr
    assert [r["id"] for r in all_rows(store)] == [finished["2h"], waiting]


@sqlite_only
def test_prune_refuses_a_bad_duration_and_deletes_nothing(
    cli: Cli, db_url: str, store: jobq.Store
) -> None:
    task_id = terminally_failed(store, "a")
    set_columns(store, task_id, finished_at=datetime.now(UTC) - timedelta(days=30))
    bad, negative, missing = cli.many(
        db_url, [["prune", "--older-than", "7x"], ["prune", "--older-than", "-1d"], ["prune"]]
    )
    invalid = "Error: Invalid value for '--older-than'"
    assert usage_error(bad).startswith(f"{invalid}: '7x' is not a duration")
    assert usage_error(negative).startswith(f"{invalid}: '-1d' is not a duration")
    assert usage_error(missing).startswith("Error: Missing option '--older-than'")
    assert [r["id"] for r in all_rows(store)] == [task_id]


# --- databases that cannot be used ------------------------------------------------------

EVERY_COMMAND = [
    ["enqueue", "a"],
    ["enqueue", "--file", "tasks.jsonl"],
    ["status"],
    ["list"],
    ["show", "1"],
    ["retry", "1"],
    ["retry", "--failed"],
    ["cancel", "1"],
    ["prune", "--older-than", "1d"],
]


def test_an_unreachable_database_is_one_line_without_the_password(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "tasks.jsonl").write_text('{"name": "a"}\n')
    for args, done in zip(EVERY_COMMAND, cli.many(UNREACHABLE, EVERY_COMMAND), strict=True):
        line = failure(done)
        assert line.startswith("error: Cannot connect to database 'x' on 127.0.0.1:1: "), args
        assert "secret" not in done.stderr + done.stdout, args


def test_an_unmigrated_database_says_to_run_jobq_migrate(
    cli: Cli, empty_url: str, tmp_path: Path
) -> None:
    (tmp_path / "tasks.jsonl").write_text('{"name": "a"}\n')
    for args, done in zip(EVERY_COMMAND, cli.many(empty_url, EVERY_COMMAND), strict=True):
        line = failure(done)
        assert line.startswith("error: The jobq tables are missing or out of date"), args
        assert line.endswith("; run `jobq migrate`."), args


def test_a_bad_url_is_one_line_without_the_password(cli: Cli) -> None:
    done = cli("oracle://scott:tiger@db/x", "status")
    assert "does not run on 'oracle'" in failure(done)
    assert "tiger" not in done.stderr


@sqlite_only
def test_the_url_comes_from_jobq_database_url(
    db_url: str, store: jobq.Store, tmp_path: Path
) -> None:
    """Run elsewhere than the test database's directory, so that the default
    sqlite:///jobq.db cannot be the database the task lands in."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = Cli(elsewhere)(None, "enqueue", "a", env={"JOBQ_DATABASE_URL": db_url})
    assert done.returncode == 0, done.stderr
    assert [row["id"] for row in all_rows(store)] == [int(done.stdout)]
    assert not (elsewhere / "jobq.db").exists()


# --- durations (in process) -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30), ("15m", 900), ("12h", 43200), ("7d", 604800), ("1w", 604800),
        ("90", 90), ("2.5", 2.5), ("1h30m", 5400), ("2m 5s", 125), ("1.5H", 5400), (45, 45),
    ],
)  # fmt: skip
def test_parse_duration(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "7x", "-5", "m", "1h 30", "nan", "1e3", -1, True])
def test_parse_duration_refuses_what_is_not_a_duration(text: str | int) -> None:
    with pytest.raises(ValueError, match="not a"):
        parse_duration(text)


def test_parse_duration_refuses_more_than_a_century() -> None:
    assert parse_duration(MAX_SECONDS) == MAX_SECONDS
    with pytest.raises(ValueError, match="longer than the maximum of 100 years"):
        parse_duration("5300w")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (0.9, "0s"), (-4, "0s"), (59, "59s"), (60, "1m"), (125, "2m 5s"),
     (3605, "1h"), (3661, "1h 1m"), (90061, "1d 1h"), (15 * 86400, "15d")],
)  # fmt: skip
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


# --- enqueue --app: checked against the app's tasks --------------------------------------

APP = ("--app", "tests.apps.mixed:app")


def test_enqueue_with_app_uses_the_tasks_definition(cli: Cli, db_url: str) -> None:
    done = cli(db_url, "enqueue", "work", *APP, "--kwargs", '{"n": 4}', "--priority", "3")
    assert done.returncode == 0, done.stderr
    (row,) = all_rows(jobq.Store(db_url))
    assert row["id"] == int(done.stdout)
    assert (row["name"], row["args"], row["retries_left"], row["priority"]) == (
        "work", {"n": 4}, 2, 3,
    )  # fmt: skip


def test_enqueue_with_app_refuses_unknown_names_and_bad_arguments(cli: Cli, db_url: str) -> None:
    unknown, missing, unexpected = cli.many(
        db_url,
        [
            ["enqueue", "wrok", *APP, "--kwargs", '{"n": 1}'],
            ["enqueue", "work", *APP, "--kwargs", "{}"],
            ["enqueue", "work", *APP, "--kwargs", '{"n": 1, "m": 2}'],
        ],
    )
    assert failure(unknown).startswith("error: No task named 'wrok' is registered in this app")
    assert failure(missing) == "error: task 'work': missing a required argument: 'n'"
    assert failure(unexpected) == "error: task 'work': got an unexpected keyword argument 'm'"
    assert all_rows(jobq.Store(db_url)) == []


@sqlite_only
def test_enqueue_with_an_app_that_does_not_load_says_why(cli: Cli, db_url: str) -> None:
    bad_app = cli(db_url, "enqueue", "work", "--app", "tests.apps.mixed:nope")
    assert failure(bad_app) == (
        "error: Cannot load the app 'tests.apps.mixed:nope': "
        "'tests.apps.mixed' has no attribute 'nope'"
    )


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_worker_logs_one_line_per_task_start_and_end(
    cli: Cli, db_url: str, store: jobq.Store, log_format: str
) -> None:
    done_id = store.enqueue("double", {"n": 4})  # async
    failed_id = store.enqueue("sleep", {"seconds": "not a number"}, retries=0)  # sync
    done = cli(
        db_url, "worker", "--app", "tests.apps.mixed:app", "--burst", "--log-format", log_format
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if "jobq.task" in line]
    if log_format == "text":
        assert any(f"task {done_id} double attempt 1 started" in x for x in lines)
        assert any(f"task {done_id} double attempt 1 done in " in x for x in lines)
        assert any(f"WARNING jobq.task: task {failed_id} sleep failed for good in " in x
                   and " ms (attempt 1 of 1): TypeError: " in x for x in lines)  # fmt: skip
        return
    records = [json.loads(line) for line in lines]
    assert {(r["task_id"], r.get("status")) for r in records} == {
        (done_id, None), (done_id, "done"), (failed_id, None), (failed_id, "failed"),
    }  # fmt: skip
    for record in records:
        assert record["attempt"] == 1
        assert record["task"] == ("double" if record["task_id"] == done_id else "sleep")
        assert record["logger"] == "jobq.task" and "time" in record and "message" in record
        assert record["queue"] == "default"
    ends = {r["task_id"]: r for r in records if "status" in r}
    assert ends[done_id]["duration_ms"] >= 0 and ends[done_id]["level"] == "INFO"
    assert ends[failed_id]["level"] == "WARNING"
    assert ends[failed_id]["error"].startswith("TypeError")
