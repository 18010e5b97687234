"""The `jobq` command line; each command is thin and calls one function of the library.

Exit statuses: 0 on success; 2 when the command line itself is wrong (click's usage
errors: an option value that does not parse, a missing or conflicting argument), with
click's usage line and one ``Error:`` line; 1 for every other expected problem (an
unknown task, a bad line in a --file, an unreachable, unmigrated or misnamed database),
as one ``error: ...`` line on stderr. Never a traceback for any of these.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields
from typing import IO, Any

import click

from jobq.app import App
from jobq.app.loading import load_app
from jobq.app.store import Store
from jobq.cli.common import (
    PRIORITY,
    RETRIES,
    TASK_ID,
    app_option,
    clear_errors,
    database_url_option,
    store_for,
)
from jobq.cli.cron import cron, summary
from jobq.cli.dashboard import dashboard
from jobq.cli.doctor import doctor
from jobq.cli.json_output import (
    RENAMED,
    dumps,
    show_document,
    status_document,
    task_document,
)
from jobq.cli.limits import limits
from jobq.cli.locks import locks
from jobq.cli.metrics_exporter import metrics_exporter
from jobq.cli.output import count, field_text, overrun_note, table, when, worker_row
from jobq.cli.params import Duration, JsonObject, Key, TaskLine
from jobq.cli.queues import queues
from jobq.cli.results import result
from jobq.cli.run_worker import worker
from jobq.cli.task_actions import cancel, prune, purge, retry
from jobq.cli.task_file import enqueue_file
from jobq.cli.why import why
from jobq.cli.workers import list_workers
from jobq.cli.workflows import parents_note, read_parents, workflow
from jobq.core.registry import TaskDefinition
from jobq.db.durations import format_duration
from jobq.db.errors import JobqError
from jobq.db.tasks import Status, Task
from jobq.upkeep import upkeep_holder

# --- commands ---------------------------------------------------------------------------


@click.group()
@click.version_option(package_name="jobq")
def main() -> None:
    """jobq: a job queue whose whole state lives in SQL rows."""


@main.command()
@database_url_option
def migrate(database_url: str) -> None:
    """Create or upgrade jobq's tables (Alembic upgrade head)."""
    with clear_errors():
        store = Store(database_url)
        store.migrate()
        click.echo(f"migrated {store!r} to the newest revision")


