"""`jobq queues`: list every queue, and pause or resume one."""

from __future__ import annotations

from typing import Any

import click

from jobq.cli.common import database_url_option, store_for
from jobq.cli.json_output import dumps
from jobq.cli.output import table
from jobq.cli.params import Key
from jobq.queues.overview import QueueState, queue_states
from jobq.tasks import Status

HEADERS = ["queue", *(status.value for status in Status), "paused", "limit", "workers"]


@click.group()
def queues() -> None:
    """Every queue's tasks, limits and workers; pause and resume a queue."""


@queues.command("list")
@click.option("--json", "as_json", is_flag=True, help="A JSON array of queues instead (see above).")
@database_url_option
def list_queues(as_json: bool, database_url: str) -> None:
    """Every queue: its tasks by status, paused or not, its limit, the live workers
    serving it (a worker serving every queue counts for each).

    \b
    With --json, a JSON array, one object per queue, by name:
    {"queue", "counts": {"queued", "in_progress", "done", "failed", "cancelled"},
     "paused", "limit": null or {"concurrency" (null: none), "rate" (null or N/PERIOD)},
     "workers": [worker ids]}
    """
    with store_for(database_url, read_only=True) as store:
        states = queue_states(store)
    if as_json:
        click.echo(dumps([_document(state) for state in states]))
    elif not states:
        click.echo("no queues")
    else:
        click.echo(table(HEADERS, [_row(state) for state in states]))


@queues.command()
@click.argument("queue", type=Key())
@database_url_option
def pause(queue: str, database_url: str) -> None:
    """Stop every worker taking tasks of QUEUE (within a second). Running tasks finish;
    waiting ones wait until `jobq queues resume QUEUE`."""
    with store_for(database_url) as store:
        paused = store.pause_queue(queue)
    click.echo(f"queue {queue!r} {'paused' if paused else 'was paused already'}")


@queues.command()
@click.argument("queue", type=Key())
@database_url_option
def resume(queue: str, database_url: str) -> None:
    """Let workers take tasks of QUEUE again."""
    with store_for(database_url) as store:
        resumed = store.resume_queue(queue)
    click.echo(f"queue {queue!r} {'resumed' if resumed else 'was not paused'}")


def _row(state: QueueState) -> list[str]:
    counts = [str(state.counts[status.value]) for status in Status]
    limit = "-" if state.limit is None else str(state.limit)
    workers = str(len(state.workers))
    return [state.name, *counts, "yes" if state.paused else "no", limit, workers]


def _document(state: QueueState) -> dict[str, Any]:
    limit = state.limit
    return {
        "queue": state.name,
        "counts": state.counts,
        "paused": state.paused,
        "limit": None
        if limit is None
        else {
            "concurrency": limit.concurrency,
            "rate": None if limit.rate is None else str(limit.rate),
        },
        "workers": state.workers,
    }
