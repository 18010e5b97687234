"""`jobq retry`, `cancel`, `purge` and `prune`: the operators' actions on tasks."""

from __future__ import annotations

import click

from jobq.cli.common import TASK_ID, database_url_option, store_for
from jobq.cli.output import count
from jobq.cli.params import Duration, Key
from jobq.db.errors import JobqError, TaskNotFound
from jobq.db.tasks import Status, Task


@click.command()
@click.argument("task_id", metavar="[ID]", type=TASK_ID, required=False)
@click.option("--failed", is_flag=True, help="Every terminally failed task instead of ID.")
@click.option("--queue", type=Key(), help="With --failed: only this queue.")
@database_url_option
def retry(task_id: int | None, failed: bool, queue: str | None, database_url: str) -> None:
    """Queue failed or cancelled tasks again.

    Either task ID (failed or cancelled), or with --failed every task that failed with no
    retries left (of one --queue).
    """
    if (task_id is not None) == failed:
        raise click.UsageError("give a task ID or --failed (exactly one)")
    if queue is not None and not failed:
        raise click.UsageError("--queue goes with --failed")
    with store_for(database_url) as store:
        if task_id is None:
            click.echo(f"requeued {count(store.retry_failed(queue))}")
        elif store.retry(task_id):
            click.echo(f"requeued task {task_id}")
        else:
            raise JobqError(_why_not_retried(store.get(task_id), task_id))


def _why_not_retried(task: Task | None, task_id: int) -> str:
    if task is None:
        return f"no task with id {task_id}"
    if task.status not in (Status.FAILED, Status.CANCELLED):
        return f"task {task_id} is {task.status}; only failed or cancelled tasks can be retried"
    if task.recurring:
        return f"task {task_id} is recurring; it cannot be retried"
    return f"task {task_id}: another pending task holds its unique key {task.unique_key!r}"


@click.command()
@click.argument("task_id", metavar="[ID]", type=TASK_ID, required=False)
@click.option("--queue", type=Key(), help="Every waiting task of this queue instead of ID.")
@database_url_option
def cancel(task_id: int | None, queue: str | None, database_url: str) -> None:
    """Cancel task ID, or every waiting task of a --queue.

    A waiting task (queued, or failed with retries left) is cancelled at once. A running
    one is asked to stop: its worker hears of it within a second, and the run ends
    cancelled when its code checks (jobq.check_cancelled), unless it finishes first.
    Finished tasks and schedules' rows (see `jobq cron disable`) cannot be cancelled.
    With --queue, only the queue's waiting tasks are cancelled (blocked workflow nodes
    too, and the nodes after them), in batches; its running tasks go on.
    """
    if (task_id is None) == (queue is None):
        raise click.UsageError("give a task ID or --queue (exactly one)")
    with store_for(database_url) as store:
        if queue is not None:
            cancelled = store.cancel_queue(queue)
            click.echo(f"cancelled {_waiting(cancelled)} of queue {queue!r}")
            return
        assert task_id is not None
        try:
            requested = store.cancel(task_id)
        except TaskNotFound:
            raise JobqError(f"no task with id {task_id}") from None
        task = store.get(task_id)
        if not requested:
            raise JobqError(_why_not_cancelled(task, task_id))
    click.echo(_cancelled(task, task_id))


def _waiting(n: int) -> str:
    return f"{n:,} waiting task" if n == 1 else f"{n:,} waiting tasks"


def _cancelled(task: Task | None, task_id: int) -> str:
    """What `jobq cancel ID` says of a cancel that applied; ``task`` as it is since."""
    if task is None or task.status is Status.CANCELLED:
        return f"cancelled task {task_id}"
    if task.status is Status.IN_PROGRESS:
        return f"task {task_id} is running: cancel requested; its worker stops it within a second"
    return f"task {task_id} was running: cancel requested, but it has ended since ({task.status})"


def _why_not_cancelled(task: Task | None, task_id: int) -> str:
    if task is None:
        return f"no task with id {task_id}"
    if task.recurring:
        return (
            f"task {task_id} is a schedule's recurring row; it cannot be cancelled "
            "(pause the schedule with `jobq cron disable`)"
        )
    if task.status in (Status.DONE, Status.FAILED, Status.CANCELLED):
        return f"task {task_id} has already finished ({task.status}); nothing to cancel"
    return f"task {task_id} is {task.status}; it could not be cancelled"


@click.command()
@click.argument("queue", type=Key())
@click.option("--yes", is_flag=True, help="Confirm the deletion; without it nothing is deleted.")
@database_url_option
def purge(queue: str, yes: bool, database_url: str) -> None:
    """Delete every waiting task of QUEUE, for good; needs --yes.

    Waiting means queued, blocked (a workflow node waiting for its parents; the nodes
    after it elsewhere are cancelled), or failed with retries left. Running and finished
    tasks and schedules' rows stay. Deleted in batches, each its own short transaction.
    """
    if not yes:
        raise click.UsageError(
            f"purge deletes every waiting task of queue {queue!r} for good; add --yes to do it"
        )
    with store_for(database_url) as store:
        click.echo(f"deleted {_waiting(store.purge(queue))} of queue {queue!r}")


@click.command()
@click.option(
    "--older-than",
    type=Duration(),
    required=True,
    help="Age of finished tasks to delete: 30s, 15m, 12h, 7d, 1w or seconds.",
)
@click.option("--queue", type=Key(), default=None, help="Only this queue's (default: all).")
@database_url_option
def prune(older_than: float, queue: str | None, database_url: str) -> None:
    """Delete finished tasks older than --older-than.

    Finished means done, cancelled, or failed with no retries left. Deleted oldest first,
    in batches, each its own short transaction. Workers do this by themselves for tasks
    past their queue's retention (`jobq worker --retain`, `jobq queues retain`).
    """
    with store_for(database_url) as store:
        click.echo(f"deleted {count(store.prune(older_than, queue=queue))}")
