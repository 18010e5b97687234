"""`jobq queues`: list every queue; pause or resume one; say how long it keeps finished tasks."""

from __future__ import annotations

import math
from typing import Any

import click

from jobq.cli.common import database_url_option, store_for
from jobq.cli.json_output import dumps
from jobq.cli.output import table
from jobq.cli.params import KeepFor, Key
from jobq.db.durations import format_duration
from jobq.db.tasks import Status
from jobq.queues.overview import QueueState, queue_states

HEADERS = ["queue", *(status.value for status in Status), "paused", "limit", "retain", "workers"]


@click.group()
def queues() -> None:
    """Every queue's tasks, limits and workers; pause and resume a queue; how long each
    keeps its finished tasks."""


@queues.command("list")
@click.option("--json", "as_json", is_flag=True, help="A JSON array of queues instead (see above).")
@database_url_option
def list_queues(as_json: bool, database_url: str) -> None:
    """Every queue: its tasks by status, paused or not, its limit, how long it keeps
    finished tasks (-: the workers' --retain), the live workers serving it (a worker
    serving every queue counts for each).

    \b
    With --json, a JSON array, one object per queue, by name:
    {"queue", "counts": {"queued", "in_progress", "done", "failed", "cancelled"},
     "paused", "limit": null or {"concurrency" (null: none), "rate" (null or N/PERIOD)},
     "retain": null (the workers' --retain), seconds, or "forever",
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


@queues.command()
@click.argument("queue", type=Key())
@click.argument("duration", type=KeepFor(), required=False)
@click.option(
    "--default", "back_to_default", is_flag=True,
    help="Keep QUEUE's finished tasks for the workers' --retain again.",
)  # fmt: skip
@database_url_option
def retain(queue: str, duration: float | None, back_to_default: bool, database_url: str) -> None:
    """Keep the finished tasks of QUEUE for DURATION (30s, 12h, 7d, 1w, or forever),
    whatever the workers' --retain says; the worker elected for the upkeep deletes older
    ones in batches."""
    if (duration is None) == (not back_to_default):
        raise click.UsageError("give either DURATION (say 30d, or forever) or --default")
    with store_for(database_url) as store:
        if back_to_default:
            had = store.clear_retention(queue)
            said = "keeps" if had else "already kept"
            click.echo(f"queue {queue!r} {said} finished tasks for the workers' --retain")
            return
        assert duration is not None
        store.set_retention(queue, duration)
    click.echo(f"queue {queue!r} keeps finished tasks {_kept(duration)}")


def _kept(seconds: float) -> str:
    return "forever" if math.isinf(seconds) else f"for {format_duration(seconds)}"


def _row(state: QueueState) -> list[str]:
    counts = [str(state.counts[status.value]) for status in Status]
    limit = "-" if state.limit is None else str(state.limit)
    workers = str(len(state.workers))
    kept = "-" if state.retain is None else _kept(state.retain).removeprefix("for ")
    return [state.name, *counts, "yes" if state.paused else "no", limit, kept, workers]


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
        "retain": None
        if state.retain is None
        else ("forever" if math.isinf(state.retain) else state.retain),
        "workers": state.workers,
    }
