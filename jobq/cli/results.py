"""`jobq result ID`: wait for a task to end and print its result as JSON."""

from __future__ import annotations

import json
import sys

import click

from jobq.cli.common import TASK_ID, database_url_option, store_for
from jobq.cli.params import Duration
from jobq.db.errors import JobqError, TaskFailed, TaskNotFound
from jobq.db.tasks import Undecodable
from jobq.lifecycle.handles import TaskHandle
from jobq.lifecycle.waiting import is_terminal


@click.command()
@click.argument("task_id", metavar="ID", type=TASK_ID)
@click.option(
    "--timeout", type=Duration(), default=None,
    help="Wait at most this long: 90 (seconds), 30s, 15m; 0: do not wait "
    "(default: until the task ends).",
)  # fmt: skip
@database_url_option
def result(task_id: int, timeout: float | None, database_url: str) -> None:
    """Print task ID's result as JSON, once it is done.

    Waits for the task to end (at most --timeout). Exits 1, saying why on stderr, if the
    task failed (its stored error, traceback included), was cancelled, is not over when
    --timeout passes (with its status then), or does not exist.
    """
    with store_for(database_url, read_only=True) as store:
        # A first look on its own: an unknown task, or an unreachable database, is said
        # before anything starts listening for the task's end, and an ended task needs
        # none (timeout 0: one more look, nothing started, nothing written).
        task = store.get(task_id)
        if task is None:
            raise JobqError(f"no task {task_id}")
        try:
            value = TaskHandle(task_id, store).result(0 if is_terminal(task) else timeout)
        except TaskNotFound:  # deleted meanwhile
            raise JobqError(f"no task {task_id}") from None
        except TaskFailed as failure:
            if failure.error:
                click.echo(_printable(failure.error.rstrip("\n")), err=True)
            raise
    if isinstance(value, Undecodable):
        click.echo(f"error: task {task_id}'s stored result is not JSON: {value.reason}", err=True)
        click.echo(_printable(value.text))
        sys.exit(1)
    click.echo(_printable(json.dumps(value, ensure_ascii=False)))


def _printable(text: str) -> str:
    """``text`` with what a terminal cannot print (lone surrogates) escaped."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