@main.command()
@click.argument("name", type=Key(), required=False)
@click.option("--kwargs", type=JsonObject(), help="Keyword arguments, a JSON object.")
@click.option("--queue", type=Key(), help="Queue name (default: the task's, else default).")
@click.option(
    "--delay", type=Duration(), help="Run no sooner than this: 90 (seconds), 30s, 15m, 2h."
)
@click.option("--priority", type=PRIORITY, help="Higher runs first (default: the task's, else 0).")
@click.option(
    "--unique", type=Key(), help="Unique key: at most one pending task holds it (default: the "
    "task's)."
)  # fmt: skip
@click.option(
    "--retries", type=RETRIES, help="Retries after a failure (default: the task's, else 3)."
)
@click.option("--fair-key", type=Key(), help="Fair queues share by this key (default: the task's).")
@click.option(
    "--file",
    "task_file",
    type=click.File("rb"),
    help="JSON lines: name, kwargs, queue, delay, priority, unique, retries, fair_key.",
)
@click.option(
    "--wait",
    type=Duration(),
    help="How long to wait for a database it cannot reach (a restart) before it fails: "
    "90 (seconds), 30s, 0 (at once). Default: the app's, else $JOBQ_ENQUEUE_WAIT, else 5s.",
)
@app_option(
    required=False,
    help="The jobq.App whose task definitions check each name and its arguments and give "
    "its queue, priority, retries, unique, lock and fair keys",
)
@database_url_option
def enqueue(
    name: str | None,
    kwargs: dict[str, Any] | None,
    queue: str | None,
    delay: float | None,
    priority: int | None,
    unique: str | None,
    retries: int | None,
    fair_key: str | None,
    task_file: IO[bytes] | None,
    wait: float | None,
    app_path: str | None,
    database_url: str,
) -> None:
    """Enqueue task NAME, or every line of a --file.

    With an app (--app or $JOBQ_APP), every name must be one of the app's tasks and its
    arguments must fit the function's signature, or nothing is written; the task's
    definition then gives its queue, priority, retries, unique, lock and fair keys, unless an
    option or a --file line gives them. Without an app, tasks are enqueued by name, and a
    warning on stderr says which of the tasks' own options could not be applied. Lease,
    backoff always come from the definition of the worker that runs the task, and so does
    the timeout of a task enqueued without an app.

    Prints the new task's id; with --file, how many tasks were enqueued. The file holds
    one JSON object a line: name (required), kwargs (an object), and optionally queue,
    delay, priority, unique, retries and fair_key. It is enqueued as it is read, in one
    transaction: a bad line anywhere is named, and nothing is written.

    A database that cannot be reached (a restart) is waited for up to --wait; the
    enqueue is tried again only while it certainly wrote nothing, so a task is never
    enqueued twice. Past the wait it fails (exit 1) saying how long it waited.
    """
    given = {
        "queue": queue, "delay": delay, "priority": priority, "retries": retries,
        "fair_key": fair_key,
    }  # fmt: skip
    options = {key: value for key, value in given.items() if value is not None}
    if unique is not None:
        options["unique_key"] = unique
    if task_file is not None:
        if name is not None:
            raise click.UsageError("give a task NAME or --file, not both")
        if options or kwargs is not None:
            raise click.UsageError("with --file, options go in the file's lines")
    elif name is None:
        raise click.UsageError("give a task NAME or --file")
    with clear_errors():
        app = None if app_path is None else load_app(app_path)
        resolve = None if app is None else functools.partial(_with_definition, app, {})
        if task_file is None:
            assert name is not None
            line = TaskLine(name, kwargs or {}, tuple(options.items()))
            line = line if resolve is None else resolve(line)
    with _store(app, database_url) as store:
        if wait is not None:
            store.enqueue_wait = wait
        if task_file is None:
            click.echo(store.enqueue(line.name, line.kwargs, **dict(line.options)))
        else:
            with clear_errors():
                click.echo(f"enqueued {count(enqueue_file(store, task_file, resolve))}")
    if app is None:
        click.echo(_not_applied(name, set(options)), err=True)


#: _with_definition's options by (task name, line options), for tasks without templates.
SharedOptions = dict[tuple[str, tuple[tuple[str, Any], ...]], tuple[tuple[str, Any], ...]]


def _with_definition(app: App, shared: SharedOptions, line: TaskLine) -> TaskLine:
    """``line`` checked against its task's definition in ``app``, with the definition's
    row options where the line gives none; UnknownTask or InvalidTaskArguments if wrong.
    ``shared`` keeps the options of lines that need no templates formatted, per call."""
    definition = app.definition(line.name)
    # Not encoded here: the Store encodes them before it writes, and names the culprit.
    arguments = definition.check_arguments(line.kwargs, json=False)
    if definition.unique is None and definition.lock is None and definition.fair_key is None:
        # The same options for every line of this task and these line options: made once
        # (a file holds a million lines of a few kinds).
        key = (line.name, line.options)
        options = shared.get(key)
        if options is None:
            options = shared[key] = _options(definition, arguments, line)
        return TaskLine(definition.name, arguments, options)
    return TaskLine(definition.name, arguments, _options(definition, arguments, line))


def _options(
    definition: TaskDefinition, arguments: dict[str, Any], line: TaskLine
) -> tuple[tuple[str, Any], ...]:
    return tuple({**definition.row_options(arguments), **dict(line.options)}.items())


@contextmanager
def _store(app: App | None, database_url: str) -> Iterator[Store]:
    """The Store to enqueue into: the app's own unless --database-url or $JOBQ_DATABASE_URL
    names one; errors reported by clear_errors, then disposed."""
    source = click.get_current_context().get_parameter_source("database_url")
    if app is None or source is not click.core.ParameterSource.DEFAULT:
        with store_for(database_url) as store:
            yield store
        return
    with clear_errors():
        try:
            yield app.store
        finally:
            app.store.dispose()


