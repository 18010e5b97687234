"""`jobq queues`: list every queue; pause or resume one; make one fair or plain again; say
how long it keeps finished tasks."""

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
from jobq.limits import FairShare
from jobq.limits.fair import parse_weights
from jobq.queues.overview import QueueState, queue_states

HEADERS = [
    "queue", *(status.value for status in Status), "paused", "limit", "fair", "retain", "workers",
]  # fmt: skip


@click.group()
def queues() -> None:
    """Every queue's tasks, limits and workers; pause and resume a queue; share a queue
    fairly between tenants; how long each keeps its finished tasks."""


@queues.command("list")
@click.option("--json", "as_json", is_flag=True, help="A JSON array of queues instead (see above).")
@database_url_option
def list_queues(as_json: bool, database_url: str) -> None:
    """Every queue: its tasks by status, paused or not, its limit, whether it is fair (its
    default weight, cap per key, and how many keys have work), how long it keeps
    finished tasks (-: the workers' --retain), the live workers serving it (a worker
    serving every queue counts for each).

    \b
    With --json, a JSON array, one object per queue, by name:
    {"queue", "counts": {"queued", "in_progress", "done", "failed", "cancelled"},
     "paused", "limit": null or {"concurrency" (null: none), "rate" (null or N/PERIOD)},
     "fair": null or {"default_weight", "max_running_per_key" (null: none),
     "keys_with_work"},
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
@click.option(
    "--weight", "weights", multiple=True, metavar="KEY=N",
    help="Key KEY's weight (1 or more); repeat for more keys. Others have --default-weight.",
)  # fmt: skip
@click.option(
    "--default-weight", type=click.IntRange(min=1), default=1, show_default=True,
    help="The weight of a key without one of its own.",
)  # fmt: skip
@click.option(
    "--max-running-per-key", type=click.IntRange(min=1), default=None,
    help="The most runs of one key at once (default: no cap).",
)  # fmt: skip
@database_url_option
def fair(
    queue: str,
    weights: tuple[str, ...],
    default_weight: int,
    max_running_per_key: int | None,
    database_url: str,
) -> None:
    """Share QUEUE's captures between its tasks' fair keys (a task's fair_key= template,
    or _fair_key= at enqueue; rows without one share the key ""): each key with work
    waiting is served in proportion to its weight, whatever the size of its backlog, and
    within a key by priority, then due time. Workers follow within a second."""
    with store_for(database_url) as store:
        share = store.fair_queues.make_fair(
            queue,
            weights=parse_weights(weights),
            default_weight=default_weight,
            max_running_per_key=max_running_per_key,
        )
        weighed = store.fair_queues.weights(queue)
    click.echo(f"queue {queue!r}: {share}")
    for key, weight in weighed.items():
        click.echo(f"  key {key!r}: weight {weight}")


@queues.command()
@click.argument("queue", type=Key())
@database_url_option
def unfair(queue: str, database_url: str) -> None:
    """Capture QUEUE in plain order again (priority, due time, id); its keys' weights and
    turns are forgotten."""
    with store_for(database_url) as store:
        unmade = store.fair_queues.make_unfair(queue)
    click.echo(f"queue {queue!r} {'is plain again' if unmade else 'was not fair'}")


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
    fair = "-" if state.fair is None else f"{_share(state.fair)}, {state.fair_keys} keys"
    return [state.name, *counts, "yes" if state.paused else "no", limit, fair, kept, workers]


def _share(share: FairShare) -> str:
    cap = share.max_running_per_key
    return f"weight {share.default_weight}" + ("" if cap is None else f", {cap}/key")


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
        "fair": None
        if state.fair is None
        else {
            "default_weight": state.fair.default_weight,
            "max_running_per_key": state.fair.max_running_per_key,
            "keys_with_work": state.fair_keys,
        },
        "retain": None
        if state.retain is None
        else ("forever" if math.isinf(state.retain) else state.retain),
        "workers": state.workers,
    }
