"""`jobq workers`: every registered worker, and the tasks each runs now.

The workers come from their registry rows (jobq_workers), the tasks from the rows
themselves: the in_progress tasks by the worker id that captured them (locked_by). A
worker id that holds running tasks but has no registry row (forgotten after an hour
unseen, its leases not yet expired) is listed too, as "unregistered".
"""

from __future__ import annotations

from collections.abc import Sequence

import click

from jobq.cli.common import database_url_option, store_for
from jobq.cli.json_output import (
    dumps,
    running_document,
    unregistered_worker_document,
    worker_document,
)
from jobq.cli.output import table, when, worker_row
from jobq.core.live_workers import LiveWorker
from jobq.db.tasks import Task

#: Running tasks the text form lists per worker; --json lists them all.
LISTED = 10

WORKER_HEADERS = [
    "worker", "host", "pid", "supervisor", "queues", "concurrency", "last seen", "state",
    "timed out", "running",
]  # fmt: skip
TASK_HEADERS = ["id", "name", "queue", "attempt", "started", "locked until"]


@click.command("workers")
@click.option(
    "--json", "as_json", is_flag=True, help="A JSON array of workers instead (see above)."
)
@database_url_option
def list_workers(as_json: bool, database_url: str) -> None:
    """Every registered worker and the tasks it runs now.

    One line per worker ("stale" ones have not been seen for 60s; "unregistered" ones
    hold running tasks but have no registry row), then, for each worker running tasks,
    its oldest runs (up to 10; "+N more" says how many are not shown).

    \b
    With --json, a JSON array, one object per worker (times ISO 8601 UTC or null):
    {"id", "host", "pid", "supervisor" ({"host", "pid"} of its `--processes`
     supervisor, or null), "queues" (null: all), "concurrency", "started_at",
     "last_seen", "state" (alive|stale|unregistered), "alive", "timed_out",
     "running_count", "running": [{"id", "name", "queue", "attempt", "started_at",
     "locked_until"}]}, every running task listed, oldest first.
    """
    with store_for(database_url, read_only=True) as store:
        registered = store.live_workers()
        running = store.running_tasks()
    known = {worker.worker_id for worker in registered}
    # Sorted, so that the listing is the same from one call to the next.
    unregistered = sorted(worker_id for worker_id in running if worker_id not in known)
    if as_json:
        click.echo(dumps(_documents(registered, unregistered, running)))
    else:
        click.echo(_text(registered, unregistered, running))


def _documents(
    registered: Sequence[LiveWorker], unregistered: Sequence[str], running: dict[str, list[Task]]
) -> list[dict[str, object]]:
    documents = []
    pairs = [(w.worker_id, worker_document(w)) for w in registered] + [
        (worker_id, unregistered_worker_document(worker_id or None)) for worker_id in unregistered
    ]
    for worker_id, document in pairs:
        tasks = running.get(worker_id, [])
        document["running_count"] = len(tasks)
        document["running"] = [running_document(task) for task in tasks]
        documents.append(document)
    return documents


def _text(
    registered: Sequence[LiveWorker],
    unregistered: Sequence[str],
    running: dict[str, list[Task]],
) -> str:
    if not registered and not unregistered:
        return "no workers"
    rows = [[*worker_row(w), len(running.get(w.worker_id, []))] for w in registered]
    rows += [
        [worker_id or "-", *["-"] * 6, "unregistered", "-", len(running[worker_id])]
        for worker_id in unregistered
    ]
    blocks = [_printable(table(WORKER_HEADERS, rows))]
    for worker_id in [w.worker_id for w in registered] + list(unregistered):
        tasks = running.get(worker_id, [])
        if tasks:
            blocks.append(_tasks_block(worker_id, tasks))
    return "\n\n".join(blocks)


def _tasks_block(worker_id: str, tasks: Sequence[Task]) -> str:
    """A worker's running tasks: a heading, then its oldest LISTED runs, indented."""
    heading = f"{worker_id or '-'} runs {len(tasks)} {'task' if len(tasks) == 1 else 'tasks'}:"
    rows = [
        [t.id, t.name, t.queue_id, t.attempt, when(t.started_at), when(t.locked_until)]
        for t in tasks[:LISTED]
    ]
    lines = [heading, *("  " + line for line in table(TASK_HEADERS, rows).splitlines())]
    if len(tasks) > LISTED:
        lines.append(f"  +{len(tasks) - LISTED} more (jobq workers --json lists them all)")
    return _printable("\n".join(lines))


def _printable(text: str) -> str:
    # A terminal cannot print lone surrogates (undecodable bytes in a str): escape them.
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