def _not_applied(name: str | None, given: set[str]) -> str:
    """The warning of an enqueue without an app: the task's own options it could not see."""
    missing = [
        option for option, key in [
            ("queue", "queue"), ("priority", "priority"), ("retries", "retries"),
            ("unique key", "unique_key"), ("fair key", "fair_key"),
        ] if key not in given
    ]  # fmt: skip
    whose = f"task {name!r}'s" if name is not None else "the tasks'"
    return (
        f"warning: no app given (--app or $JOBQ_APP), so {whose} own "
        f"{', '.join([*missing, 'lock key'])} from its @app.task definition could not be "
        "applied; jobq's defaults stand where the command gave none"
    )


@main.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead (see above).")
@database_url_option
def status(as_json: bool, database_url: str) -> None:
    """Tasks per queue and status, the schedules, and the workers.

    For each queue: how many tasks each status holds and how long its oldest due task
    has waited (a schedule's row counts there only while a run of it is under way or
    waiting). Then, if there are any, the schedules per queue: how many, running now,
    disabled, no longer defined. Then every registered worker; "stale" ones have not
    been seen for 60s.

    \b
    With --json, one object (times ISO 8601 UTC, durations in seconds):
    {"queues": [{"queue", "counts": {STATUS: n}, "total",
                 "oldest_waiting_seconds" (null: none due)}],
     "schedules": [{"queue", "schedules", "running", "disabled", "no_longer_defined"}],
     "workers": [{"id", "host", "pid", "supervisor" ({"host", "pid"} or null),
                  "queues" (null: all), "concurrency", "started_at", "last_seen",
                  "state" (alive|stale), "alive", "timed_out"}],
     "upkeep": the id of the worker doing the upkeep (rescue, workflow sweeps, purges)
               for every worker now, or null}
    """
    with store_for(database_url, read_only=True) as store:
        counts = store.counts()
        oldest = store.oldest_waiting()
        states = store.schedules()
        workers = store.live_workers()
        upkeep = upkeep_holder(store)
    if as_json:
        click.echo(dumps({**status_document(counts, oldest, states, workers), "upkeep": upkeep}))
        return
    schedules = summary(states)
    if counts:
        queues = sorted({queue for queue, _ in counts})
        rows = [
            [
                queue,
                *(counts.get((queue, s), 0) for s in Status),
                sum(counts.get((queue, s), 0) for s in Status),
                format_duration(oldest[queue]) if queue in oldest else "-",
            ]
            for queue in queues
        ]
        click.echo(table(["queue", *Status, "total", "oldest waiting"], rows))
    else:
        click.echo("no tasks")
    click.echo()
    if schedules is not None:
        click.echo(schedules)
        click.echo()
    if workers:
        headers = [
            "worker", "host", "pid", "supervisor", "queues", "concurrency", "last seen",
            "state", "timed out",
        ]  # fmt: skip
        click.echo(table(headers, [worker_row(worker) for worker in workers]))
    else:
        click.echo("no workers")
    if upkeep is not None:
        click.echo(f"upkeep (rescue, workflow sweeps, purges): worker {upkeep}")


@main.command("list")
@click.option(
    "--status", "status_", type=click.Choice([s.value for s in Status]),
    help="Only tasks in this status.",
)  # fmt: skip
@click.option("--queue", type=Key(), help="Only this queue.")
@click.option("--name", type=Key(), help="Only tasks of this name.")
@click.option(
    "--limit", type=click.IntRange(1, 2**31 - 1), default=50, show_default=True,
    help="At most this many tasks, the newest first.",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="A JSON array of tasks instead (see above).")
@database_url_option
def list_(
    status_: str | None,
    queue: str | None,
    name: str | None,
    limit: int,
    as_json: bool,
    database_url: str,
) -> None:
    """The newest tasks, one a line.

    \b
    With --json, a JSON array of task objects, newest first, each with every field
    `jobq show` prints: {"id", "queue", "name", "args", "status", "priority", "run_at",
    "retries_left", "attempt", "lease", "timeout", "locked_by", "locked_until",
    "unique_key", "lock_key", "result", "error", "recurring", "created_at",
    "started_at", "finished_at", "progress", "cancel_requested_at", "awaited",
    "trace_context"};
    times ISO 8601 UTC or null; args, result, progress as JSON values, or
    {"undecodable": true, "reason", "text"} when the stored text is not JSON.
    """
    with store_for(database_url, read_only=True) as store:
        found = store.list_tasks(status=status_, queue=queue, name=name, limit=limit)
    if as_json:
        click.echo(dumps([task_document(task) for task in found]))
        return
    if not found:
        click.echo("no tasks")
        return
    headers = ["id", "queue", "name", "status", "attempt", "retries_left", "run_at"]
    rows = [
        [t.id, t.queue_id, t.name, t.status, t.attempt, t.retries_left, when(t.run_at)]
        for t in found
    ]
    click.echo(table(headers, rows))


@main.command()
@click.argument("task_id", metavar="ID", type=TASK_ID)
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead (see above).")
@database_url_option
def show(task_id: int, as_json: bool, database_url: str) -> None:
    """Every field of task ID.

    Its progress reads as the task last reported it (current/total message); a note says
    when a cancel was requested, of a run gone past its timeout, and which parents a
    workflow node waits for (or ran after).

    With --json, one task object as `jobq list --json` prints them, its progress as the
    stored JSON value, plus "notes": the notes above, a list of strings (empty if none),
    and "after": the ids of its parents (empty outside workflows).
    """
    with store_for(database_url, read_only=True) as store:
        found = store.get_with_now(task_id)
        if found is None:
            raise JobqError(f"no task with id {task_id}")
        task, now = found
        parents = read_parents(store, task)
    notes = [_cancel_note(task), overrun_note(task, now), parents_note(task, parents)]
    if as_json:
        document = show_document(task, notes)
        document["after"] = [parent_id for parent_id, _ in parents]
        click.echo(dumps(document))
        return
    # Labelled as --json names them: "queue", not the attribute's queue_id.
    labels = {field.name: RENAMED.get(field.name, field.name) for field in fields(task)}
    width = max(len(label) for label in labels.values())
    for name, label in labels.items():
        text = _progress_text(task.progress) if name == "progress" else None
        click.echo(f"{label.ljust(width)}  {text or field_text(task, name)}")
    for note in notes:
        if note:
            click.echo(f"{'note'.ljust(width)}  {note}")


def _progress_text(progress: Any) -> str | None:
    """A task's progress as `jobq show` prints it: "40/100 resizing images", "40"; None
    when there is none, or it is not what jobq.set_progress stores."""
    if not isinstance(progress, dict) or "current" not in progress:
        return None
    current, total, message = (progress.get(key) for key in ("current", "total", "message"))
    text = _number(current) if total is None else f"{_number(current)}/{_number(total)}"
    if message:
        text = f"{text} {message}"
    # A terminal cannot print lone surrogates: escape them, as field_text does.
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _number(value: Any) -> str:
    """40 for 40 and 40.0, 2.5 for 2.5."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return str(value)


def _cancel_note(task: Task) -> str | None:
    """What `jobq show` says of a cancel requested while the task ran, or None."""
    if task.cancel_requested_at is None:
        return None
    at = task.cancel_requested_at.isoformat(sep=" ")
    if task.status is Status.IN_PROGRESS:
        return f"cancel requested at {at}; its worker stops the run within a second"
    return f"cancel requested at {at}, while it ran"


if __name__ == "__main__":
    main(prog_name="jobq")


main.add_command(worker)
main.add_command(retry)
main.add_command(cancel)
main.add_command(purge)
main.add_command(prune)
main.add_command(locks)
main.add_command(cron)
main.add_command(limits)
main.add_command(result)
main.add_command(why)
main.add_command(list_workers)
main.add_command(queues)
main.add_command(metrics_exporter)
main.add_command(dashboard)
main.add_command(workflow)
main.add_command(doctor)
